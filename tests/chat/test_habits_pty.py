"""Claude Code's chat habits in a real pseudo-terminal: `code-puppy "task"` opens the chat with that first turn
(`code-puppy -- usage` sends the word), `/cost`, `/clear` and `/quit` run `/usage`, `/new` and `/exit`, and Claude
Code's commands with no counterpart say what to use."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.pty_chat import PtyChat


def user_messages(server: FakeLLMServer, index: int) -> list[str]:
    return [m["content"] for m in server.requests[index].body["messages"] if m["role"] == "user"]


@pytest.mark.parametrize(("args", "sent"), [(("fix the bug",), "fix the bug"), (("--", "usage"), "usage")])
def test_words_open_the_chat_with_that_first_turn(
    server: FakeLLMServer, project: Path, args: tuple[str, ...], sent: str
) -> None:
    server.script(text("On it."))
    chat = PtyChat(project, *args)
    try:
        screen = chat.wait_turn("On it.")
        assert f"› {sent}" in screen
        assert user_messages(server, 0) == [sent]
        chat.type("/quit\r")
        assert chat.wait_exit() == 0
    finally:
        chat.close()


def test_options_after_the_prompts_words_apply_to_the_chat(
    server: FakeLLMServer, code_puppy_home: Path, project: Path
) -> None:
    config = code_puppy_home / "config.toml"
    config.write_text(config.read_text() + f'[models.other]\nname = "other-model"\nbase_url = "{server.base_url}"\n')
    server.script(tool_calls(call("write_file", {"path": "notes.txt", "content": "new\n"})), text("Wrote."))
    chat = PtyChat(project, "write notes", "-m", "other", "--permission-mode", "accept-edits")
    try:
        screen = chat.wait_turn("Wrote.")
        assert "› write notes\n" in screen
        assert user_messages(server, 0) == ["write notes"]
        assert server.requests[0].body["model"] == "other-model"
        assert (project / "notes.txt").read_text() == "new\n"  # accept-edits: written without asking
        chat.type("/quit\r")
        assert chat.wait_exit() == 0
    finally:
        chat.close()


def test_cost_clear_and_claude_commands_without_a_counterpart(server: FakeLLMServer, project: Path) -> None:
    server.script(text("One."))
    chat = PtyChat(project, "first question", env={"ANTHROPIC_API_KEY": "sk-ant-test"})
    try:
        chat.wait_turn("One.")
        first = chat.wait_for("session ").split(" · session ")[1][:8]
        chat.type("/cost\r")
        chat.wait_for(f"session {first}: 1 request ")
        chat.type("/status\r")
        chat.wait_for("unknown command /status here: the toolbar shows the session")
        chat.type("/drop\r")  # aider's
        chat.wait_for("unknown command /drop here: there is no set of files in the chat; @FILE attaches one")
        chat.type("/model sonnet\r")
        chat.wait_for("model: anthropic:claude-sonnet-5-5")
        chat.type("/clear\r")
        second = chat.wait_for("new session ").split("new session ")[1][:8]
        assert second != first
        chat.type("/quit\r")
        assert chat.wait_exit() == 0
    finally:
        chat.close()


def test_quit_works_while_a_turn_runs_as_exit_does(server: FakeLLMServer, project: Path) -> None:
    server.script(text("too late", delay=30))
    chat = PtyChat(project, "a long task")
    try:
        chat.wait_for("steer›")  # the turn is running
        chat.type("/quit\r")
        assert chat.wait_exit(timeout=20) == 0
        assert "too late" not in chat.text
    finally:
        chat.close()
