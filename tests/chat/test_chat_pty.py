"""The interactive chat in a real pseudo-terminal, against the fake model server with delayed replies."""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from code_puppy.chat.chat_sink import thousands
from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, call, hang, text, tool_calls
from tests.pty_chat import PtyChat
from tests.test_mcp import processes_tagged

CTRL_C, CTRL_D = "\x03", "\x04"


@pytest.fixture
def chat(server: FakeLLMServer, project: Path) -> Iterator[PtyChat]:
    terminal = PtyChat(project)
    terminal.wait_for("session ")  # the toolbar names the session once the runtime has loaded
    yield terminal
    terminal.close()


def user_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def shows(*texts: str) -> Callable[[str], bool]:
    """A `wait_for` check: the screen shows each text, wherever a long line wrapped (spaces ignored)."""
    return lambda screen: all("".join(text.split()) in "".join(screen.split()) for text in texts)


def wait_until(condition: Any, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_prompt_shows_before_pydantic_ai_is_imported(server: FakeLLMServer, project: Path, tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    terminal = PtyChat(project, env={"CODE_PUPPY_STARTUP_TRACE": str(trace)})
    try:
        terminal.wait_for("\n›")
        wait_until(trace.exists)
        assert trace.read_text() == "prompt drawn; imported so far: none of pydantic, pydantic_ai\n"
        terminal.wait_for("session ")
        terminal.type("/exit\r")
        assert terminal.wait_exit() == 0
    finally:
        terminal.close()


def test_a_turn_streams_then_shows_markdown(server: FakeLLMServer, chat: PtyChat) -> None:
    server.script(text("**Bold** start of a streamed answer.\n\n- one\n- two", chunk_delay=0.15))
    chat.type("hello\r")
    streaming = chat.wait_for(lambda screen: "writing" in screen and "**Bold** start" in screen)
    assert "\nsteer›" in streaming  # the input stays live while it streams
    screen = chat.wait_turn("• two")
    assert "Bold start of a streamed answer." in screen and "**" not in screen
    assert chat.screen.buffer[chat.row_of("Bold start")][0].bold
    assert user_messages(server.requests[0].body) == ["hello"]


def test_enter_during_the_final_answer_reaches_the_next_request_of_the_same_run(
    server: FakeLLMServer, chat: PtyChat
) -> None:
    server.script(
        text("A long first answer that streams slowly, word by word.", chunk_delay=0.2),
        text("Second round, with the steer."),
    )
    chat.type("explain\r")
    chat.wait_for("A long first")
    chat.type("mention the tests\r")
    chat.wait_turn("Second round, with the steer.")
    assert "↪ steer: mention the tests" in chat.text
    assert len(server.requests) == 2
    second = server.requests[1].body["messages"]
    assert [m["role"] for m in second if m["role"] != "system"] == ["user", "assistant", "user"]
    assert user_messages(server.requests[1].body) == ["explain", "mention the tests"]


def test_enter_during_a_tool_call_reaches_the_next_request(server: FakeLLMServer, chat: PtyChat) -> None:
    server.script(tool_calls(call("read_file", {"path": "README.md"}), delay=1.0), text("done"))
    chat.type("read the readme\r")
    wait_until(lambda: len(server.requests) == 1)
    chat.type("and summarise it\r")
    chat.wait_turn("done")
    messages = server.requests[1].body["messages"]
    assert [m["role"] for m in messages if m["role"] != "system"] == ["user", "assistant", "tool", "user"]
    assert messages[-1]["content"] == "and summarise it"


def test_tab_queues_the_next_turn(server: FakeLLMServer, chat: PtyChat) -> None:
    server.script(text("First turn answer, streaming slowly.", chunk_delay=0.2), text("Queued turn answer."))
    chat.type("first\r")
    chat.wait_for("First turn")
    chat.type("then this\t")
    chat.wait_for("1 queued")
    chat.wait_turn("Queued turn answer.")
    assert "› then this" in chat.text
    assert user_messages(server.requests[1].body) == ["first", "then this"]
    assert len(server.requests[1].body["messages"]) > len(server.requests[0].body["messages"])


def test_ctrl_c_cancels_the_turn_keeps_the_draft_and_the_chat_goes_on(server: FakeLLMServer, chat: PtyChat) -> None:
    server.script(hang(), text("After the cancel."))
    chat.type("wait forever\r")
    wait_until(lambda: len(server.requests) == 1)
    chat.type("run this next\t")
    chat.wait_for("1 queued")
    chat.type("half typed")
    chat.type(CTRL_C)
    chat.wait_for("turn cancelled")
    # Nothing typed is lost: the queued turn and the draft are back in the input, to edit or send.
    chat.wait_for(lambda screen: "› run this next\n  half typed" in screen)
    chat.type(CTRL_C)  # at the idle prompt it clears the input
    chat.wait_for(lambda _: chat.prompt_line() == "›")
    chat.type("next\r")
    chat.wait_turn("After the cancel.")
    assert user_messages(server.requests[1].body) == ["wait forever", "next"]  # the cancelled prompt was kept


def test_ctrl_c_during_a_shell_command_returns_promptly(server: FakeLLMServer, project: Path) -> None:
    server.script(tool_calls(call("shell", {"command": "sleep 30"})), text("never"))
    chat = PtyChat(project, "--permission-mode", "yolo")
    try:
        chat.wait_for("session ")
        chat.type("sleep\r")
        chat.wait_for("running shell(sleep 30)")
        started = time.monotonic()
        chat.type(CTRL_C)
        chat.wait_for("turn cancelled", timeout=5)
        assert time.monotonic() - started < 3
        chat.type("/exit\r")
        assert chat.wait_exit() == 0
    finally:
        chat.close()


def test_approvals_yes_and_no_with_the_diff(server: FakeLLMServer, chat: PtyChat, project: Path) -> None:
    server.script(
        tool_calls(call("shell", {"command": "touch made.txt"})),
        text("Made it."),
        tool_calls(call("edit_file", {"path": "README.md", "old_text": "# demo project", "new_text": "# renamed"})),
        text("Left it."),
    )
    chat.type("make a file\r")
    chat.wait_for("Allow?")
    assert "touch made.txt" in chat.text
    chat.type("y")
    chat.wait_turn("Made it.")
    assert (project / "made.txt").exists()
    chat.type("rename the readme title\r")
    chat.wait_for("Allow?")
    assert (chat.colour_at("-# demo project"), chat.colour_at("+# renamed")) == ("red", "green")
    chat.type("n")
    chat.wait_turn("Left it.")
    assert (project / "README.md").read_text() == "# demo project\n"
    denied = [m for m in server.requests[3].body["messages"] if m["role"] == "tool"][-1]
    assert "The user denied this call" in denied["content"]


def test_an_accepted_edit_renders_as_a_coloured_diff(server: FakeLLMServer, project: Path) -> None:
    server.script(
        tool_calls(call("write_file", {"path": "notes.txt", "content": "first line\nsecond line\n"})), text("Wrote.")
    )
    chat = PtyChat(project, "--permission-mode", "accept-edits")
    try:
        chat.wait_for("session ")
        chat.type("write notes\r")
        chat.wait_turn("Wrote.")
        assert "⚙ write_file(notes.txt)" in chat.text
        assert (chat.colour_at("+first line"), chat.colour_at("+second line")) == ("green", "green")
    finally:
        chat.close()


def test_exit_with_slash_exit_ctrl_d_or_ctrl_c_twice(server: FakeLLMServer, project: Path) -> None:
    for keys in ("/exit\r", CTRL_D, CTRL_C + CTRL_C):
        chat = PtyChat(project)
        try:
            chat.wait_for("\n›")
            chat.type(keys)
            assert chat.wait_exit() == 0, keys
        finally:
            chat.close()


def test_code_puppy_steer_reaches_a_running_chat_turn(server: FakeLLMServer, chat: PtyChat, project: Path) -> None:
    server.script(text("Working on it", delay=1.5), text("Adjusted."))
    chat.type("start\r")
    wait_until(lambda: len(server.requests) == 1)
    completed = run_cli("steer", "from another terminal", cwd=project)
    assert completed.returncode == 0, completed.stderr
    chat.wait_turn("Adjusted.")
    assert "↪ steer: from another terminal" in chat.text
    assert user_messages(server.requests[1].body) == ["start", "from another terminal"]
    assert json.loads(json.dumps(server.requests[1].body))  # the request went through the real client


def test_code_puppy_steer_cancel_cancels_a_chat_turn_and_the_chat_goes_on(
    server: FakeLLMServer, chat: PtyChat, project: Path
) -> None:
    server.script(tool_calls(call("list_files", {})), hang(), text("Went on."))
    chat.type("look around\r")
    wait_until(lambda: len(server.requests) == 2)  # the listing is done; the next answer never comes
    completed = run_cli("steer", "--cancel", cwd=project)
    assert (completed.returncode, completed.stderr) == (0, "")
    assert completed.stdout.startswith("cancelled the turn of session ")
    chat.wait_for(shows("⏹ cancel requested from outside this terminal", "⏹ turn cancelled · finished work kept"))
    chat.wait_for(lambda _: chat.prompt_line() == "›")
    chat.type("next\r")
    chat.wait_turn("Went on.")
    body = server.requests[2].body
    assert user_messages(body) == ["look around", "next"]
    assert [m["role"] for m in body["messages"] if m["role"] == "tool"] == ["tool"]  # the listing was kept


def test_a_bad_config_ends_the_chat_with_one_line_and_exit_2(code_puppy_home: Path, project: Path) -> None:
    (code_puppy_home / "config.toml").write_text("modle = 'typo'\n")
    chat = PtyChat(project)
    try:
        assert chat.wait_exit() == 2
        assert f"code-puppy: error: {code_puppy_home / 'config.toml'}: unknown key 'modle'" in chat.text
        assert "Traceback" not in chat.text
    finally:
        chat.close()


def test_ctrl_c_at_an_approval_denies_and_cancels(server: FakeLLMServer, chat: PtyChat, project: Path) -> None:
    server.script(tool_calls(call("shell", {"command": "touch never.txt"})), text("After."))
    chat.type("try it\r")
    chat.wait_for("Allow?")
    chat.type(CTRL_C)
    chat.wait_for("turn cancelled")
    assert not (project / "never.txt").exists()
    chat.type("go on\r")
    chat.wait_turn("After.")
    tool = [m for m in server.requests[1].body["messages"] if m["role"] == "tool"]
    assert len(tool) == 1 and "interrupted" in tool[0]["content"]  # the call never ran, the history stays valid


def test_shell_escape_multiline_input_and_per_project_history(
    server: FakeLLMServer, chat: PtyChat, code_puppy_home: Path
) -> None:
    server.script(text("Seen."))
    chat.type("!echo from-the-shell\r")
    chat.wait_for("exit 0")
    assert "$ echo from-the-shell\nfrom-the-shell" in chat.text
    chat.type("first line\\\rsecond line\x1b\rthird line\r")
    chat.wait_turn("Seen.")
    # The output goes with the typed text as a part of its own (which the session search leaves out).
    assert user_messages(server.requests[0].body)[-1] == [
        {"type": "text", "text": "first line\nsecond line\nthird line"},
        {
            "type": "text",
            "text": '<shell-command exit_code="0">\n$ echo from-the-shell\nfrom-the-shell\n</shell-command>',
        },
    ]
    (history,) = (code_puppy_home / "history").iterdir()
    assert "+first line\n+second line\n+third line\n" in history.read_text()
    # It holds everything typed: private to the user, as sessions.db is.
    assert (stat.S_IMODE(history.parent.stat().st_mode), stat.S_IMODE(history.stat().st_mode)) == (0o700, 0o600)


def test_a_shell_escape_runs_without_provider_keys(server: FakeLLMServer, project: Path) -> None:
    """`!cmd` gets the same scrubbed environment as the agent's shell tool: a provider key never reaches it."""
    chat = PtyChat(project, env={"OPENAI_API_KEY": "sk-bang-canary", "HARMLESS_MARKER": "kept"})
    try:
        chat.wait_for("session ")
        chat.type("!echo key=${OPENAI_API_KEY:-absent} marker=$HARMLESS_MARKER\r")
        chat.wait_for("exit 0")
        assert "key=absent marker=kept" in chat.text
        assert "sk-bang-canary" not in chat.text
    finally:
        chat.close()


def test_ctrl_c_during_a_shell_escape_ends_everything_it_started(
    server: FakeLLMServer, chat: PtyChat, project: Path
) -> None:
    tag = f"bang-test-{uuid.uuid4().hex}"
    sleeper = f"{sys.executable} -c 'import time; time.sleep(300)' {tag}"
    chat.type(f"!{sleeper} & {sleeper}\r")  # one in the background, one in the foreground, under `sh -c`
    try:
        wait_until(lambda: len(processes_tagged(tag)) == 3)
        chat.type(CTRL_C)
        chat.wait_for("⏹ cancelled")
        wait_until(lambda: processes_tagged(tag) == [], timeout=5)
    finally:
        for process in processes_tagged(tag):
            os.kill(int(process.split()[0]), signal.SIGKILL)
    server.script(text("Still here."))
    chat.type("hello\r")
    chat.wait_turn("Still here.")
    assert user_messages(server.requests[0].body) == ["hello"]  # a cancelled command passes nothing on


def test_continue_shows_where_the_session_left_off(server: FakeLLMServer, chat: PtyChat, project: Path) -> None:
    server.script(text("The first answer."), text("Continued."))
    chat.type("remember this\r")
    chat.wait_turn("The first answer.")
    chat.type("/exit\r")
    assert chat.wait_exit() == 0
    again = PtyChat(project, "-c")
    try:
        again.wait_for("resumed session")
        assert "› remember this" in again.text and "The first answer." in again.text
        again.type("and then?\r")
        again.wait_turn("Continued.")
        assert user_messages(server.requests[1].body) == ["remember this", "and then?"]
    finally:
        again.close()


def test_a_chat_killed_mid_turn_is_recovered_by_the_next_chat(
    server: FakeLLMServer, chat: PtyChat, project: Path
) -> None:
    server.script(tool_calls(call("read_file", {"path": "README.md"})), hang())
    chat.type("read the readme\r")
    wait_until(lambda: len(server.requests) == 2)
    chat.child.kill(9)
    chat.close()
    server.script(text("Picked up."))
    again = PtyChat(project, "-c")
    try:
        again.wait_for("recovered an interrupted turn: 3 steps")
        again.type("go on\r")
        again.wait_turn("Picked up.")
        assert user_messages(server.requests[2].body) == ["read the readme", "go on"]
    finally:
        again.close()


def test_session_model_usage_and_permission_commands(server: FakeLLMServer, chat: PtyChat) -> None:
    server.script(text("One."), text("Two."))
    chat.type("first question\r")
    chat.wait_turn("One.")
    first = chat.wait_for("session ").split(" · session ")[1][:8]
    used = server.requests[0].input_tokens + server.requests[0].output_tokens  # what the provider reported
    # The toolbar goes by the reported usage; the fake model has no price, so its cost is unknown, never $0.
    chat.wait_for(f"session {first} · ctx {thousands(used)} · cost unknown · ask")
    chat.type("/usage\r")
    chat.wait_for(f"session {first}: 1 request · ")  # the header says "request" of one, as its rows do
    chat.type("/permissions yolo\r")
    chat.wait_for("permission mode: yolo")
    chat.wait_for(" · yolo   /help")  # the toolbar
    chat.type("/new\r")
    second = chat.wait_for("new session ").split("new session ")[1][:8]
    assert second != first
    chat.type("/sessions\r")
    chat.wait_for("first question")
    chat.type(f"/resume {first}\r")
    chat.wait_for(f"resumed session {first}")
    chat.type("/model fake\r")
    chat.wait_for("model: fake")
    chat.type("second question\r")
    chat.wait_turn("Two.")
    assert user_messages(server.requests[1].body) == ["first question", "second question"]
    assert " · yolo   /help" in chat.text  # the mode survives a new session and a model switch


def test_permissions_auto_sandboxes_the_next_commands(server: FakeLLMServer, chat: PtyChat, project: Path) -> None:
    server.script(
        tool_calls(call("shell", {"command": "touch made.txt && touch /etc/code-puppy-pty-test"})), text("Tried.")
    )
    chat.type("/permissions auto\r")
    chat.wait_for("permission mode: auto")
    chat.type("make two files\r")  # no question to run it: auto runs every command, in the sandbox
    # It failed the way the sandbox makes commands fail: the user may let it run outside, once (no "always").
    chat.wait_for("Run it outside the sandbox?  y yes, once · n no")
    chat.type("a")  # not an answer here
    chat.type("n")
    chat.wait_turn("Tried.")
    (result,) = [m["content"] for m in server.requests[1].body["messages"] if m["role"] == "tool"]
    assert "The user did not let it run outside the sandbox" in result and "Read-only file system" in result
    assert (project / "made.txt").exists() and not Path("/etc/code-puppy-pty-test").exists()


def test_a_command_the_sandbox_stopped_runs_outside_once_the_user_says_yes(
    server: FakeLLMServer, chat: PtyChat, outside: Path
) -> None:
    outside = outside / "outside.txt"
    server.script(
        tool_calls(call("shell", {"command": f"echo made >> {outside}"})),
        tool_calls(call("shell", {"command": f"echo again >> {outside}"})),
        text("Done."),
    )
    chat.type("/permissions auto\r")
    chat.wait_for("permission mode: auto")
    chat.type("write outside\r")
    chat.wait_for(shows("echo made", "again outside the sandbox (it failed inside)", "Run it outside the sandbox?"))
    chat.type("y")
    # The next command is sandboxed again, so it fails and asks again.
    chat.wait_for(shows(f"echo again >> {outside}` again outside the sandbox", "Run it outside the sandbox?"))
    chat.type("n")
    chat.wait_turn("Done.")
    assert outside.read_text() == "made\n"


def test_the_model_can_ask_to_run_a_command_outside_the_sandbox(
    server: FakeLLMServer, chat: PtyChat, outside: Path
) -> None:
    outside = outside / "asked.txt"
    server.script(
        tool_calls(call("shell", {"command": f"touch {outside}", "unsandboxed": True, "reason": "needs the host"})),
        tool_calls(call("shell", {"command": f"touch {outside}.2", "unsandboxed": True, "reason": "again"})),
        text("Done."),
    )
    chat.type("/permissions auto\r")
    chat.wait_for("permission mode: auto")
    chat.type("touch it\r")
    chat.wait_for(shows("outside the sandbox (needs the host)", "Run it outside the sandbox?"))
    chat.type("y")
    chat.wait_for(shows("outside the sandbox (again)", "Run it outside the sandbox?"))
    chat.type("n")
    chat.wait_turn("Done.")
    assert outside.exists() and not Path(f"{outside}.2").exists()
    shell = next(t for t in server.requests[0].body["tools"] if t["function"]["name"] == "shell")
    assert {"unsandboxed", "reason"} <= set(shell["function"]["parameters"]["properties"])
    results = [m["content"] for m in server.requests[2].body["messages"] if m["role"] == "tool"]
    assert results[1] == "The user did not let it run outside the sandbox, so it did not run."


def test_approval_prompts_spell_out_the_control_characters_of_what_the_model_sent(
    server: FakeLLMServer, chat: PtyChat, project: Path, outside: Path
) -> None:
    """Issue 23: an escape sequence in a command erased the line and wrote `ls -la` where `rm -rf` stood."""
    (project / "important_data").mkdir()
    repaint = "\x1b[2K\x1b[1G"  # erase the line, back to its first column
    server.script(
        tool_calls(call("shell", {"command": f"rm -rf ./important_data #{repaint}ls -la"})),
        tool_calls(call("write_file", {"path": "notes.txt", "content": f"x = 1{repaint}+print('hi')\n"})),
        text("Asked."),
        tool_calls(call("shell", {"command": f"touch {outside}/x", "unsandboxed": True, "reason": f"a{repaint}b\r"})),
        text("Done."),
    )
    chat.type("clean up\r")
    chat.wait_for("Allow?")
    assert r"  rm -rf ./important_data #\x1b[2K\x1b[1Gls -la" in chat.text.splitlines()
    chat.type("n")
    chat.wait_for(shows(r"+x = 1\x1b[2K\x1b[1G+print('hi')", "Allow?"))
    chat.type("n")
    chat.wait_turn("Asked.")
    assert r"⚙ shell(rm -rf ./important_data #\x1b[2K\x1b[1Gls -la) · denied" in chat.text
    chat.type("/permissions auto\r")
    chat.wait_for("permission mode: auto")
    chat.type("touch it\r")
    chat.wait_for(shows(r"outside the sandbox (a\x1b[2K\x1b[1Gb\r)", "Run it outside the sandbox?"))
    chat.type("n")
    chat.wait_turn("Done.")
    assert (project / "important_data").is_dir() and not (project / "notes.txt").exists()
    assert not (outside / "x").exists()


def test_permissions_auto_without_a_sandbox_keeps_the_mode(
    server: FakeLLMServer, code_puppy_home: Path, project: Path
) -> None:
    with (code_puppy_home / "config.toml").open("a") as config:
        config.write('[sandbox]\nmechanism = "bwrap"\nbwrap = "/nonexistent/bwrap"\n')
    chat = PtyChat(project)
    try:
        chat.wait_for("session ")
        chat.type("/permissions auto\r")
        chat.wait_for("permission mode auto needs the sandbox, and no bwrap program at /nonexistent/bwrap")
        chat.type("/permissions\r")
        chat.wait_for("permission mode: ask")
    finally:
        chat.close()


def test_a_mention_of_a_file_that_is_not_there_is_said_and_sent_as_text(server: FakeLLMServer, chat: PtyChat) -> None:
    server.script(text("Looked."))
    chat.type("compare @README.md with @nothere.py\r")
    screen = chat.wait_turn("Looked.")
    lines = screen.splitlines()
    start = lines.index(next(line for line in lines if line.endswith("compare @README.md with @nothere.py")))
    assert lines[start + 1 : start + 3] == [
        "  ↳ attached README.md",
        "  ↳ nothing attached for @nothere.py: no such file in the project (sent as text)",
    ]
    sent = user_messages(server.requests[0].body)[-1]
    assert [part["text"] for part in sent] == [
        "compare @README.md with @nothere.py",
        '<file path="README.md">\n# demo project\n</file>',
    ]
