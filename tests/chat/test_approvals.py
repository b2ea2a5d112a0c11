"""Approvals through pydantic-ai's RequestInput: yes, no, always-for-this-session, and the diff shown."""

from __future__ import annotations

import io
import sys
import uuid
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ToolCallPart
from rich.console import Console

from code_puppy.chat.approvals import Answer, Approver, proposed_diff
from code_puppy.config import McpServerConfig, Settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent, capability
from code_puppy.core.turn import run_turn
from code_puppy.headless.sinks import TextSink
from code_puppy.permissions.policy import PermissionPolicy
from code_puppy.run.deps import RunDeps
from code_puppy.sessions.session import Session
from tests.scripted_model import scripted, tool_returns
from tests.test_mcp import ECHO_SERVER, processes_tagged


def shell(command: str, call_id: str) -> list[ToolCallPart]:
    return [ToolCallPart("shell", {"command": command}, tool_call_id=call_id)]


def the_policy(agent: Any) -> PermissionPolicy:
    policy = capability(agent, PermissionPolicy)
    assert policy is not None
    return policy


async def test_always_allows_the_same_command_for_the_rest_of_the_session(project: Path) -> None:
    asked: list[str] = []
    answers: list[Answer] = ["always", "no"]

    async def confirm(items: list[Any], question: str) -> Answer:
        asked.append(str(items[0]))
        return answers[len(asked) - 1]

    session = Session.in_memory()
    script = scripted(shell("echo one", "a"), shell("echo one", "b"), shell("touch other.txt", "c"), "done")
    shown: set[str] = set()
    policy: list[PermissionPolicy] = []

    async def ask(ctx: Any, requests: Any, token: str) -> Any:
        return await Approver(policy[0], project.resolve(), confirm, lambda: shown)(ctx, requests, token)

    agent = build_pydantic_agent(Settings(), AgentOptions(model=script.model, project_root=project))
    policy.append(the_policy(agent))
    outcome = await run_turn(agent, RunDeps(session, ask=ask), "go", TextSink(io.StringIO(), io.StringIO()))
    assert outcome.error is None
    assert asked == ["⚠ shell wants to run:", "⚠ shell wants to run:"]  # `echo one` was asked about once
    assert policy[0].session_allowed == {"shell:echo one"}
    returns = tool_returns(session.messages)
    assert [(name, outcome) for name, outcome, _ in returns] == [
        ("shell", "success"),
        ("shell", "success"),
        ("shell", "denied"),
    ]
    assert "The user denied this call (run `touch other.txt`)." in returns[2][2]
    assert not (project / "other.txt").exists()


def test_the_proposed_diff_of_an_edit_and_a_write(project: Path) -> None:
    (project / "app.py").write_text("a = 1\nb = 2\n")
    edit = {"path": "app.py", "old_text": "b = 2", "new_text": "b = 3"}
    assert proposed_diff(project, "edit_file", edit) == (
        "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n+b = 3"
    )
    assert proposed_diff(project, "write_file", {"path": "new.txt", "content": "hello\n"}) == (
        "--- a/new.txt\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hello"
    )
    assert proposed_diff(project, "edit_file", {**edit, "old_text": "missing"}) is None
    assert proposed_diff(project, "write_file", {"path": "../outside.txt", "content": "x"}) is None
    assert proposed_diff(project, "shell", {"command": "ls"}) is None


async def test_always_for_edits_never_covers_a_path_that_configures_an_agent(project: Path) -> None:
    asked: list[str] = []
    answers: list[Answer] = ["always", "always", "no"]

    async def confirm(items: list[Any], question: str) -> Answer:
        asked.append(str(items[0]))
        return answers[len(asked) - 1]

    def write(path: str, call_id: str) -> list[ToolCallPart]:
        return [ToolCallPart("write_file", {"path": path, "content": "x\n"}, tool_call_id=call_id)]

    (project / ".code-puppy").mkdir()
    session = Session.in_memory()
    script = scripted(
        write("a.txt", "a"),
        write("b.txt", "b"),
        write(".code-puppy/config.toml", "c"),
        write("./.code-puppy/../.code-puppy/config.toml", "d"),
        write(".mcp.json", "e"),
        "done",
    )
    policy: list[PermissionPolicy] = []

    async def ask(ctx: Any, requests: Any, token: str) -> Any:
        return await Approver(policy[0], project.resolve(), confirm, set)(ctx, requests, token)

    agent = build_pydantic_agent(Settings(), AgentOptions(model=script.model, project_root=project))
    policy.append(the_policy(agent))
    outcome = await run_turn(agent, RunDeps(session, ask=ask), "go", TextSink(io.StringIO(), io.StringIO()))
    assert outcome.error is None
    assert asked == [
        "⚠ write_file wants to write file a.txt",
        "⚠ write_file wants to write file .code-puppy/config.toml, which configures code-puppy or another agent "
        "(always asked, in every mode but yolo)",
        "⚠ write_file wants to write file .mcp.json, which configures code-puppy or another agent "
        "(always asked, in every mode but yolo)",
    ]
    assert policy[0].session_allowed == {"tool:write_file", "config:write_file:.code-puppy/config.toml"}
    assert [outcome for _, outcome, _ in tool_returns(session.messages)] == [
        "success",
        "success",
        "success",
        "success",
        "denied",
    ]
    assert not (project / ".mcp.json").exists()


def test_the_proposed_diff_of_a_multi_edit_is_what_the_harness_applies(project: Path) -> None:
    (project / "app.py").write_text("a = 1\nb = 2\nc = 3\n")
    # The second replacement matches only the text the first one made: they apply in order, as the tool does.
    edits = [{"old_text": "a = 1", "new_text": "a = 10"}, {"old_text": "a = 10\nb", "new_text": "a = 10\nbb"}]
    assert proposed_diff(project, "edit_file", {"path": "app.py", "replacements": edits}) == (
        "--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,3 @@\n-a = 1\n-b = 2\n+a = 10\n+bb = 2\n c = 3"
    )
    (project / "dos.txt").write_bytes(b"one\r\ntwo\r\n")  # no newline translation: `\r\n` is matched as written
    assert proposed_diff(project, "edit_file", {"path": "dos.txt", "old_text": "one\r\ntwo", "new_text": "2"}) == (
        "--- a/dos.txt\n+++ b/dos.txt\n@@ -1,2 +1 @@\n-one\n-two\n+2"
    )
    # Whatever makes the tool refuse the call shows no diff: it changes nothing, and the tool says why.
    for refused in (
        {"replacements": [*edits, {"old_text": "nowhere", "new_text": "x"}]},  # every replacement must match
        {"replacements": [{"old_text": " = ", "new_text": "="}]},  # exactly once
        {"replacements": [{"old_text": "", "new_text": "x"}]},
        {"replacements": []},
        {"replacements": [{"old_text": "a = 1"}]},
        {"replacements": edits, "old_text": "a = 1", "new_text": "a = 2"},  # both forms at once
        {"old_text": "a = 1"},
    ):
        assert proposed_diff(project, "edit_file", {"path": "app.py", **refused}) is None, refused
    (project / "blob.bin").write_bytes(b"a = 1\x00")
    assert proposed_diff(project, "edit_file", {"path": "blob.bin", "old_text": "a = 1", "new_text": "x"}) is None


async def test_a_multi_edit_asks_with_the_diff_the_tool_then_makes(project: Path) -> None:
    (project / "app.py").write_text("def f():\n    return 1\n\n\ndef g():\n    return 2\n")
    edits = [{"old_text": "return 1", "new_text": "return 10"}, {"old_text": "return 2", "new_text": "return 20"}]
    shown: list[str] = []

    async def confirm(items: list[Any], question: str) -> Answer:
        shown.extend(str(item) for item in items[1:])
        return "yes"

    script = scripted([ToolCallPart("edit_file", {"path": "app.py", "replacements": edits}, tool_call_id="e")], "done")
    agent = build_pydantic_agent(Settings(), AgentOptions(model=script.model, project_root=project))
    policy = the_policy(agent)

    async def ask(ctx: Any, requests: Any, token: str) -> Any:
        return await Approver(policy, project.resolve(), confirm, set)(ctx, requests, token)

    session = Session.in_memory()
    outcome = await run_turn(agent, RunDeps(session, ask=ask), "go", TextSink(io.StringIO(), io.StringIO()))
    assert outcome.error is None
    assert [(name, result) for name, result, _ in tool_returns(session.messages)] == [("edit_file", "success")]
    assert (project / "app.py").read_text() == "def f():\n    return 10\n\n\ndef g():\n    return 20\n"
    assert shown == [
        "--- a/app.py\n+++ b/app.py\n@@ -1,6 +1,6 @@\n def f():\n-    return 1\n+    return 10\n \n \n def g():\n"
        "-    return 2\n+    return 20"
    ]


async def test_an_mcp_call_is_asked_about_with_its_arguments_spelled_out(project: Path) -> None:
    """Its summary names only the tool: the arguments are what the user judges, control characters made visible."""
    mark = f"approval-test-{uuid.uuid4().hex}"
    echo = McpServerConfig(command=sys.executable, args=(str(ECHO_SERVER), "--tag", mark))
    shown: list[str] = []

    async def confirm(items: list[Any], question: str, *, always: bool = True) -> Answer:
        console = Console(file=io.StringIO(), width=100)  # not a terminal: the text without styles
        console.print(*items)
        shown.append("\n".join(line.rstrip() for line in console.file.getvalue().splitlines()))  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownArgumentType]
        return "no"

    arguments = {"text": "abc\u202e\u200bfed\x9b\x1b[2K"}
    script = scripted([ToolCallPart("echo_echo", arguments, tool_call_id="e")], "done")
    agent = build_pydantic_agent(
        Settings(mcp_servers={"echo": echo}), AgentOptions(model=script.model, project_root=project)
    )
    policy = the_policy(agent)

    async def ask(ctx: Any, requests: Any, token: str) -> Any:
        return await Approver(policy, project.resolve(), confirm, set)(ctx, requests, token)

    session = Session.in_memory()
    outcome = await run_turn(agent, RunDeps(session, ask=ask), "go", TextSink(io.StringIO(), io.StringIO()))
    assert outcome.error is None
    assert shown == ['⚠ echo_echo wants to call echo_echo\n  {\n    "text": "abc\\u202e\\u200bfed\\x9b\\u001b[2K"\n  }']
    assert [(name, result) for name, result, _ in tool_returns(session.messages)] == [("echo_echo", "denied")]
    assert not (project / "calls.log").exists()
    assert processes_tagged(mark) == []
