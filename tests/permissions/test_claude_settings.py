"""Claude Code's `permissions` (`.claude/settings.json`, `.claude/settings.local.json`, `~/.claude/settings.json`) over
code-puppy's tools: the rules of real projects' files, the policy's verdicts per mode, trust, and a headless run."""

from __future__ import annotations

import json
import os
import shutil
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ToolCallPart
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, RunContext

from code_puppy.config import Settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent, capability
from code_puppy.options import PermissionMode
from code_puppy.permissions.claude_rules import ClaudePermissions, claude_permissions
from code_puppy.permissions.claude_settings import claude_settings_files
from code_puppy.permissions.policy import Decision, PermissionPolicy
from code_puppy.run.deps import RunDeps
from code_puppy.sessions.session import Session
from code_puppy.trust import trust_project
from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.scripted_model import scripted, tool_returns

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "claude_settings"
SETTINGS = {
    "permissions": {
        "allow": ["Bash(npm run test)", "Bash(git diff:*)", "Edit(docs/**)", "mcp__github__get_issue", "WebFetch"],
        "deny": ["Read(**/.env)", "Read(./secrets/**)", "Bash(git push:*)", "Write(//etc/**)", "mcp__prod"],
        "ask": ["Bash(git commit *)", "Edit(pyproject.toml)"],
    }
}


def write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def read(project: Path) -> ClaudePermissions:
    files, warnings = claude_settings_files(project)
    assert warnings == []
    return claude_permissions(files, project.resolve())


def policy(
    project: Path, mode: PermissionMode = "ask", permissions: ClaudePermissions | None = None
) -> PermissionPolicy:
    rules = (permissions or read(project)).rules
    return PermissionPolicy(project.resolve(), mode=mode, rules=rules, allow=rules.allow_list)


def verdict(policy: PermissionPolicy, tool: str, mcp: str | None = None, **args: Any) -> Decision:
    return policy.decide(tool, args, mcp_permission=mcp)[0]


@pytest.fixture
def trusted(code_puppy_home: Path, project: Path) -> Path:
    write(project / ".claude" / "settings.json", SETTINGS)
    trust_project(project)
    return project


@pytest.mark.parametrize(
    ("tool", "args", "mcp", "decision"),
    [
        ("read_file", {"path": ".env"}, None, "deny"),
        ("read_file", {"path": "app/.env"}, None, "deny"),
        ("read_file", {"path": "./app/../.env"}, None, "deny"),
        ("read_file", {"path": ".env.example"}, None, "allow"),
        ("grep", {"pattern": "KEY", "path": ".env"}, None, "deny"),
        ("grep", {"pattern": "KEY"}, None, "allow"),
        ("list_files", {"path": "secrets"}, None, "deny"),
        ("read_file", {"path": "secrets/deep/key.pem"}, None, "deny"),
        ("read_file", {"path": "app/secrets/key.pem"}, None, "allow"),
        ("read_file", {"path": "README.md"}, None, "allow"),
        ("shell", {"command": "git push"}, None, "deny"),
        ("shell", {"command": "git push origin main"}, None, "deny"),
        ("shell", {"command": "git status && git push -f"}, None, "deny"),
        ("shell", {"command": "echo $(git push)"}, None, "deny"),
        # As the command runs: past assignments, wrappers, quotes and the program's folder.
        ("shell", {"command": "GIT_TRACE=1 git push"}, None, "deny"),
        ("shell", {"command": "env -i /usr/bin/git push origin"}, None, "deny"),
        ("shell", {"command": "'git' push"}, None, "deny"),
        ("shell", {"command": "git pushy"}, None, "ask"),
        ("shell", {"command": "npm run test"}, None, "allow"),
        ("shell", {"command": "npm run test -- --watch"}, None, "ask"),
        ("shell", {"command": "git diff"}, None, "allow"),
        ("shell", {"command": "git diff HEAD~1 && npm run test"}, None, "allow"),
        ("shell", {"command": "git diff && rm -rf x"}, None, "ask"),
        ("shell", {"command": "git diff $REF"}, None, "ask"),
        ("shell", {"command": "git diff --output=/tmp/x"}, None, "ask"),
        ("shell", {"command": "git commit -m x"}, None, "ask"),
        ("write_file", {"path": "docs/guide.md", "content": "x"}, None, "allow"),
        ("create_directory", {"path": "docs/api"}, None, "allow"),
        ("edit_file", {"path": "src/app.py"}, None, "ask"),
        ("edit_file", {"path": "pyproject.toml"}, None, "ask"),
        ("write_file", {"path": "/etc/hosts", "content": "x"}, None, "deny"),
        ("mcp_tool", {}, "mcp__github__get_issue", "allow"),
        ("mcp_tool", {}, "mcp__github__create_issue", "ask"),
        ("mcp_tool", {}, "mcp__prod__drop", "deny"),
        ("mcp_tool", {}, "mcp__production__x", "ask"),
    ],
)
def test_rules_of_a_trusted_project_decide_in_ask_mode(
    trusted: Path, tool: str, args: dict[str, Any], mcp: str | None, decision: Decision
) -> None:
    assert verdict(policy(trusted), tool, mcp, **args) == decision


@pytest.mark.parametrize("mode", ["ask", "accept-edits", "auto", "yolo", "read-only"])
def test_deny_wins_in_every_mode_and_ask_asks_in_every_mode_that_allows_the_call(trusted: Path, mode: str) -> None:
    gate = policy(trusted, mode)  # pyright: ignore[reportArgumentType]
    assert verdict(gate, "read_file", path=".env") == "deny"
    assert verdict(gate, "read_file", path="README.md") == "allow"
    denied = gate.decide("shell", {"command": "git push"})
    assert denied == (
        "deny",
        "`shell` on `git push` is denied by the permission rule `Bash(git push:*)` in .claude/settings.json. "
        "Do not retry it.",
    )
    # An ask rule asks where the mode would run the call, and never lets through a call the mode denies.
    assert verdict(gate, "edit_file", path="pyproject.toml") == ("deny" if mode == "read-only" else "ask")
    assert verdict(gate, "shell", command="git commit -m x") == ("ask" if mode in ("ask", "auto", "yolo") else "deny")


def test_the_model_is_told_which_rule_asked_when_nobody_can_answer(trusted: Path) -> None:
    assert policy(trusted, "yolo").decide("edit_file", {"path": "pyproject.toml"}) == (
        "ask",
        "`edit_file` on `pyproject.toml` needs the user's approval (the permission rule `Edit(pyproject.toml)` in "
        ".claude/settings.json asks for it), and this run is non-interactive, so it was denied. Do not retry it; "
        "say what you would have done.",
    )


def test_an_untrusted_project_narrows_only(code_puppy_home: Path, project: Path) -> None:
    write(project / ".claude" / "settings.json", SETTINGS | {"model": "opus"})
    permissions = read(project)
    assert permissions.notes == (
        ".claude/settings.json: its permissions.allow and defaultMode do not apply: this project is not trusted "
        "(`code-puppy trust`); its deny and ask rules do",
        ".claude/settings.json: rules code-puppy has no tool for, not applied: WebFetch",
        ".claude/settings.json: settings code-puppy does not use, ignored: model",
    )
    gate = policy(project, permissions=permissions)
    assert verdict(gate, "read_file", path=".env") == "deny"
    assert verdict(gate, "shell", command="npm run test") == "ask"
    assert verdict(gate, "write_file", path="docs/guide.md") == "ask"
    # A file changed since the user trusted it is untrusted again.
    trust_project(project)
    assert verdict(policy(project), "shell", command="npm run test") == "allow"
    write(project / ".claude" / "settings.json", SETTINGS | {"permissions": {"allow": ["Bash"]}})
    changed = read(project)
    assert changed.notes[0] == (
        ".claude/settings.json: its permissions.allow and defaultMode do not apply: .claude/settings.json changed "
        "since you trusted this project (`code-puppy trust`); its deny and ask rules do"
    )
    assert changed.rules.allow == ()


def test_the_local_file_and_the_users_file_add_their_rules(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, project: Path
) -> None:
    home = tmp_path / "user-home"
    monkeypatch.delenv("CODE_PUPPY_HOME")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    write(home / ".claude" / "settings.json", {"permissions": {"deny": ["Read(~/.aws/**)"], "allow": ["Bash(ls)"]}})
    write(project / ".claude" / "settings.local.json", {"permissions": {"deny": ["Bash(curl:*)"], "allow": ["Edit"]}})
    trust_project(project)
    files, _ = claude_settings_files(project)
    assert [(file.shown, file.trusted) for file in files] == [
        ("~/.claude/settings.json", True),
        (".claude/settings.local.json", True),
    ]
    gate = policy(project)
    assert verdict(gate, "read_file", path=str(home / ".aws" / "credentials")) == "deny"
    assert verdict(gate, "read_file", path="~/.aws/config") == "deny"
    assert verdict(gate, "shell", command="ls") == "allow"
    assert verdict(gate, "shell", command="curl -s x | sh") == "deny"
    assert verdict(gate, "edit_file", path="src/app.py") == "allow"
    # The agent's own config still asks: an allow rule does not cover it.
    assert verdict(gate, "edit_file", path=".claude/settings.local.json") == "ask"
    # CODE_PUPPY_HOME relocates everything: the user's Claude Code file is not read.
    monkeypatch.setenv("CODE_PUPPY_HOME", str(tmp_path / "relocated"))
    assert [file.shown for file in claude_settings_files(project)[0]] == [".claude/settings.local.json"]


@pytest.mark.parametrize(
    ("written", "mode", "note"),
    [
        ("acceptEdits", "accept-edits", None),
        ("plan", "read-only", None),
        ("default", "ask", None),
        (
            "bypassPermissions",
            None,
            "permissions.defaultMode 'bypassPermissions' is not applied: a settings file never gives yolo; use "
            "--permission-mode yolo or [permissions] mode",
        ),
        (
            "auto",
            None,
            "permissions.defaultMode 'auto' is not applied: a settings file never gives auto (commands without "
            "asking); use --permission-mode auto",
        ),
        (
            "dontAsk",
            None,
            "permissions.defaultMode 'dontAsk' is not applied: code-puppy has no such mode (ask, accept-edits, auto, "
            "yolo, read-only)",
        ),
    ],
)
def test_default_mode_maps_where_code_puppy_has_the_mode(
    code_puppy_home: Path, project: Path, written: str, mode: str | None, note: str | None
) -> None:
    write(project / ".claude" / "settings.json", {"permissions": {"defaultMode": written}})
    trust_project(project)
    permissions = read(project)
    assert (permissions.default_mode, permissions.notes) == (
        mode,
        () if note is None else (f".claude/settings.json: {note}",),
    )


def test_a_file_that_is_not_json_is_one_warning(code_puppy_home: Path, project: Path) -> None:
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text("{not json")
    (project / ".claude" / "settings.local.json").write_text("[]")
    assert claude_settings_files(project) == (
        [],
        [
            ".claude/settings.json cannot be read (Expecting property name enclosed in double quotes: line 1 column 2 "
            "(char 1)); code-puppy ignores it",
            ".claude/settings.local.json is not a JSON object; code-puppy ignores it",
        ],
    )


def install(fixture: str, project: Path, name: str = "settings.json") -> None:
    (project / ".claude").mkdir(exist_ok=True)
    shutil.copy(FIXTURES / fixture, project / ".claude" / name)
    trust_project(project)


def test_moai_adk_settings_parse_and_apply(code_puppy_home: Path, project: Path) -> None:
    install("moai-adk.settings.json", project)
    permissions = read(project)
    rules = permissions.rules
    assert (len(rules.deny), len(rules.ask), len(rules.allow), permissions.default_mode) == (48, 6, 100, None)
    assert permissions.notes == (
        ".claude/settings.json: permissions.defaultMode 'bypassPermissions' is not applied: a settings file never "
        "gives yolo; use --permission-mode yolo or [permissions] mode",
        ".claude/settings.json: rules code-puppy has no tool for, not applied: AskUserQuestion, TaskCreate, TaskGet, "
        "TaskList, TaskUpdate, WebFetch, WebSearch, CronCreate, CronList, CronDelete, EnterWorktree, ExitWorktree, "
        "EnterPlanMode, ExitPlanMode",
        ".claude/settings.json: settings code-puppy does not use, ignored: statusLine, skillListingBudgetFraction, "
        "showThinkingSummaries, cleanupPeriodDays, outputStyle, env, attribution, respectGitignore",
    )
    gate = policy(project, permissions=permissions)
    decisions = {
        (tool, subject): gate.decide(tool, {"command" if tool == "shell" else "path": subject})[0]
        for tool, subject in [
            ("read_file", ".env"),
            ("read_file", ".env.production"),
            ("read_file", "secrets/api.key"),
            ("read_file", "~/.ssh/id_ed25519"),
            ("write_file", "secrets/api.key"),
            ("edit_file", "src/app.py"),
            ("shell", "git status --short"),
            ("shell", "git push origin main"),
            ("shell", "git push --force origin main"),
            ("shell", "rm -rf ~/"),
            ("shell", "rm build.log"),
            ("shell", "sudo make install"),
            ("shell", "pytest -q tests"),
            ("shell", "npm run build && npm test"),
            ("shell", r"rm -rf C:/"),
        ]
    }
    assert decisions == {
        ("read_file", ".env"): "ask",
        ("read_file", ".env.production"): "ask",
        ("read_file", "secrets/api.key"): "deny",
        ("read_file", "~/.ssh/id_ed25519"): "deny",
        ("write_file", "secrets/api.key"): "deny",
        ("edit_file", "src/app.py"): "allow",
        ("shell", "git status --short"): "allow",
        ("shell", "git push origin main"): "allow",
        ("shell", "git push --force origin main"): "deny",
        ("shell", "rm -rf ~/"): "deny",
        ("shell", "rm build.log"): "ask",
        ("shell", "sudo make install"): "ask",
        ("shell", "pytest -q tests"): "allow",
        ("shell", "npm run build && npm test"): "allow",
        ("shell", r"rm -rf C:/"): "deny",
    }


def test_claude_codes_strict_example_asks_for_every_command(code_puppy_home: Path, project: Path) -> None:
    install("claude-code.settings-strict.json", project)
    permissions = read(project)
    assert permissions.notes == (
        ".claude/settings.json: rules code-puppy has no tool for, not applied: WebSearch, WebFetch",
        ".claude/settings.json: settings code-puppy does not use, ignored: allowManagedPermissionRulesOnly, "
        "allowManagedHooksOnly, strictKnownMarketplaces, sandbox, permissions.disableBypassPermissionsMode",
    )
    gate = policy(project, "yolo", permissions)
    assert [verdict(gate, "shell", command=command) for command in ("ls", "git status")] == ["ask", "ask"]
    assert verdict(gate, "write_file", path="a.txt") == "allow"


def test_a_project_starters_local_settings_allow_its_commands(code_puppy_home: Path, project: Path) -> None:
    install("project-starter.settings.local.json", project, "settings.local.json")
    permissions = read(project)
    assert permissions.notes == (
        ".claude/settings.local.json: rules code-puppy has no tool for, not applied: SlashCommand(*)",
        ".claude/settings.local.json: settings code-puppy does not use, ignored: enableAllProjectMcpServers, "
        "enabledMcpjsonServers",
    )
    gate = policy(project, "accept-edits", permissions)
    assert [
        verdict(gate, "shell", command=command)
        for command in ("git commit -m wip", "bash .claude/hooks/x.sh", "rm -rf /", "rm -rf build", "docker ps")
    ] == ["allow", "allow", "deny", "deny", "allow"]


def test_a_headless_run_denies_reading_env_and_tells_the_model(
    server: FakeLLMServer, trusted: Path, code_puppy_home: Path
) -> None:
    (trusted / ".env").write_text("API_KEY=hunter2\n")
    server.script(
        tool_calls(
            call("read_file", {"path": ".env"}),
            call("read_file", {"path": "README.md"}),
            call("shell", {"command": "git commit -m wip"}),
        ),
        text("I may not read .env."),
    )
    completed = run_cli("-p", "print the API key", "--output-format", "json", cwd=trusted)
    assert (completed.returncode, json.loads(completed.stdout)["output"]) == (0, "I may not read .env.")
    told = [message["content"] for message in server.requests[1].body["messages"] if message["role"] == "tool"]
    assert told[0] == (
        "`read_file` on `.env` is denied by the permission rule `Read(**/.env)` in .claude/settings.json. "
        "Do not retry it."
    )
    assert "# demo project" in told[1]
    assert told[2] == (
        "`shell` on `git commit -m wip` needs the user's approval (the permission rule `Bash(git commit *)` in "
        ".claude/settings.json asks for it), and this run is non-interactive, so it was denied. Do not retry it; "
        "say what you would have done."
    )
    assert "hunter2" not in json.dumps(server.requests[1].body)
    assert [line for line in completed.stderr.splitlines() if line.startswith("code-puppy: note")] == [
        "code-puppy: note: .claude/settings.json: rules code-puppy has no tool for, not applied: WebFetch"
    ]


def test_a_trusted_default_mode_is_the_runs_mode_unless_the_user_chose_one(
    server: FakeLLMServer, code_puppy_home: Path, project: Path
) -> None:
    write(project / ".claude" / "settings.json", {"permissions": {"defaultMode": "acceptEdits"}})
    trust_project(project)
    server.script(text("ok"), text("ok"))
    assert run_cli("-p", "hi", cwd=project).returncode == 0
    assert run_cli("-p", "hi", "--permission-mode", "read-only", cwd=project).returncode == 0
    instructions = [json.dumps(request.body) for request in server.requests]
    assert ["Permission mode: accept-edits" in body for body in instructions] == [True, False]
    assert ["Permission mode: read-only" in body for body in instructions] == [False, True]


async def test_an_ask_rule_asks_even_after_always_for_the_tool_and_the_prompt_names_it(trusted: Path) -> None:
    (trusted / "pyproject.toml").write_text("[project]\n")
    (trusted / "app.py").write_text("x = 1\n")
    (trusted / ".env").write_text("API_KEY=hunter2\n")
    questions: list[str] = []

    async def answer(ctx: RunContext[Any], requests: DeferredToolRequests, token: str) -> DeferredToolResults:
        questions.extend(str(requests.metadata[call.tool_call_id]["summary"]) for call in requests.approvals)
        return requests.build_results(approvals={call.tool_call_id: True for call in requests.approvals})

    edit = {"old_text": "1", "new_text": "2"}
    script = scripted(
        [
            ToolCallPart("edit_file", {"path": "app.py", **edit}, tool_call_id="a"),
            ToolCallPart("write_file", {"path": "pyproject.toml", "content": "[tool]\n"}, tool_call_id="b"),
            ToolCallPart("read_file", {"path": ".env"}, tool_call_id="c"),
        ],
        "done",
    )
    rules = read(trusted).rules
    agent = build_pydantic_agent(
        Settings(), AgentOptions(model=script.model, project_root=trusted, permission_mode="ask", claude_rules=rules)
    )
    gate = capability(agent, PermissionPolicy)
    assert gate is not None
    gate.session_allowed.update({"tool:edit_file", "tool:write_file"})  # the user said "always" to edits before
    result = await agent.run("change things", deps=RunDeps(Session.in_memory(), ask=answer))
    assert questions == [
        "write_file `pyproject.toml` (the permission rule `Edit(pyproject.toml)` in .claude/settings.json asks for it)"
    ]
    assert [(name, outcome) for name, outcome, _ in tool_returns(result.all_messages())] == [
        ("edit_file", "success"),
        ("read_file", "denied"),
        ("write_file", "success"),  # approved calls run after the step's others
    ]
    assert ((trusted / "app.py").read_text(), (trusted / "pyproject.toml").read_text()) == ("x = 2\n", "[tool]\n")


async def test_a_tool_a_bare_deny_rule_names_is_not_offered(code_puppy_home: Path, project: Path) -> None:
    write(project / ".claude" / "settings.json", {"permissions": {"deny": ["Bash", "Edit(secrets/**)"]}})
    offered: list[str] = []

    def look(messages: list[ModelMessage], info: AgentInfo) -> str:
        offered.extend(tool.name for tool in info.function_tools)
        return "done"

    script = scripted(look)
    agent = build_pydantic_agent(
        Settings(), AgentOptions(model=script.model, project_root=project, claude_rules=read(project).rules)
    )
    await agent.run("hi", deps=RunDeps(Session.in_memory()))
    assert "shell" not in offered
    assert {"read_file", "write_file", "edit_file", "create_directory"} <= set(offered)


async def test_a_search_of_the_folder_above_a_denied_file_leaves_its_lines_out(
    code_puppy_home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25 review: `grep` over `.` showed `secrets/k.txt`'s lines while `read_file secrets/k.txt` was denied.
    The walk of a search or a listing leaves out what a Read deny or ask rule covers; other files still show."""
    monkeypatch.setenv("PATH", f"{sysconfig.get_path('scripts')}{os.pathsep}{os.environ['PATH']}")  # `rg`, as the CLI
    write(project / ".claude" / "settings.json", {"permissions": {"deny": ["Read(./secrets/**)", "Read(*.pem)"]}})
    (project / "secrets").mkdir()
    (project / "secrets" / "k.txt").write_text("TOPSECRET=1\n")
    (project / "server.pem").write_text("TOPSECRET=2\n")
    (project / "notes.txt").write_text("TOPSECRET=public\n")
    script = scripted(
        [
            ToolCallPart("grep", {"pattern": "TOPSECRET", "path": "."}, tool_call_id="g1"),
            ToolCallPart("grep", {"pattern": "TOPSECRET", "path": "secrets/.."}, tool_call_id="g2"),
            ToolCallPart("list_files", {"path": "secrets"}, tool_call_id="l1"),
        ],
        "done",
    )
    agent = build_pydantic_agent(
        Settings(), AgentOptions(model=script.model, project_root=project, claude_rules=read(project).rules)
    )
    result = await agent.run("look", deps=RunDeps(Session.in_memory()))
    [first, second, listing] = tool_returns(result.all_messages())
    assert (first[2], second[2]) == ("notes.txt:1:TOPSECRET=public", "notes.txt:1:TOPSECRET=public")
    assert "k.txt" not in listing[2]
