"""End to end: a headless run says what it could not do (the closing line, `denied`), and its progress lines read as
the chat's (a command's exit status, a denial's whole first sentence)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import FunctionToolResultEvent, ToolReturnPart

from code_puppy.core.denials import DeniedCalls
from code_puppy.options import PermissionMode
from code_puppy.trust import trust_project
from tests.conftest import run_cli
from tests.fake_llm import call, text, tool_calls

WRITE_AND_SHELL = (
    tool_calls(call("write_file", {"path": "fix.py", "content": "x = 1\n"}), call("shell", {"command": "pytest -q"})),
    text("I could not change anything."),
)
ASK_CLOSING = (
    "code-puppy: 2 calls were denied in ask mode (1 edit, 1 command); allow them with --permission-mode auto, "
    "or accept-edits with --allow PATTERN"
)


def test_a_default_mode_run_that_is_denied_an_edit_and_a_command_says_so(server: Any, project: Path) -> None:
    server.script(*WRITE_AND_SHELL)
    completed = run_cli("-p", "fix the failing test", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "I could not change anything.\n")
    assert completed.stderr.splitlines() == [
        "⚙ write_file(fix.py)",
        "⚙ shell(pytest -q)",
        *sorted(
            [
                "  ↳ write_file(fix.py) · denied: `write_file` needs the user's approval in 'ask' mode and this run is "
                "non-interactive, so it was denied.",
                "  ↳ shell(pytest -q) · denied: `shell` needs the user's approval in 'ask' mode and this run is "
                "non-interactive, so it was denied.",
            ],
            key=completed.stderr.index,
        ),
        ASK_CLOSING,
    ]
    assert not (project / "fix.py").exists()


def test_json_counts_the_denied_calls(server: Any, project: Path) -> None:
    server.script(*WRITE_AND_SHELL)
    completed = run_cli("-p", "fix the failing test", "--output-format", "json", cwd=project)
    assert completed.returncode == 0
    result = json.loads(completed.stdout)
    assert (result["status"], result["denied"]) == ("success", 2)
    assert completed.stderr.splitlines() == [ASK_CLOSING]


def test_stream_json_result_carries_the_count(server: Any, project: Path) -> None:
    server.script(*WRITE_AND_SHELL)
    completed = run_cli("-p", "fix the failing test", "--output-format", "stream-json", cwd=project)
    assert completed.returncode == 0
    events = [json.loads(line) for line in completed.stdout.splitlines()]
    assert [e["outcome"] for e in events if e["type"] == "tool_result"] == ["denied", "denied"]
    assert (events[-1]["type"], events[-1]["denied"]) == ("result", 2)
    assert completed.stderr.splitlines() == [ASK_CLOSING]


def test_accept_edits_names_the_commands_and_the_allow_list(server: Any, project: Path) -> None:
    server.script(*WRITE_AND_SHELL)
    completed = run_cli("-p", "fix it", "--permission-mode", "accept-edits", "--output-format", "json", cwd=project)
    assert (completed.returncode, json.loads(completed.stdout)["denied"]) == (0, 1)
    assert completed.stderr.splitlines() == [
        "code-puppy: 1 call was denied in accept-edits mode (1 command); allow it with --allow PATTERN or "
        "--permission-mode auto"
    ]
    assert (project / "fix.py").read_text() == "x = 1\n"


def test_a_run_with_nothing_denied_has_no_closing_line_and_denied_0(server: Any, project: Path) -> None:
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("A demo."))
    completed = run_cli("-p", "what is this?", "--output-format", "json", cwd=project)
    assert (completed.returncode, completed.stderr) == (0, "")
    assert json.loads(completed.stdout)["denied"] == 0


def test_a_command_s_progress_line_shows_its_exit_status_not_the_supervisor(server: Any, project: Path) -> None:
    server.script(
        tool_calls(call("shell", {"command": "echo hello"})),
        tool_calls(call("shell", {"command": "echo oops; exit 1"})),
        text("done"),
    )
    completed = run_cli("-p", "run them", "--permission-mode", "yolo", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "done\n")
    assert completed.stderr.splitlines() == [
        "⚙ shell(echo hello)",
        "  ↳ exit 0 · hello",
        "⚙ shell(echo oops; exit 1)",
        "  ↳ exit 1 · oops",
    ]


def test_in_yolo_mode_a_rule_s_denial_is_named_apart(server: Any, code_puppy_home: Path, project: Path) -> None:
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text(json.dumps({"permissions": {"deny": ["Bash(git push:*)"]}}))
    trust_project(project)
    server.script(tool_calls(call("shell", {"command": "git push origin main"})), text("Not pushed."))
    completed = run_cli("-p", "push it", "--permission-mode", "yolo", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "Not pushed.\n")
    assert completed.stderr.splitlines() == [
        "⚙ shell(git push origin main)",
        "  ↳ denied: `shell` on `git push origin main` is denied by the permission rule `Bash(git push:*)` in "
        ".claude/settings.json.",
        "code-puppy: 1 call was denied in yolo mode (1 command); a permission rule, a plugin, a protected file or the "
        "project's bounds denied it (each result says which)",
    ]


def denied(*tool_names: str) -> DeniedCalls:
    calls = DeniedCalls()
    for i, name in enumerate(tool_names):
        calls.note(FunctionToolResultEvent(ToolReturnPart(name, "No.", tool_call_id=str(i), outcome="denied")))
    calls.note(FunctionToolResultEvent(ToolReturnPart("shell", "ok", tool_call_id="ran")))  # not denied: not counted
    return calls


@pytest.mark.parametrize(
    ("mode", "tools", "line"),
    [
        (
            "ask",
            ("write_file",),
            "1 call was denied in ask mode (1 edit); allow it with --permission-mode accept-edits or auto",
        ),
        (
            "read-only",
            ("shell", "edit_file"),
            "2 calls were denied in read-only mode (1 edit, 1 command); allow them with --permission-mode auto",
        ),
        (
            "accept-edits",
            ("shell", "run_command", "echo_echo"),
            "3 calls were denied in accept-edits mode (2 commands, 1 other tool); allow commands with --allow PATTERN "
            "or --permission-mode auto; allow other tools with --allow mcp__SERVER for an MCP server's, or "
            "--permission-mode yolo",
        ),
        (
            "ask",
            ("read_file", "grep", "write_file"),
            "3 calls were denied in ask mode (1 edit, 2 reads); allow edits with --permission-mode accept-edits or "
            "auto; a permission rule, a plugin, a protected file or the project's bounds denied the other 2 (each "
            "result says which)",
        ),
        (
            "accept-edits",
            ("shell", "write_file"),
            "2 calls were denied in accept-edits mode (1 edit, 1 command); allow commands with --allow PATTERN or "
            "--permission-mode auto; a permission rule, a plugin, a protected file or the project's bounds denied the "
            "other one (each result says which)",
        ),
        (
            "yolo",
            ("shell", "shell"),
            "2 calls were denied in yolo mode (2 commands); a permission rule, a plugin, a protected file or the "
            "project's bounds denied them (each result says which)",
        ),
        ("auto", (), None),
    ],
)
def test_the_closing_line_names_the_mode_the_kinds_and_the_ways_out(
    mode: PermissionMode, tools: tuple[str, ...], line: str | None
) -> None:
    calls = denied(*tools)
    assert (calls.count, calls.closing_line(mode)) == (len(tools), line)
