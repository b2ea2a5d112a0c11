"""Issue 15 end to end: a repository set up for Claude Code (agents, commands, skills, CLAUDE.md) through the installed
`code-puppy` against the fake server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, call, text, tool_calls

FIXTURE = Path(__file__).parent / "fixtures" / "claude_project"
READ_TOOLS_AND_GIT = ["read_file", "list_files", "grep", "shell"]
PLAN_TOOLS = ["write_plan", "read_plan", "add_task", "update_task_status", "update_task_statuses", "remove_task"]


@pytest.fixture
def claude_project(tmp_path: Path) -> Path:
    """A copy of a project set up for Claude Code: `.claude/agents`, `.claude/commands`, `.claude/skills`,
    `CLAUDE.md`, with one broken agent, one with an unknown tool, one with an unknown model, one broken skill."""
    root = tmp_path / "claude_project"
    shutil.copytree(FIXTURE, root)
    return root


def tools(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools", [])]


def system(body: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in body["messages"] if m["role"] == "system")


def user(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("code-puppy: warning:")]


BAD_FILES = [
    "code-puppy: warning: .claude/agents/broken.md: broken frontmatter: the frontmatter's `---` block is not closed; "
    "skipped",
    "code-puppy: warning: .claude/agents/tester.md: unknown tool 'Frobnicate' dropped",
    "code-puppy: warning: .claude/skills/broken-skill/SKILL.md: Invalid YAML frontmatter: while parsing a flow "
    "sequence; skipped",
]


LOST_MODEL = (
    "code-puppy: note: agent 'lost': model 'gpt-nonexistent': unknown model 'gpt-nonexistent': use PROVIDER:MODEL "
    "(e.g. openai:gpt-5.1) or a name from [models] (fake); it runs on the session's model (fake)"
)


def test_a_file_command_expands_its_arguments(server: FakeLLMServer, claude_project: Path) -> None:
    server.script(text("Hello, world!"))
    completed = run_cli("-p", "/greet world", cwd=claude_project)
    assert (completed.returncode, completed.stdout) == (0, "Hello, world!\n")
    assert user(server.requests[0].body) == ["Say hello to world"]
    assert warnings(completed.stderr) == BAD_FILES  # each bad file one line; the run went on
    # Issue 25: an agent whose model is unknown loads on the session's model, as Claude Code loads it, and says so.
    assert LOST_MODEL in completed.stderr.splitlines()


def test_positional_arguments_and_allowed_tools_of_a_nested_command(
    server: FakeLLMServer, claude_project: Path
) -> None:
    server.script(text("Reviewed."))
    completed = run_cli("-p", "/frontend:review Button accessibility", cwd=claude_project)
    assert completed.returncode == 0, completed.stderr
    body = server.requests[0].body
    assert user(body) == ["Review the component Button, focusing on accessibility."]
    assert tools(body) == ["load_capability", "read_file", "grep"]  # allowed-tools: Read, Grep


def test_an_unknown_slash_word_is_sent_as_text(server: FakeLLMServer, claude_project: Path) -> None:
    server.script(text("ok"))
    completed = run_cli("-p", "/usr/bin is where it lives", cwd=claude_project)
    assert completed.returncode == 0
    assert user(server.requests[0].body) == ["/usr/bin is where it lives"]


def test_the_model_sees_agents_skills_and_claude_md(server: FakeLLMServer, claude_project: Path) -> None:
    server.script(text("ok"))
    assert run_cli("-p", "hi", cwd=claude_project).returncode == 0
    body = server.requests[0].body
    instructions = system(body)
    assert "delegate_task" in tools(body) and "load_capability" in tools(body)
    assert (
        "- reviewer: Expert code reviewer. Use proactively after code changes: checks quality, security and tests."
        in instructions
    )
    assert "- tester: Runs the tests and reports failures" in instructions
    assert "broken" not in instructions.split("Available sub-agents:")[1].split("</")[0]
    assert "- release: Cut a release of this project." in instructions
    assert "The release branch is called trunk." in instructions  # CLAUDE.md


def test_loading_a_skill_returns_its_body(server: FakeLLMServer, claude_project: Path) -> None:
    server.script(tool_calls(call("load_capability", {"id": "release"})), text("Tagged."))
    completed = run_cli("-p", "publish 1.2.0", cwd=claude_project)  # headless ask mode: loading is always allowed
    assert completed.returncode == 0, completed.stderr
    second = server.requests[1].body
    assert "Run `git tag vX.Y.Z` and push the tag." in json.dumps(second)


def test_delegation_runs_the_agent_with_only_its_tools_and_its_shell_patterns(
    server: FakeLLMServer, claude_project: Path
) -> None:
    server.script(
        tool_calls(call("delegate_task", {"agent_name": "reviewer", "task": "review the last change"})),
        tool_calls(call("shell", {"command": "rm README.md"}), call("shell", {"command": "git --version"})),
        text("No findings."),
        text("The reviewer found nothing."),
    )
    # yolo: the agent's Bash(git:*) refuses rm even where the user's mode would run anything.
    completed = run_cli("-p", "review", "--permission-mode", "yolo", cwd=claude_project)
    assert (completed.returncode, completed.stdout) == (0, "The reviewer found nothing.\n")
    child = server.requests[1].body
    assert tools(child) == READ_TOOLS_AND_GIT
    assert "You are the agent 'reviewer'" in system(child) and "senior code reviewer" in system(child)
    assert "You are code-puppy" not in system(child)
    refused, ran = tool_results(server.requests[2].body)
    assert refused == "`rm README.md` is outside the commands agent 'reviewer' may run (git, git *). Do not retry it."
    assert "git version" in ran
    assert (claude_project / "README.md").exists()


def test_a_delegate_runs_on_its_own_model(server: FakeLLMServer, claude_project: Path, code_puppy_home: Path) -> None:
    config = code_puppy_home / "config.toml"
    config.write_text(
        config.read_text() + f'[models.haiku]\nname = "small-model"\nbase_url = "{server.base_url}"\n'
    )  # `model: haiku` maps to the [models] entry of that name
    server.script(
        tool_calls(call("delegate_task", {"agent_name": "tester", "task": "run the tests"})),
        text("All pass."),
        text("Tests pass."),
    )
    completed = run_cli("-p", "test it", cwd=claude_project)
    assert completed.returncode == 0, completed.stderr
    assert [request.body["model"] for request in server.requests] == ["fake-model", "small-model", "fake-model"]


def test_the_agent_flag_puts_an_agent_in_charge(server: FakeLLMServer, claude_project: Path) -> None:
    server.script(text("Looks fine."))
    completed = run_cli("-p", "review", "--agent", "reviewer", cwd=claude_project)
    assert (completed.returncode, completed.stdout) == (0, "Looks fine.\n")
    body = server.requests[0].body
    assert tools(body) == ["load_capability", *READ_TOOLS_AND_GIT]
    assert "senior code reviewer" in system(body) and "You are code-puppy" not in system(body)


def test_an_unknown_agent_is_one_line(server: FakeLLMServer, claude_project: Path) -> None:
    completed = run_cli("-p", "review", "--agent", "nobody", cwd=claude_project)
    assert completed.returncode == 2
    assert completed.stderr.splitlines()[-1] == (
        "code-puppy: error: unknown agent 'nobody' (agents: lost, reviewer, tester; see `code-puppy agents list`)"
    )
    assert server.requests == []


def test_an_agents_permission_mode_never_loosens_the_users(server: FakeLLMServer, claude_project: Path) -> None:
    """tester says `permission_mode: yolo`; the project is untrusted and the user's mode is the headless `ask`."""
    server.script(tool_calls(call("shell", {"command": "touch pwned.txt"})), text("Could not."))
    completed = run_cli("-p", "write", "--agent", "tester", cwd=claude_project)
    assert completed.returncode == 0
    assert not (claude_project / "pwned.txt").exists()
    assert "needs the user's approval in 'ask' mode" in tool_results(server.requests[1].body)[0]


def test_an_agents_stricter_mode_applies(server: FakeLLMServer, claude_project: Path) -> None:
    (claude_project / ".code-puppy" / "agents").mkdir(parents=True)
    (claude_project / ".code-puppy" / "agents" / "reviewer.md").write_text(
        "---\ndescription: Our own reviewer\npermission_mode: read-only\n---\nYou only read.\n"
    )
    server.script(text("ok"))
    completed = run_cli("-p", "hi", "--agent", "reviewer", "--permission-mode", "accept-edits", cwd=claude_project)
    assert completed.returncode == 0
    assert tools(server.requests[0].body) == [
        "load_capability",
        "read_file",
        "list_files",
        "grep",
        "delegate_task",
        *PLAN_TOOLS,  # read-only keeps what changes nothing
    ]
    assert "You only read." in system(server.requests[0].body)
    assert "code-puppy: note: agent 'reviewer' in .claude/agents/reviewer.md is shadowed by " in completed.stderr


def test_agents_list(server: FakeLLMServer, claude_project: Path) -> None:
    completed = run_cli("agents", "list", cwd=claude_project)
    assert completed.returncode == 0
    assert completed.stdout == (
        # An offline listing: the agent whose model is unknown is listed on the model it falls back to.
        "lost  (project: .claude/agents/lost.md)\n"
        "  Names a model nobody knows\n"
        "  model: gpt-nonexistent → fake (unknown model 'gpt-nonexistent': runs on the session's model) · tools: all "
        "tools\n"
        "reviewer  (project: .claude/agents/reviewer.md)\n"
        "  Expert code reviewer. Use proactively after code changes: checks quality, security and tests.\n"
        "  model: sonnet → fake · tools: grep, list_files, read_file, shell(git, git *)\n"
        "tester  (project: .claude/agents/tester.md)\n"
        "  Runs the tests and reports failures\n"
        "  model: haiku → fake · tools: read_file, shell · at most yolo\n"
    )
    assert warnings(completed.stderr) == BAD_FILES[:2]


def test_skills_list(claude_project: Path, code_puppy_home: Path) -> None:
    (code_puppy_home / "skills" / "notes").mkdir(parents=True)
    (code_puppy_home / "skills" / "notes" / "SKILL.md").write_text("---\nname: notes\ndescription: Take notes\n---\n")
    completed = run_cli("skills", "list", cwd=claude_project)
    assert completed.returncode == 0
    assert completed.stdout == (
        "release  (project: .claude/skills/release/SKILL.md)\n"
        "  Cut a release of this project. Use when the user asks to publish or tag a version.\n"
        f"notes  (user: {code_puppy_home / 'skills' / 'notes' / 'SKILL.md'})\n"
        "  Take notes\n"
    )


GUARD = """\
import json, sys
event = json.load(sys.stdin)
if "rm -rf" in event["tool_input"]["command"]:
    print("rm -rf is not allowed here", file=sys.stderr)
    sys.exit(2)
"""
AFTER_EDIT = """\
import json, sys
event = json.load(sys.stdin)
transcript = [json.loads(line) for line in open(event["transcript_path"])]
with open("edited.log", "a") as log:
    log.write(f"{event['hook_event_name']} {event['tool_name']} {event['tool_input']['file_path']} "
              f"{event['tool_input']['content']!r} transcript={len(transcript)}\\n")
"""
CLAUDE_SETTINGS = {
    "permissions": {"allow": ["Bash(npm run lint)"]},
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "python3 .claude/guard.py"}]}],
        "PostToolUse": [
            {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "python3 .claude/after_edit.py"}]}
        ],
        "Notification": [{"hooks": [{"type": "command", "command": "true"}]}],
    },
}


def with_claude_hooks(root: Path) -> None:
    (root / ".claude" / "guard.py").write_text(GUARD)
    (root / ".claude" / "after_edit.py").write_text(AFTER_EDIT)
    (root / ".claude" / "settings.json").write_text(json.dumps(CLAUDE_SETTINGS))


def test_claude_code_hooks_run_unchanged_in_a_trusted_project(server: FakeLLMServer, claude_project: Path) -> None:
    with_claude_hooks(claude_project)
    assert run_cli("trust", cwd=claude_project).returncode == 0
    server.script(text("Ready."))
    assert run_cli("-p", "hello", cwd=claude_project).returncode == 0
    server.script(
        tool_calls(call("shell", {"command": "rm -rf build"})),
        tool_calls(call("write_file", {"path": "notes.txt", "content": "hi"})),
        text("Done."),
    )
    completed = run_cli("-p", "clean up", "-c", "--permission-mode", "yolo", cwd=claude_project)
    assert completed.returncode == 0, completed.stderr
    assert tool_results(server.requests[2].body)[-1:] == ["Blocked by plugin shell_hooks: rm -rf is not allowed here"]
    assert (claude_project / "notes.txt").read_text() == "hi"
    log = (claude_project / "edited.log").read_text()
    # The path absolute, as Claude Code sends it; the session's stored history (the first turn: prompt and answer) as
    # Claude Code's transcript records, one per line.
    assert log == f"PostToolUse Write {claude_project / 'notes.txt'} 'hi' transcript=2\n"


def test_an_untrusted_projects_claude_hooks_do_not_run(server: FakeLLMServer, claude_project: Path) -> None:
    with_claude_hooks(claude_project)
    server.script(tool_calls(call("write_file", {"path": "notes.txt", "content": "hi"})), text("Done."))
    completed = run_cli("-p", "write", "--permission-mode", "yolo", cwd=claude_project)
    assert completed.returncode == 0
    assert not (claude_project / "edited.log").exists()
    assert (
        "code-puppy: note: .claude/settings.json: its hooks do not run: this project is not trusted "
        "(`code-puppy trust`)" in completed.stderr.splitlines()
    )


def test_claude_hooks_changed_or_added_after_trust_do_not_run_and_say_so(
    server: FakeLLMServer, claude_project: Path
) -> None:
    with_claude_hooks(claude_project)
    assert run_cli("trust", cwd=claude_project).returncode == 0
    settings = claude_project / ".claude" / "settings.json"
    changed = json.loads(settings.read_text())
    changed["hooks"]["PreToolUse"][0]["hooks"].append({"type": "command", "command": "touch pre.ran"})
    settings.write_text(json.dumps(changed))
    local = {"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "touch local.ran"}]}]}}
    (claude_project / ".claude" / "settings.local.json").write_text(json.dumps(local))
    server.script(tool_calls(call("write_file", {"path": "notes.txt", "content": "hi"})), text("Done."))
    completed = run_cli("-p", "write", "--permission-mode", "yolo", cwd=claude_project)
    assert (completed.returncode, (claude_project / "notes.txt").read_text()) == (0, "hi")
    assert [line for line in completed.stderr.splitlines() if line.startswith("code-puppy: note")] == [
        # Its permissions too (tests/permissions/test_claude_settings.py): what widens waits for trust.
        "code-puppy: note: .claude/settings.json: its permissions.allow and defaultMode do not apply: "
        ".claude/settings.json changed since you trusted this project (`code-puppy trust`); its deny and ask rules do",
        LOST_MODEL,
        "code-puppy: note: .claude/settings.json: its hooks do not run: .claude/settings.json changed since you "
        "trusted this project (`code-puppy trust`)",
        "code-puppy: note: .claude/settings.local.json: its hooks do not run: .claude/settings.local.json appeared "
        "since you trusted this project (`code-puppy trust`)",
    ]
    assert [name for name in ("edited.log", "pre.ran", "local.ran") if (claude_project / name).exists()] == []


PLAN = [
    {"id": "read", "content": "Read the code"},
    {"id": "fix", "content": "Fix the bug", "status": "in_progress", "active_form": "Fixing the bug"},
]


def test_plan_events_in_stream_json(server: FakeLLMServer, project: Path) -> None:
    server.script(
        tool_calls(call("write_plan", {"items": PLAN})),
        tool_calls(call("update_task_statuses", {"updates": [{"task_id": "read", "status": "completed"}]})),
        text("Done."),
    )
    completed = run_cli("-p", "fix it", "--output-format", "stream-json", cwd=project)  # ask mode: always allowed
    assert completed.returncode == 0, completed.stderr
    events = [json.loads(line) for line in completed.stdout.splitlines()]
    plans = [
        [(item["content"], item["status"]) for item in event["items"]] for event in events if event["type"] == "plan"
    ]
    assert plans == [
        [("Read the code", "pending"), ("Fix the bug", "in_progress")],
        [("Read the code", "completed"), ("Fix the bug", "in_progress")],
    ]
    kinds = [event["type"] for event in events]
    assert kinds.index("plan") == kinds.index("tool_result") + 1  # after the call that changed it


def test_planning_can_be_switched_off(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    config = code_puppy_home / "config.toml"
    server.script(text("ok"), text("ok"))
    assert run_cli("-p", "hi", cwd=project).returncode == 0
    config.write_text(config.read_text() + "[tools]\nplanning = false\n")
    assert run_cli("-p", "hi", cwd=project).returncode == 0
    assert "write_plan" in tools(server.requests[0].body)
    assert not set(PLAN_TOOLS) & set(tools(server.requests[1].body))


def test_a_file_command_sends_the_files_it_mentions_as_attachments_never_indexed(
    server: FakeLLMServer, claude_project: Path
) -> None:
    (claude_project / ".claude" / "commands" / "audit.md").write_text("Audit @secrets.env for $ARGUMENTS\n")
    (claude_project / "secrets.env").write_text("TOKEN=ATTACHEDSECRET9\n")
    server.script(text("Audited."))
    completed = run_cli("-p", "/audit leaks", cwd=claude_project)
    assert completed.returncode == 0, completed.stderr
    assert user(server.requests[0].body) == [
        [
            {"type": "text", "text": "Audit @secrets.env for leaks"},
            {"type": "text", "text": '<file path="secrets.env">\nTOKEN=ATTACHEDSECRET9\n</file>'},
        ]
    ]
    assert run_cli("sessions", "search", "ATTACHEDSECRET9", cwd=claude_project).returncode == 1
    assert run_cli("sessions", "search", "leaks", cwd=claude_project).returncode == 0
