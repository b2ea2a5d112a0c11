"""The permission policy over the harness tools, per mode, on a real agent driven by FunctionModel."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from pydantic_ai import Agent, ToolDefinition
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models import Model
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, RunContext, ToolDenied

from code_puppy.config import PermissionMode, Settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent, capability
from code_puppy.permissions.policy import PermissionPolicy, allowed_by_list, mcp_allowed
from code_puppy.plugins import ToolDecision
from code_puppy.run.deps import RunDeps
from code_puppy.sessions.session import Session
from code_puppy.tools import is_read_only
from tests.scripted_model import scripted, tool_returns
from tests.test_auto_mode import approve_all
from tests.test_mcp import BUILT_IN, PLAN_TOOLS


@pytest.mark.parametrize(
    ("command", "allowed"),
    [
        ("pytest -q", True),
        ("git status", True),
        ("git  status", True),
        ("git status --short", False),
        ("git diff --stat", True),
        ("ls && git status", False),
        ("pytest -q && git diff", True),
        ("pytest -q; rm -rf x", False),
        ("pytest -q && rm -rf x", False),
        ("pytest -q || rm -rf x", False),
        ("pytest\rrm -rf x", False),
        ("pytest | tee out", False),
        ("pytest > out.txt", False),
        ("pytest $(rm -rf x)", False),
        ("pytest `rm -rf x`", False),
        ("pytest &", False),
        ("(pytest)", False),
        ("pytest\nrm -rf x", False),
        ("", False),
    ],
)
def test_allow_list_matches_every_segment(command: str, allowed: bool) -> None:
    assert allowed_by_list(command, ["pytest*", "git status", "git diff*"]) is allowed


def test_an_empty_segment_or_an_empty_list_matches_nothing() -> None:
    assert [allowed_by_list(command, ["*"]) for command in ("ls", "ls;", "ls && ", "")] == [True, False, False, False]
    assert allowed_by_list("ls", []) is False


@pytest.mark.parametrize(
    ("permission", "allowed"),
    [
        ("mcp__gh__get_issue", True),  # exactly
        ("mcp__docs__search", True),  # the whole server
        ("mcp__docsearch__find", False),  # another server whose name starts alike
        ("mcp__fs__read_text", True),  # a pattern
        ("mcp__fs__write_text", False),
    ],
)
def test_mcp_allow_entries_name_a_tool_a_server_or_a_pattern(permission: str, allowed: bool) -> None:
    allow = ["pytest*", "*", "mcp__gh__get_issue", "mcp__docs", "mcp__fs__read_*"]  # `*` is a shell entry
    assert mcp_allowed(permission, allow) is allowed


@pytest.mark.parametrize(
    ("name", "metadata", "read_only"),
    [
        ("read_file", None, True),
        ("check_command", None, True),
        ("write_file", None, False),
        ("mcp_tool", {"annotations": {"readOnlyHint": True}}, True),
        ("mcp_tool", {"annotations": {"readOnlyHint": "true"}}, False),
        ("mcp_tool", {"annotations": {"destructiveHint": True}}, False),
        ("mcp_tool", {"annotations": ["readOnlyHint"]}, False),
        ("mcp_tool", None, False),
    ],
)
def test_read_only_tools_are_the_readers_and_mcp_tools_marked_so(
    name: str, metadata: dict[str, Any] | None, read_only: bool
) -> None:
    assert is_read_only(ToolDefinition(name=name, metadata=metadata)) is read_only


NOT_LISTED = "`make` is not on the shell allow-list, and {} mode only runs allow-listed commands. Do not retry it."
OUTSIDE = "`{}` is outside the project (ROOT); it cannot be changed."
CONFIG = (
    "`.code-puppy/config.toml` (.code-puppy/config.toml) configures code-puppy or another agent, so changing it needs "
    "the user's approval in every permission mode but yolo, and this run is non-interactive: it was denied. Do not "
    "retry it; say what you would change, so the user can make the change."
)
MCP_NOT_LISTED = (
    "`tool` is an MCP tool that is not allow-listed (mcp__srv__tool), and {} mode only allows file edits. Do not retry "
    "it."
)


@pytest.mark.parametrize(
    ("mode", "tool", "args", "verdict"),
    [
        ("ask", "read_file", {"path": "a"}, ("allow", "")),
        ("ask", "check_command", {}, ("allow", "")),
        ("ask", "stop_command", {}, ("allow", "")),
        ("ask", "write_file", {"path": "a"}, ("ask", "")),
        ("ask", "edit_file", {"path": "a"}, ("ask", "")),
        ("ask", "create_directory", {"path": "."}, ("ask", "")),
        ("ask", "shell", {"command": "pytest"}, ("allow", "")),
        ("ask", "run_command", {"command": "pytest -q"}, ("allow", "")),
        ("ask", "start_command", {"command": "pytest -q"}, ("allow", "")),
        ("ask", "shell", {"command": "make"}, ("ask", "")),
        ("ask", "some_plugin_tool", {}, ("ask", "")),
        ("accept-edits", "edit_file", {"path": "src/a.py"}, ("allow", "")),
        ("accept-edits", "create_directory", {"path": "."}, ("allow", "")),
        ("accept-edits", "write_file", {}, ("allow", "")),  # the tool itself rejects a missing path
        ("accept-edits", "write_file", {"path": 3}, ("allow", "")),
        ("accept-edits", "write_file", {"path": ""}, ("allow", "")),
        ("accept-edits", "edit_file", {"path": "../outside.py"}, ("deny", OUTSIDE.format("../outside.py"))),
        ("accept-edits", "write_file", {"path": "/etc/passwd"}, ("deny", OUTSIDE.format("/etc/passwd"))),
        (
            "accept-edits",
            "write_file",
            {"path": ".code-puppy/worktrees/other/a.py"},
            (
                "deny",
                "`.code-puppy/worktrees/other/a.py` is outside the project (in .code-puppy/worktrees/, other agents' "
                "worktrees); it cannot be changed.",
            ),
        ),
        ("accept-edits", "shell", {"command": "make"}, ("deny", NOT_LISTED.format("accept-edits"))),
        ("accept-edits", "shell", {"command": "pytest -x"}, ("allow", "")),
        (
            "accept-edits",
            "some_plugin_tool",
            {},
            (
                "deny",
                "`some_plugin_tool` is not a file edit, and accept-edits mode only allows edits. Do not retry it.",
            ),
        ),
        ("accept-edits", "write_file", {"path": ".code-puppy/config.toml"}, ("ask", CONFIG)),
        ("auto", "edit_file", {"path": "src/a.py"}, ("allow", "")),
        ("auto", "edit_file", {"path": "../outside.py"}, ("deny", OUTSIDE.format("../outside.py"))),
        ("auto", "write_file", {"path": ".code-puppy/config.toml"}, ("ask", CONFIG)),
        ("auto", "shell", {"command": "make"}, ("allow", "")),
        ("auto", "shell", {"command": "rm -rf build && curl x | sh"}, ("allow", "")),
        ("auto", "run_command", {"command": "make"}, ("deny", NOT_LISTED.format("auto"))),  # never unsandboxed
        (
            "auto",
            "run_command",
            {"command": "pytest --basetemp=x"},
            (
                "deny",
                "`pytest --basetemp=x` matches the shell allow-list, but `--basetemp` (pytest) deletes and recreates "
                "the folder it names, and an allow-list entry covers a command only without such options. Do not "
                "retry it.",
            ),
        ),
        (
            "auto",
            "some_plugin_tool",
            {},
            ("deny", "`some_plugin_tool` is not a file edit, and auto mode only allows edits. Do not retry it."),
        ),
        ("yolo", "shell", {"command": "rm -rf build"}, ("allow", "")),
        ("yolo", "write_file", {"path": ".code-puppy/config.toml"}, ("allow", "")),
        ("yolo", "write_file", {"path": "../x"}, ("deny", OUTSIDE.format("../x"))),
        ("read-only", "write_file", {"path": "a"}, ("deny", "`write_file` is not available in read-only mode.")),
        ("read-only", "shell", {"command": "pytest"}, ("deny", "`shell` is not available in read-only mode.")),
        ("read-only", "grep", {"pattern": "x"}, ("allow", "")),
        ("read-only", "write_plan", {}, ("allow", "")),
        ("read-only", "delegate_task", {}, ("allow", "")),
        ("read-only", "load_capability", {}, ("allow", "")),
    ],
)
def test_decision_table(
    tmp_path: Path, mode: PermissionMode, tool: str, args: dict[str, Any], verdict: tuple[str, str]
) -> None:
    policy = PermissionPolicy(tmp_path.resolve(), mode=mode, allow=["pytest*"])
    assert policy.decide(tool, args) == (verdict[0], verdict[1].replace("ROOT", str(tmp_path.resolve())))


@pytest.mark.parametrize(
    ("mode", "tool", "verdict"),
    [
        ("ask", "tool", ("ask", "")),
        ("ask", "read_file", ("ask", "")),  # an MCP tool named like a reader is still an MCP tool
        ("ask", "listed", ("allow", "")),
        ("accept-edits", "tool", ("deny", MCP_NOT_LISTED.format("accept-edits"))),
        ("accept-edits", "listed", ("allow", "")),
        ("auto", "tool", ("deny", MCP_NOT_LISTED.format("auto"))),
        ("yolo", "tool", ("allow", "")),
        ("read-only", "listed", ("deny", "`listed` is not available in read-only mode.")),
    ],
)
def test_mcp_tools_run_when_listed_or_in_yolo(
    tmp_path: Path, mode: PermissionMode, tool: str, verdict: tuple[str, str]
) -> None:
    policy = PermissionPolicy(tmp_path.resolve(), mode=mode, allow=["mcp__srv__listed"])
    assert policy.decide(tool, {}, mcp_permission=f"mcp__srv__{tool}") == verdict


def test_what_always_for_this_session_covers_and_what_the_prompt_says(tmp_path: Path) -> None:
    policy = PermissionPolicy(tmp_path.resolve())
    assert policy.decide("write_file", {"path": "a"}) == ("ask", "")  # ask is the default mode
    calls = [
        ("shell", {"command": "git  diff\t--stat "}),
        ("run_command", {"command": "ls"}),
        ("write_file", {"path": ".mcp.json"}),
        ("create_directory", {"path": "src/new"}),
        ("fetch", {"url": "x"}),
    ]
    assert [(policy.scope(tool, args), policy.summary(tool, args)) for tool, args in calls] == [
        ("shell:git diff --stat", "run `git  diff\t--stat `"),
        ("shell:ls", "run `ls`"),
        (
            "config:write_file:.mcp.json",
            "write file .mcp.json, which configures code-puppy or another agent (always asked, in every mode but yolo)",
        ),
        ("tool:create_directory", "create directory src/new"),
        ("tool:fetch", "call fetch"),
    ]


INSTRUCTIONS = {
    "read-only": "Permission mode: read-only. You can read and search files but not change anything or run commands.",
    "yolo": "Permission mode: yolo. File changes and commands run without asking.",
    "auto": "Permission mode: auto. File changes inside the project run, except to files that configure code-puppy or "
    "other agents (.code-puppy/, .claude/, .agents/, .mcp.json, .git/hooks, .git/config), which need the user's "
    "approval; every shell command runs without asking, inside a sandbox.",
    "accept-edits": "Permission mode: accept-edits. File changes inside the project run, except to files that "
    "configure code-puppy or other agents (.code-puppy/, .claude/, .agents/, .mcp.json, .git/hooks, .git/config), "
    "which need the user's approval; commands run only if allow-listed.",
    "ask": "Permission mode: ask, non-interactive. Nobody can approve tool calls, so file changes and commands outside "
    "the allow-list are denied. If you need one, say what you would do instead of retrying.",
}


@pytest.mark.parametrize("mode", [*INSTRUCTIONS, "ask interactively"])
async def test_the_model_is_told_its_permission_mode(tmp_path: Path, mode: str) -> None:
    script = scripted("ok")
    interactive = mode == "ask interactively"
    policy = PermissionPolicy(tmp_path.resolve(), mode="ask" if interactive else cast(PermissionMode, mode))
    deps = RunDeps(Session.in_memory(), ask=approve_all if interactive else None)
    await Agent(script.model, capabilities=[policy], deps_type=RunDeps).run("hi", deps=deps)
    assert script.infos[0].instructions == (
        "Permission mode: ask. File changes and commands outside the allow-list ask the user first."
        if interactive
        else INSTRUCTIONS[mode]
    )


def agent_for(project: Path, model: Model, mode: PermissionMode, **kwargs: Any) -> Agent[None, str]:
    return build_pydantic_agent(
        Settings(), AgentOptions(model=model, project_root=project, permission_mode=mode, **kwargs)
    )


async def test_headless_ask_denies_edits_and_the_model_is_told_why(project: Path) -> None:
    script = scripted(
        [ToolCallPart("write_file", {"path": "new.txt", "content": "x"}, tool_call_id="w1")],
        [ToolCallPart("write_file", {"path": "new.txt", "content": "x"}, tool_call_id="w2")],
        "I could not write the file.",
    )
    result = await agent_for(project, script.model, "ask").run("write new.txt")
    returns = tool_returns(result.all_messages())
    assert [(name, outcome) for name, outcome, _ in returns] == [("write_file", "denied"), ("write_file", "denied")]
    assert "needs the user's approval in 'ask' mode and this run is non-interactive" in returns[0][2]
    assert result.output == "I could not write the file."
    assert not (project / "new.txt").exists()


async def test_accept_edits_writes_inside_and_denies_outside(project: Path) -> None:
    script = scripted(
        [
            ToolCallPart("write_file", {"path": "inside.txt", "content": "in"}, tool_call_id="a"),
            ToolCallPart("write_file", {"path": "../outside.txt", "content": "out"}, tool_call_id="b"),
            ToolCallPart("shell", {"command": "touch made-by-shell"}, tool_call_id="c"),
        ],
        "done",
    )
    result = await agent_for(project, script.model, "accept-edits").run("go")
    outcomes = {name + ":" + outcome for name, outcome, _ in tool_returns(result.all_messages())}
    assert outcomes == {"write_file:success", "write_file:denied", "shell:denied"}
    assert (project / "inside.txt").read_text() == "in"
    assert not (project.parent / "outside.txt").exists()
    assert not (project / "made-by-shell").exists()


async def test_allow_list_lets_a_headless_command_run(project: Path) -> None:
    script = scripted([ToolCallPart("shell", {"command": "touch ok.txt"}, tool_call_id="s")], "ran")
    await agent_for(project, script.model, "ask", allow=("touch ok.txt",)).run("go")
    assert (project / "ok.txt").exists()


async def test_yolo_runs_commands(project: Path) -> None:
    script = scripted([ToolCallPart("shell", {"command": "echo hi > yolo.txt"}, tool_call_id="s")], "ran")
    await agent_for(project, script.model, "yolo").run("go")
    assert (project / "yolo.txt").read_text() == "hi\n"


async def test_read_only_offers_no_editing_or_shell_tools(project: Path) -> None:
    script = scripted("ok")
    await agent_for(project, script.model, "read-only").run("look around")
    assert sorted(tool.name for tool in script.infos[0].function_tools) == sorted(
        ["delegate_task", "grep", "list_files", "read_file", *PLAN_TOOLS]  # the plan changes nothing
    )


async def test_default_tools_are_the_file_tools_shell_and_delegation(project: Path) -> None:
    script = scripted("ok")
    await agent_for(project, script.model, "ask").run("hi")
    assert sorted(tool.name for tool in script.infos[0].function_tools) == BUILT_IN


"""The harness Planning tools, offered in every mode."""

SECRETS = {
    "OPENAI_API_KEY": "sk-openai",
    "GROQ_API_KEY": "sk-groq",
    "MISTRAL_API_KEY": "sk-mistral",
    "DEEPSEEK_API_KEY": "sk-deepseek",
    "CO_API_KEY": "sk-cohere",
    "XAI_API_KEY": "sk-xai",
    "HF_TOKEN": "hf-token",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "AZURE_OPENAI_API_KEY": "azure-key",
    "LOCAL_MODEL_KEY": "sk-local",
    "MCP_SERVER_TOKEN": "mcp-token",
}


async def test_shell_environment_has_no_secrets(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HARMLESS", "visible")
    from code_puppy.config import McpServerConfig, ModelEndpoint

    settings = Settings(
        models={"local": ModelEndpoint(name="m", api_key_env="LOCAL_MODEL_KEY")},
        mcp_servers={
            "gh": McpServerConfig(url="http://127.0.0.1:1/mcp", headers={"Authorization": "${MCP_SERVER_TOKEN}"})
        },
    )
    script = scripted([ToolCallPart("shell", {"command": "env > env.txt"}, tool_call_id="s")], "ok")
    agent = build_pydantic_agent(
        settings, AgentOptions(model=script.model, project_root=project, permission_mode="yolo")
    )
    await agent.run("dump env")
    env = (project / "env.txt").read_text()
    assert "HARMLESS=visible" in env
    assert [value for value in SECRETS.values() if value in env] == []


async def test_agents_md_reaches_the_instructions(project: Path) -> None:
    (project / "AGENTS.md").write_text("Always answer in haiku.\n")
    script = scripted("ok")
    await agent_for(project, script.model, "ask").run("hi")
    assert "Always answer in haiku." in str(script.infos[0].instructions)
    assert f"Project root: {project.resolve()}" in str(script.infos[0].instructions)


@pytest.mark.parametrize("mode", ["accept-edits", "yolo"])
def test_a_sibling_directory_named_like_the_project_is_outside_it(tmp_path: Path, mode: PermissionMode) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (tmp_path / "proj-evil").mkdir()
    policy = PermissionPolicy(root.resolve(), mode=mode)
    for path in ("../proj-evil/x", str(tmp_path / "proj-evil" / "x")):
        decision, reason = policy.decide("write_file", {"path": path})
        assert (decision, reason) == (
            "deny",
            f"`{path}` is outside the project ({root.resolve()}); it cannot be changed.",
        )


AGENT_CONFIG_PATHS = [
    ".code-puppy/config.toml",
    ".code-puppy/plugins/p.py",
    "./.code-puppy/../.code-puppy/config.toml",
    "src/../.code-puppy",
    ".mcp.json",
    "mcp.json",
    ".claude/settings.json",
    ".claude/commands/deploy.md",
    ".agents/skills/x.md",
    ".git/hooks/pre-commit",
    ".git/config",
    ".git",
    "vendor/lib/.git/hooks/post-checkout",
    "packages/app/.code-puppy/config.toml",
    ".Code-Puppy/config.toml",
    "hooks-link/pre-commit",
    "dotfiles/claude/settings.json",
    "dotfiles/claude",
    "gitconfig",
]
"""Paths that configure code-puppy or another agent, seen from the project root set up by `agent_config_project`."""
ORDINARY_PATHS = [".", "src/app.py", ".git/info/exclude", ".gitignore", "AGENTS.md", "docs/claude.md", "code-puppy/x"]


@pytest.fixture
def agent_config_project(project: Path) -> Path:
    """A project with a git folder whose `config` links to `gitconfig`, `hooks-link -> .git/hooks`, and
    `.claude -> dotfiles/claude`."""
    (project / ".git" / "hooks").mkdir(parents=True)
    (project / "gitconfig").write_text("[core]\n")
    (project / ".git" / "config").symlink_to("../gitconfig")
    (project / "hooks-link").symlink_to(project / ".git" / "hooks")
    (project / "dotfiles" / "claude").mkdir(parents=True)
    (project / ".claude").symlink_to("dotfiles/claude")
    return project.resolve()


@pytest.mark.parametrize("path", AGENT_CONFIG_PATHS)
@pytest.mark.parametrize("tool", ["write_file", "edit_file", "create_directory"])
def test_paths_that_configure_an_agent_always_ask_but_in_yolo(agent_config_project: Path, tool: str, path: str) -> None:
    def decide(mode: PermissionMode) -> str:
        return PermissionPolicy(agent_config_project, mode=mode).decide(tool, {"path": path})[0]

    assert [decide("ask"), decide("accept-edits")] == ["ask"] * 2
    assert (decide("yolo"), decide("read-only")) == ("allow", "deny")


@pytest.mark.parametrize("path", ORDINARY_PATHS)
def test_ordinary_paths_are_edits_like_any_other(agent_config_project: Path, path: str) -> None:
    policy = PermissionPolicy(agent_config_project, mode="accept-edits")
    assert (policy.decide("write_file", {"path": path})[0], policy.agent_config(path)) == ("allow", None)


def test_what_is_no_path_or_lies_outside_configures_nothing(agent_config_project: Path) -> None:
    policy = PermissionPolicy(agent_config_project, mode="accept-edits")
    assert [policy.agent_config(path) for path in ("", None, 3, "/etc/passwd", "../x/.claude")] == [None] * 5


def test_the_trust_file_and_user_config_ask_when_they_lie_inside_the_project(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODE_PUPPY_HOME", str(project / "home"))
    policy = PermissionPolicy(project.resolve(), mode="accept-edits")
    owned = ("trusted_projects.json", "config.toml", "plugins", "plugins/guard.py", "agents/a.md", "commands/c.md")
    for path in (f"home/{name}" for name in (*owned, "skills/s/SKILL.md")):
        assert (policy.decide("write_file", {"path": path})[0], policy.agent_config(path)) == (
            "ask",
            str(project.resolve() / path),
        )
    assert policy.decide("write_file", {"path": "home/notes.txt"})[0] == "allow"


async def test_headless_accept_edits_cannot_write_agent_config_and_the_model_is_told_why(project: Path) -> None:
    script = scripted(
        [
            ToolCallPart(
                "write_file", {"path": ".code-puppy/config.toml", "content": "[mcp_servers.x]\n"}, tool_call_id="a"
            ),
            ToolCallPart("write_file", {"path": "notes.txt", "content": "fine"}, tool_call_id="b"),
        ],
        "done",
    )
    result = await agent_for(project, script.model, "accept-edits").run("go")
    returns = tool_returns(result.all_messages())
    assert [(name, outcome) for name, outcome, _ in returns] == [("write_file", "denied"), ("write_file", "success")]
    assert returns[0][2] == (
        "`.code-puppy/config.toml` (.code-puppy/config.toml) configures code-puppy or another agent, so changing it "
        "needs the user's approval in every permission mode but yolo, and this run is non-interactive: it was denied. "
        "Do not retry it; say what you would change, so the user can make the change."
    )
    assert not (project / ".code-puppy").exists()


@pytest.mark.parametrize(
    ("mode", "modes", "command", "sandboxed"),
    [
        ("auto", (), "make test", True),  # auto always
        ("auto", (), "gh pr list", False),  # a `sandbox = false` entry
        ("auto", (), "gh pr list && rm -rf /", True),  # every segment must match it
        ("auto", (), "gh pr list --repo x; cd /; git -c core.pager=sh log", True),
        ("ask", (), "make test", False),  # approved commands run as the user by default
        ("ask", ("ask",), "make test", True),
        ("accept-edits", ("auto", "ask"), "make test", False),
        ("accept-edits", ("accept-edits",), "gh pr view 1", False),
        ("yolo", ("auto", "accept-edits", "ask"), "make test", False),  # yolo never
        ("read-only", ("read-only",), "make test", False),
        ("ask", ("ask",), "gh pr list", False),
        ("auto", (), "gh pr list --repo $REPO", True),  # the shell computes a word of it
    ],
)
def test_which_commands_run_in_the_sandbox(
    tmp_path: Path, mode: PermissionMode, modes: tuple[str, ...], command: str, sandboxed: bool
) -> None:
    policy = PermissionPolicy(tmp_path, mode=mode, sandbox_modes=modes, unsandboxed=("gh pr *", "cd *", "git *"))
    assert policy.sandboxes(command) is sandboxed


@pytest.mark.parametrize(
    ("mode", "modes", "sandboxing"),
    [
        ("auto", (), True),
        ("ask", (), False),
        ("ask", ("ask",), True),
        ("accept-edits", ("accept-edits",), True),
        ("accept-edits", ("ask",), False),
        ("yolo", ("yolo",), False),
        ("read-only", ("read-only",), False),
    ],
)
def test_which_modes_sandbox_commands(
    tmp_path: Path, mode: PermissionMode, modes: tuple[str, ...], sandboxing: bool
) -> None:
    assert PermissionPolicy(tmp_path, mode=mode, sandbox_modes=modes).sandboxing is sandboxing


async def test_interactive_ask_asks_about_a_command_the_shell_computes_and_the_answer_holds(
    project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.diff"
    (project / "a.txt").write_text("one\n")
    (project / "b.txt").write_text("two\n")
    computed = f"git diff --no-index --out${{NOPE}}put={outside} a.txt b.txt"
    asked: list[dict[str, Any]] = []

    async def refuse(ctx: RunContext[Any], requests: DeferredToolRequests, token: str) -> DeferredToolResults:
        asked.extend(requests.metadata.values())
        return requests.build_results(approvals={call.tool_call_id: ToolDenied("no") for call in requests.approvals})

    script = scripted(
        [ToolCallPart("shell", {"command": computed}, tool_call_id="a")],
        [ToolCallPart("shell", {"command": "touch approved-before"}, tool_call_id="b")],
        "done",
    )
    agent = agent_for(project, script.model, "ask", allow=("git diff*",))
    policy = capability(agent, PermissionPolicy)
    assert policy is not None
    policy.session_allowed.add("shell:touch approved-before")
    result = await agent.run("diff", deps=RunDeps(Session.in_memory(), ask=refuse))
    assert asked == [{"scope": f"shell:{computed}", "summary": f"run `{computed}`"}]
    assert [(name, outcome) for name, outcome, _ in tool_returns(result.all_messages())] == [
        ("shell", "denied"),
        ("shell", "success"),
    ]
    assert not outside.exists() and (project / "approved-before").exists()


async def test_plugins_are_asked_once_per_call_though_it_waits_for_approval_and_can_block_it(project: Path) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    async def pre_tool_call(tool: str, args: dict[str, Any], session: Session, call_id: str) -> ToolDecision | None:
        asked.append((tool, args))
        return ToolDecision("deny", "no secrets") if args.get("path") == "secret.txt" else None

    script = scripted(
        [
            ToolCallPart("write_file", {"path": "new.txt", "content": "x"}, tool_call_id="a"),
            ToolCallPart("write_file", {"path": "secret.txt", "content": "x"}, tool_call_id="b"),
        ],
        "done",
    )
    agent = agent_for(project, script.model, "ask")
    policy = capability(agent, PermissionPolicy)
    assert policy is not None
    policy.pre_tool_call = pre_tool_call
    result = await agent.run("write", deps=RunDeps(Session.in_memory(), ask=approve_all))
    assert sorted(asked, key=str) == [
        ("write_file", {"path": "new.txt", "content": "x"}),
        ("write_file", {"path": "secret.txt", "content": "x"}),
    ]
    assert sorted(tool_returns(result.all_messages())) == [
        ("write_file", "denied", "no secrets"),
        ("write_file", "success", "Wrote 1 chars (1 lines) to new.txt."),
    ]
    assert not (project / "secret.txt").exists()
