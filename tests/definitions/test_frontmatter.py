"""Issue 25, part 3: frontmatter read as YAML means it (block scalars, `[]` apart from unset), with the lenient reader
for what YAML rejects; `disallowedTools` and `tools: []` as grants; models Claude Code names; instructions that name
only the tools offered."""

from __future__ import annotations

from pathlib import Path

import pytest

from code_puppy.config import Settings
from code_puppy.definitions.files import ToolGrant, load_agents, split_frontmatter
from code_puppy.models import definition_model_name, model_name_problem
from code_puppy.run.instructions import INSTRUCTIONS, build_instructions

FOLDED = "---\ndescription: >-\n  Two lines\n  folded.\n\n  A paragraph.\ntools: []\n---\nBody\n"
LITERAL = "---\ndescription: |\n  Kept\n  lines.\nmodel:\n---\n"


@pytest.mark.parametrize("colon", ["", "\nnote: Use when: a colon YAML refuses"])
def test_block_scalars_read_as_yaml_reads_them_also_when_the_lenient_reader_does(colon: str) -> None:
    """The second case makes YAML refuse the block, so the lenient reader must agree with it."""
    fields, body = split_frontmatter(FOLDED.replace("tools: []", "tools: []" + colon))
    assert (fields["description"], fields["tools"], body) == ("Two lines folded.\nA paragraph.", [], "Body")
    fields, _ = split_frontmatter(LITERAL.replace("model:", "model:" + colon))
    assert fields["description"] == "Kept\nlines."
    assert "model" not in fields  # a key without a value is as if unset


def test_yaml_values_come_back_as_text() -> None:
    fields, _ = split_frontmatter(
        '---\nname: "a"\ndescription: "Line\\nnext"\nmaxTurns: 15\nbackground: false\n'
        "tools: [Read, Grep]\nhooks:\n  Stop:\n    - command: x\n---\n"
    )
    assert fields == {
        "name": "a",
        "description": "Line\nnext",
        "maxTurns": "15",
        "background": "false",
        "tools": ["Read", "Grep"],
    }  # a nested mapping (`hooks:`) is not read here


def write_agent(root: Path, path: str, text: str) -> None:
    target = root / ".claude" / "agents" / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def test_tools_empty_absent_and_disallowed(tmp_path: Path) -> None:
    write_agent(tmp_path, "a/none.md", "---\nname: none\ndescription: d\ntools: []\n---\n")
    write_agent(tmp_path, "b/all.md", "---\nname: all\ndescription: d\ntools:\n---\n")
    write_agent(
        tmp_path,
        "c/d/narrow.md",
        "---\nname: narrow\ndescription: d\ntools: Read, Bash(git:*), Edit\n"
        "disallowedTools: [Edit, NotebookEdit, EnterPlanMode, Frob]\n---\n",
    )
    write_agent(tmp_path, "ro.md", "---\nname: ro\ndescription: d\ndisallowedTools: Bash(rm:*), TodoWrite\n---\n")
    loaded = load_agents(tmp_path)
    grants = {definition.name: definition.grant for definition in loaded.items}
    assert [definition.name for definition in loaded.items] == ["ro", "none", "all", "narrow"]  # shallower first
    assert grants["none"] == ToolGrant(frozenset())
    assert grants["all"] == ToolGrant()
    assert grants["narrow"] == ToolGrant(frozenset({"read_file", "shell"}), ("git", "git *"), frozenset({"edit_file"}))
    assert grants["ro"].tools is None and "shell" in grants["ro"].denied and "write_plan" in grants["ro"].denied
    assert [str(problem) for problem in loaded.problems] == [
        f"{tmp_path}/.claude/agents/ro.md: disallowedTools names commands (rm, rm *): the whole shell is taken away",
        f"{tmp_path}/.claude/agents/c/d/narrow.md: unknown tool 'Frob' in disallowedTools ignored",
    ]


def test_claude_model_ids_and_offline_model_checks() -> None:
    settings = Settings()
    assert definition_model_name(settings, "claude-opus-4-1", "anthropic:claude-sonnet-4-5") == (
        "anthropic:claude-opus-4-1"
    )
    assert definition_model_name(settings, "claude-opus-4-1", "openai:gpt-5.1") == "openai:gpt-5.1"
    assert model_name_problem(settings, "openai:gpt-5.1") is None  # no credential needed to say so
    assert model_name_problem(settings, "fable") == "unknown model 'fable'"
    assert model_name_problem(settings, "nobody:x") == "unknown provider 'nobody' in 'nobody:x'"


def test_instructions_name_only_the_tools_offered(tmp_path: Path) -> None:
    assert build_instructions(tmp_path, offered=lambda tool: True) == build_instructions(tmp_path)
    assert build_instructions(tmp_path).startswith(INSTRUCTIONS)
    reading = build_instructions(tmp_path, offered=lambda tool: tool == "read_file")
    for mention in ("shell", "file tools", "tests, linters", "background"):
        assert mention not in reading
    assert "Answer in Markdown" in reading
