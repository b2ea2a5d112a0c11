"""Definitions from files (issue 15), at the agent level: parsing, tool and model mapping, and `AgentScope` on a
real agent driven by FunctionModel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from code_puppy.config import Settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent, capability
from code_puppy.definitions.agent_scope import AgentScope
from code_puppy.definitions.file_commands import BUILT_IN_COMMANDS, load_commands
from code_puppy.definitions.files import (
    CLAUDE_TOOLS,
    OWN_TOOLS,
    AgentDefinition,
    FrontmatterError,
    ToolGrant,
    load_agents,
    parse_tools,
    split_frontmatter,
    stricter_mode,
)
from code_puppy.models import definition_model_name
from code_puppy.permissions.policy import PermissionPolicy
from code_puppy.run.deps import RunDeps
from code_puppy.sessions.session import Session
from code_puppy.tools import FILE_TOOLS, PLAN_TOOL_NAMES


def test_claude_code_tools_map_to_ours() -> None:
    grant, unknown = parse_tools("Read, Write, Edit, MultiEdit, Grep, Glob, LS, Task, WebFetch, Bash(git diff:*, ls)")
    assert grant == ToolGrant(
        frozenset({"read_file", "write_file", "create_directory", "edit_file", "grep", "list_files", "delegate_task"})
        | {"shell"},
        ("git diff", "git diff *", "ls"),
    )
    assert unknown == []
    assert parse_tools(["Bash", "Bash(git:*)", "mcp__github", "Frobnicate"]) == (
        ToolGrant(frozenset({"shell", "mcp__github"}), None),  # plain Bash: every command
        ["Frobnicate"],
    )
    assert parse_tools(None) == (ToolGrant(), [])


def test_the_tool_names_definitions_accept_are_the_agents_own() -> None:
    """`definitions/files.py` spells them out to stay light; here they are held to `code_puppy.tools`."""
    assert {*FILE_TOOLS, "shell", "delegate_task"} == OWN_TOOLS
    assert set(CLAUDE_TOOLS["todowrite"]) == PLAN_TOOL_NAMES
    assert {name for names in CLAUDE_TOOLS.values() for name in names} <= OWN_TOOLS | PLAN_TOOL_NAMES


def test_frontmatter_reads_claude_code_descriptions_and_reports_where_it_breaks() -> None:
    fields, body = split_frontmatter(
        "---\nname: a\ndescription: Use this agent when: x. Examples: <example>y</example>\n"
        "tools:\n  - Read\n  - Grep\nmodel: 'sonnet'\n---\nBody\n"
    )
    assert fields == {
        "name": "a",
        "description": "Use this agent when: x. Examples: <example>y</example>",
        "tools": ["Read", "Grep"],
        "model": "sonnet",
    }
    assert body == "Body"
    with pytest.raises(FrontmatterError, match="line 3: expected `key: value`, found `not a key`"):
        split_frontmatter("---\nname: a\nnot a key\n---\n")
    with pytest.raises(FrontmatterError, match="no frontmatter"):
        split_frontmatter("just text", required=True)


def test_modes_only_tighten() -> None:
    assert stricter_mode("ask", "yolo") == "ask"
    assert stricter_mode("yolo", "read-only") == "read-only"
    assert stricter_mode("accept-edits", None) == "accept-edits"


def test_model_aliases(tmp_path: Path) -> None:
    settings = Settings.model_validate({"models": {"opus": {"name": "big", "base_url": "http://127.0.0.1:1/v1"}}})
    assert definition_model_name(settings, "inherit", "openai:gpt-5.1") == "openai:gpt-5.1"
    assert definition_model_name(settings, "sonnet", "openai:gpt-5.1") == "openai:gpt-5.1"
    assert definition_model_name(settings, "sonnet", "anthropic:claude-opus-4-1") == "anthropic:claude-sonnet-5-5"
    assert definition_model_name(settings, "opus", "openai:gpt-5.1") == "opus"  # the [models] entry
    assert definition_model_name(settings, "openai:gpt-5.1-mini", "x:y") == "openai:gpt-5.1-mini"


def test_precedence_and_shadowing(tmp_path: Path) -> None:
    for layout in (".claude", ".agents", ".code-puppy"):
        (tmp_path / layout / "agents").mkdir(parents=True)
        (tmp_path / layout / "agents" / "r.md").write_text(f"---\nname: r\ndescription: from {layout}\n---\n")
    loaded = load_agents(tmp_path)
    assert [(d.name, d.description) for d in loaded.items] == [("r", "from .code-puppy")]
    assert len(loaded.notes) == 2 and all("is shadowed by" in note for note in loaded.notes)


def test_a_command_never_shadows_a_built_in(tmp_path: Path) -> None:
    (tmp_path / ".claude" / "commands").mkdir(parents=True)
    (tmp_path / ".claude" / "commands" / "help.md").write_text("Explain $0 then $1; all: $ARGUMENTS")
    (tmp_path / ".claude" / "commands" / "plain.md").write_text("Do the thing.")
    loaded = load_commands(tmp_path, reserved=BUILT_IN_COMMANDS)
    commands = {command.name: command for command in loaded.items}
    assert sorted(commands) == ["plain", "project:help"]
    assert loaded.notes[0].startswith("/help is built in; ") and loaded.notes[0].endswith(" is /project:help")
    assert commands["project:help"].expand('"a b" c') == 'Explain a b then c; all: "a b" c'
    assert commands["plain"].expand("now") == "Do the thing.\n\nARGUMENTS: now"


def stream_of(respond: Any) -> Any:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
        response: ModelResponse = respond(messages, info)
        for part in response.parts:
            if isinstance(part, TextPart):
                yield part.content
            elif isinstance(part, ToolCallPart):
                yield {0: DeltaToolCall(name=part.tool_name, json_args=part.args_as_json_str())}

    return stream


async def test_an_agent_in_charge_refuses_a_compound_command_outside_its_patterns(tmp_path: Path) -> None:
    offered: list[list[str]] = []
    results: list[str] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        offered.append([tool.name for tool in info.function_tools])
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("shell", {"command": "git status && rm -rf src"})])
        results.extend(str(part.content) for part in messages[-1].parts if isinstance(part, ToolReturnPart))
        return ModelResponse(parts=[TextPart("ok")])

    agent = build_pydantic_agent(Settings(), AgentOptions(project_root=tmp_path, permission_mode="yolo"))
    scope = capability(agent, AgentScope)
    assert scope is not None
    grant, _ = parse_tools("Read, Bash(git:*)")
    scope.definition = AgentDefinition("git-only", "d", "Only git.", tmp_path / "g.md", "project", grant=grant)
    session = Session.in_memory()
    model = FunctionModel(respond, stream_function=stream_of(respond))
    await agent.run("go", model=model, deps=RunDeps(session))
    assert offered[0] == ["read_file", "shell"]
    assert results == [
        "`git status && rm -rf src` is outside the commands agent 'git-only' may run (git, git *). Do not retry it."
    ]


def test_the_users_definition_folders_are_protected(tmp_path: Path, code_puppy_home: Path) -> None:
    policy = PermissionPolicy(tmp_path, mode="accept-edits")
    for folder in ("agents", "commands", "skills"):
        target = code_puppy_home / folder / "x.md"
        assert policy.agent_config(str(target)) == str(target.resolve())
        assert policy.decide("write_file", {"path": str(target)})[0] != "allow"
    assert policy.agent_config(str(code_puppy_home / "notes.md")) is None
