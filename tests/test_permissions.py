"""The permission policy over the harness tools, per mode, on a real agent driven by FunctionModel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models import Model

from code_puppy.agents.builder import build_pydantic_agent
from code_puppy.agents.permissions import PermissionPolicy, allowed_by_list
from code_puppy.config import PermissionMode, Settings
from tests.scripted_model import scripted, tool_returns
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


@pytest.mark.parametrize(
    ("mode", "tool", "args", "decision"),
    [
        ("ask", "read_file", {"path": "a"}, "allow"),
        ("ask", "write_file", {"path": "a"}, "ask"),
        ("ask", "shell", {"command": "pytest"}, "allow"),
        ("ask", "shell", {"command": "make"}, "ask"),
        ("ask", "some_plugin_tool", {}, "ask"),
        ("accept-edits", "edit_file", {"path": "src/a.py"}, "allow"),
        ("accept-edits", "edit_file", {"path": "../outside.py"}, "deny"),
        ("accept-edits", "write_file", {"path": "/etc/passwd"}, "deny"),
        ("accept-edits", "shell", {"command": "make"}, "deny"),
        ("accept-edits", "shell", {"command": "pytest -x"}, "allow"),
        ("auto", "edit_file", {"path": "src/a.py"}, "allow"),
        ("auto", "edit_file", {"path": "../outside.py"}, "deny"),
        ("auto", "write_file", {"path": ".code-puppy/config.toml"}, "ask"),
        ("auto", "shell", {"command": "make"}, "allow"),
        ("auto", "shell", {"command": "rm -rf build && curl x | sh"}, "allow"),
        ("auto", "run_command", {"command": "make"}, "deny"),  # not offered, and never unsandboxed
        ("auto", "some_plugin_tool", {}, "deny"),
        ("yolo", "shell", {"command": "rm -rf build"}, "allow"),
        ("yolo", "write_file", {"path": "../x"}, "deny"),
        ("read-only", "write_file", {"path": "a"}, "deny"),
        ("read-only", "shell", {"command": "pytest"}, "deny"),
        ("read-only", "grep", {"pattern": "x"}, "allow"),
    ],
)
def test_decision_table(tmp_path: Path, mode: PermissionMode, tool: str, args: dict[str, Any], decision: str) -> None:
    policy = PermissionPolicy(tmp_path.resolve(), mode=mode, allow=["pytest*"])
    assert policy.decide(tool, args)[0] == decision


def agent_for(project: Path, model: Model, mode: PermissionMode, **kwargs: Any) -> Agent[None, str]:
    return build_pydantic_agent(Settings(), model=model, project_root=project, permission_mode=mode, **kwargs)


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
    agent = build_pydantic_agent(settings, model=script.model, project_root=project, permission_mode="yolo")
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
]
"""Paths that configure code-puppy or another agent, seen from the project root set up by `agent_config_project`."""
ORDINARY_PATHS = ["src/app.py", ".git/info/exclude", ".gitignore", "AGENTS.md", "docs/claude.md", "code-puppy/x"]


@pytest.fixture
def agent_config_project(project: Path) -> Path:
    """A project with a git folder, `hooks-link -> .git/hooks`, and `.claude -> dotfiles/claude`."""
    (project / ".git" / "hooks").mkdir(parents=True)
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


def test_the_trust_file_and_user_config_ask_when_they_lie_inside_the_project(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODE_PUPPY_HOME", str(project / "home"))
    policy = PermissionPolicy(project.resolve(), mode="accept-edits")
    for path in ("home/trusted_projects.json", "home/config.toml", "home/plugins/guard.py"):
        assert policy.decide("write_file", {"path": path})[0] == "ask"
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
    ],
)
def test_which_commands_run_in_the_sandbox(
    tmp_path: Path, mode: PermissionMode, modes: tuple[str, ...], command: str, sandboxed: bool
) -> None:
    policy = PermissionPolicy(tmp_path, mode=mode, sandbox_modes=modes, unsandboxed=("gh pr *", "cd *", "git *"))
    assert policy.sandboxes(command) is sandboxed
