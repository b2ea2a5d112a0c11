"""The interactive chat with what the lead wired into it: plugins, `/compact`, `/mcp` (its servers kept across `/model`
and `/new`), `--no-plugins`, `--no-mcp`.

A real pseudo-terminal (tests/pty_chat.py) against the fake model server; a user plugin in $CODE_PUPPY_HOME/plugins
records its hooks to a file; the MCP server is the real echo server over stdio.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests import test_mcp
from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.pty_chat import PtyChat
from tests.test_mcp import ECHO_TOOLS, configure, processes_tagged, servers_tagged, stdio_server
from tests.test_plugins_cli import records, tool_messages, user_plugin

tag = test_mcp.tag
"""The fixture marking the echo servers a test starts, for `ps`; none may outlive the test."""

PLUGIN = """
import json, os, code_puppy

def record(*fields):
    with open(os.environ["PLUGIN_LOG"], "a") as log:
        log.write(json.dumps(fields) + "\\n")

@code_puppy.hookimpl
def startup():
    record("startup")

@code_puppy.hookimpl
def shutdown():
    record("shutdown")

@code_puppy.hookimpl
def user_prompt_submit(prompt):
    if prompt.startswith("rewrite me:"):
        return "rewritten:" + prompt.removeprefix("rewrite me:")

@code_puppy.hookimpl
def agent_run_start(prompt):
    record("agent_run_start", prompt)

@code_puppy.hookimpl
def agent_run_end(result, error):
    record("agent_run_end", result.output if result is not None else None, error is not None)

@code_puppy.hookimpl
def pre_tool_call(tool_name, args):
    if tool_name == "read_file" and args.get("path") == "secret.txt":
        return "secrets stay secret"

@code_puppy.hookimpl
def turn_end(result):
    if result.output == "Want more?":
        return "yes, one more"

@code_puppy.hookimpl
def register_commands(register):
    async def woof(text):
        return f"woof woof: {text or 'nothing'}"
    register("woof", woof, "bark back (from the watcher plugin)")
"""


@pytest.fixture
def plugin_log(code_puppy_home: Path, tmp_path: Path) -> Path:
    """The file the user plugin `watcher` records its hooks in."""
    user_plugin(code_puppy_home, "watcher", PLUGIN)
    return tmp_path / "plugin.log"


def open_chat(project: Path, *args: str, env: dict[str, str] | None = None) -> PtyChat:
    terminal = PtyChat(project, *args, env=env)
    terminal.wait_for("session ")  # the toolbar names the session once the runtime has loaded
    return terminal


def user_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def exit_chat(chat: PtyChat) -> None:
    chat.type("/exit\r")
    assert chat.wait_exit() == 0


def test_plugin_rewrites_the_prompt_adds_a_follow_up_and_sees_every_run(
    server: FakeLLMServer, project: Path, plugin_log: Path
) -> None:
    server.script(text("Want more?"), text("Here is more."), text("Plain."))
    chat = open_chat(project, env={"PLUGIN_LOG": str(plugin_log)})
    try:
        assert records(plugin_log) == [["startup"]]
        chat.type("rewrite me: the title\r")
        chat.wait_turn("Here is more.")
        assert "Want more?" in chat.text
        assert "2 requests" in chat.text  # one turn, two runs: the follow-up ran in it
        chat.type("no rewrite\r")
        chat.wait_turn("Plain.")
        exit_chat(chat)
    finally:
        chat.close()
    assert [user_messages(r.body) for r in server.requests] == [
        ["rewritten: the title"],
        ["rewritten: the title", "yes, one more"],
        ["rewritten: the title", "yes, one more", "no rewrite"],
    ]
    assert len({r.body["messages"][0]["content"] for r in server.requests}) == 1  # one session: one system prompt
    assert records(plugin_log) == [
        ["startup"],
        ["agent_run_start", "rewritten: the title"],
        ["agent_run_end", "Want more?", False],
        ["agent_run_start", "yes, one more"],
        ["agent_run_end", "Here is more.", False],
        ["agent_run_start", "no rewrite"],
        ["agent_run_end", "Plain.", False],
        ["shutdown"],
    ]


def test_plugin_blocks_a_tool_call_and_adds_a_slash_command(
    server: FakeLLMServer, project: Path, plugin_log: Path
) -> None:
    (project / "secret.txt").write_text("hunter2\n")
    server.script(tool_calls(call("read_file", {"path": "secret.txt"})), text("Could not read it."))
    chat = open_chat(project, "--permission-mode", "yolo", env={"PLUGIN_LOG": str(plugin_log)})
    try:
        chat.type("read the secret\r")
        screen = chat.wait_turn("Could not read it.")
        assert "⚙ read_file(secret.txt) · denied: Blocked by plugin watcher: secrets stay secret" in screen
        chat.type("/woof hello\r")
        chat.wait_for("woof woof: hello")
        chat.type("/help\r")
        chat.wait_for("/woof         bark back (from the watcher plugin)")
        exit_chat(chat)
    finally:
        chat.close()
    assert tool_messages(server.requests[1].body) == ["Blocked by plugin watcher: secrets stay secret"]
    assert "hunter2" not in json.dumps(server.requests[1].body)


STRICT = """
import code_puppy

@code_puppy.hookimpl
def user_prompt_submit(prompt):
    if prompt == "forbidden":
        raise code_puppy.PromptBlocked("not that")

@code_puppy.hookimpl
def turn_end(result):
    return "again"

@code_puppy.hookimpl
def register_commands(register):
    def boom(text):
        raise RuntimeError("kaput")
    register("boom", boom, "a command that fails")
"""


def test_a_blocked_prompt_a_spent_follow_up_limit_and_a_failing_command_are_one_line_each(
    server: FakeLLMServer, code_puppy_home: Path, project: Path
) -> None:
    user_plugin(code_puppy_home, "strict", STRICT)
    with (code_puppy_home / "config.toml").open("a") as config:
        config.write("[plugins]\nmax_continuations = 1\n")
    server.script(text("One."), text("Two."))
    chat = open_chat(project)
    try:
        chat.type("forbidden\r")
        chat.wait_turn("✗ prompt blocked by plugin strict: not that")
        chat.type("/boom\r")
        chat.wait_for("✗ RuntimeError: kaput")
        chat.type("go\r")
        screen = chat.wait_turn("Two.")
        assert "stopped after 1 follow-ups ([plugins] max_continuations); not run: again" in screen
        exit_chat(chat)
    finally:
        chat.close()
    assert [user_messages(r.body) for r in server.requests] == [["go"], ["go", "again"]]


def test_no_plugins_runs_the_chat_without_them(server: FakeLLMServer, project: Path, plugin_log: Path) -> None:
    server.script(text("Want more?"))
    chat = open_chat(project, "--no-plugins", env={"PLUGIN_LOG": str(plugin_log)})
    try:
        chat.type("rewrite me: the title\r")
        chat.wait_turn("Want more?")
        chat.type("/woof\r")
        chat.wait_for("unknown command /woof")
        chat.type("/help\r")
        chat.wait_for("/usage")
        assert "/woof " not in chat.text
        exit_chat(chat)
    finally:
        chat.close()
    assert [user_messages(r.body) for r in server.requests] == [["rewrite me: the title"]]  # no follow-up either
    assert not plugin_log.exists()


def test_compact_summarizes_the_history_stores_it_and_the_next_turn_sends_it(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    server.script(
        text("First answer."),
        tool_calls(call("read_file", {"path": "README.md"})),
        text("The readme is a title."),
        text("SUMMARY: an opening exchange."),
        text("After the compaction."),
    )
    chat = open_chat(project)
    try:
        chat.type("first question\r")
        chat.wait_turn("First answer.")
        chat.type("read the readme\r")
        chat.wait_turn("The readme is a title.")
        session_id = chat.text.split(" · session ")[1][:8]
        chat.type("/compact\r")
        chat.wait_for("compacted 6 → 4 messages; the old history stays stored")
        exported = json.loads(run_cli("sessions", "export", session_id, cwd=project).stdout)
        chat.type("third question\r")
        chat.wait_turn("After the compaction.")
        exit_chat(chat)
    finally:
        chat.close()
    assert len(server.requests) == 5
    summarized = server.requests[3].body["messages"][-1]["content"]  # the summary request: the two oldest messages
    assert summarized.endswith("<messages>\nUser: first question\nAssistant: First answer.\n</messages>")
    summary = "Summary of previous conversation:\n\nSUMMARY: an opening exchange."
    stored = exported["messages"]
    assert exported["session"]["message_count"] == len(stored) == 4
    # stored as the next run sends it: the summary and the kept prompt in one request, so no second branch
    assert [part["content"] for part in stored[0]["parts"]] == [summary, "read the readme"]
    assert [m["kind"] for m in stored] == ["request", "response", "request", "response"]
    assert "first question" not in json.dumps(stored)
    sent = server.requests[4].body["messages"]
    assert sent[0] == {"role": "system", "content": summary}
    assert [m["role"] for m in sent if m["role"] != "system"] == ["user", "assistant", "tool", "assistant", "user"]
    assert user_messages(server.requests[4].body) == ["read the readme", "third question"]
    # The compaction's copies of kept messages are no new text: indexed once, and no turn of their own.
    assert run_cli("sessions", "list", cwd=project).stdout.splitlines()[1].split()[2] == "3"
    with sqlite3.connect(code_puppy_home / "sessions.db") as db:
        indexed = [row for row in db.execute("SELECT role, text FROM search_text ORDER BY id")]
    assert indexed == [
        ("user", "first question"),
        ("model", "First answer."),
        ("user", "read the readme"),
        ("model", "The readme is a title."),
        ("user", "third question"),
        ("model", "After the compaction."),
    ]


def test_mcp_shows_the_servers_before_and_after_they_start_and_exit_stops_them(
    server: FakeLLMServer, code_puppy_home: Path, project: Path, tag: str
) -> None:
    configure(code_puppy_home, server, echo=stdio_server(tag, deny_tools=["crash"]))
    server.script(text("Ready."))
    chat = open_chat(project)
    try:
        chat.type("/mcp\r")
        chat.wait_for("(servers start with the first turn that needs them)")
        assert "echo (stdio) stopped\n" in chat.text
        assert processes_tagged(tag) == []
        chat.type("hello\r")
        chat.wait_turn("Ready.")
        assert len(servers_tagged(tag)) == 1
        chat.type("/mcp\r")
        chat.wait_for(f"echo (stdio) running · {len(ECHO_TOOLS) - 1} tools")
        exit_chat(chat)
    finally:
        chat.close()
    offered = {tool["function"]["name"] for tool in server.requests[0].body["tools"]}
    assert offered >= set(ECHO_TOOLS) - {"echo_crash"} and "echo_crash" not in offered
    assert processes_tagged(tag) == []


def test_no_mcp_leaves_the_servers_out_of_the_chat(
    server: FakeLLMServer, code_puppy_home: Path, project: Path, tag: str
) -> None:
    configure(code_puppy_home, server, echo=stdio_server(tag))
    server.script(text("Ready."))
    chat = open_chat(project, "--no-mcp")
    try:
        chat.type("hello\r")
        chat.wait_turn("Ready.")
        chat.type("/mcp\r")
        chat.wait_for("no MCP servers enabled")
        assert processes_tagged(tag) == []
        exit_chat(chat)
    finally:
        chat.close()
    assert not {tool["function"]["name"] for tool in server.requests[0].body["tools"]} & set(ECHO_TOOLS)


def test_an_mcp_server_serves_on_across_model_and_new(
    server: FakeLLMServer, code_puppy_home: Path, project: Path, tag: str
) -> None:
    configure(code_puppy_home, server, echo=stdio_server(tag))
    with (code_puppy_home / "config.toml").open("a") as config:
        config.write(f'\n[models.other]\nname = "other-model"\nbase_url = "{server.base_url}"\n')
    server.script(
        tool_calls(call("echo_echo", {"text": "one"})),
        text("First."),
        tool_calls(call("echo_echo", {"text": "two"})),
        text("Second."),
    )
    chat = open_chat(project, "--allow", "mcp__echo")
    try:
        chat.type("echo one\r")
        chat.wait_turn("First.")
        started = processes_tagged(tag)  # the server and the shell that keeps its process group
        assert len(servers_tagged(tag)) == 1
        chat.type("/model other\r")
        chat.wait_for("model: other")
        chat.type("/new\r")
        chat.wait_for("new session ")
        assert processes_tagged(tag) == started
        chat.type("echo two\r")
        chat.wait_turn("Second.")
        assert processes_tagged(tag) == started
        exit_chat(chat)
    finally:
        chat.close()
    assert (project / "calls.log").read_text() == "echo one\necho two\n"
    assert [r.body["model"] for r in server.requests] == ["fake-model", "fake-model", "other-model", "other-model"]
    assert user_messages(server.requests[2].body) == ["echo two"]  # a new session: nothing of the first one
    assert [m["content"] for m in server.requests[3].body["messages"] if m["role"] == "tool"] == ["two"]
