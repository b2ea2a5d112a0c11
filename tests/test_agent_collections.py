"""Issue 25, parts 3 and 6: real sub-agent and skill collections (tests/fixtures/claude_collections, sources in its
README) through the installed `code-puppy` against the fake server: agents in sub-folders, `disallowedTools`,
`tools: []`, block scalars, models Claude Code names, and a user-level skill whose files the model reads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.test_file_definitions import PLAN_TOOLS, system, tool_results, tools

FIXTURE = Path(__file__).parent / "fixtures" / "claude_collections"


@pytest.fixture
def collections(project: Path, code_puppy_home: Path) -> Path:
    """A project with the collections' agents in `.claude/agents/` (sub-folders kept) and their skills installed for
    the user, outside the project."""
    shutil.copytree(FIXTURE / "agents", project / ".claude" / "agents")
    shutil.copytree(FIXTURE / "skills", code_puppy_home / "skills")
    return project


AGENTS_LIST = """\
backend-architect  (project: .claude/agents/development/backend-architect.md)
  Acts as a consultative architect to design robust, scalable, and maintainable backend systems. Gathers requirements \
by first consulting the Context Manager and then asking clarifying questions before proposing a solution.
  model: sonnet → fake · tools: add_task, create_directory, delegate_task, edit_file, grep, list_files, \
mcp__context7__get-library-docs, mcp__context7__resolve-library-id, mcp__sequential-thinking__sequentialthinking, \
read_file, read_plan, remove_task, shell, update_task_status, update_task_statuses, write_file, write_plan
gallery-researcher  (project: .claude/agents/meigen-ai-design/gallery-researcher.md)
  Gallery search and inspiration agent. Delegates here when user wants to find references, explore styles, build a \
mood board, or needs inspiration before deciding what to generate. Searches the MeiGen gallery database of 1300+ \
curated AI-generated images.
  model: haiku → fake · tools: mcp__meigen__get_inspiration, mcp__meigen__search_gallery
thinker  (project: .claude/agents/validators/no-tools.md)
  Answers from what it is told, with no tools at all.
  model: fable → fake (unknown model 'fable': runs on the session's model) · tools: no tools
read-only-validator  (project: .claude/agents/validators/read-only-validator.md)
  Checks the change against its acceptance criteria. Never edits a file.
  model: claude-opus-4-8 → fake · tools: all tools except create_directory, edit_file, mcp__github, write_file
architect-reviewer  (project: .claude/agents/categories/04-quality-security/architect-reviewer.md)
  Use this agent when you need to evaluate system design decisions, architectural patterns, and technology choices \
at the macro level.
  model: inherit → fake · tools: create_directory, edit_file, grep, list_files, read_file, shell, write_file
"""


def test_agents_in_sub_folders_are_listed_by_their_names(server: FakeLLMServer, collections: Path) -> None:
    completed = run_cli("agents", "list", cwd=collections)
    assert completed.returncode == 0, completed.stderr
    # Sub-folders read, names from the frontmatter, `>-` folded and `|-` kept as YAML reads them, `disallowedTools`
    # taken away, `tools: []` as no tools, unknown models listed on the session's model (offline).
    assert completed.stdout == AGENTS_LIST
    assert completed.stderr.splitlines() == [
        "code-puppy: note: agent 'architect-reviewer' in .claude/agents/validators/duplicates/architect-reviewer.md is "
        "shadowed by .claude/agents/categories/04-quality-security/architect-reviewer.md",
        "code-puppy: note: .claude/agents: categories/04-quality-security/README.md without frontmatter, not read as "
        "agents",
    ]


def test_tools_empty_is_no_tools_and_no_promise_of_any(server: FakeLLMServer, collections: Path) -> None:
    server.script(text("As code-puppy."))
    assert run_cli("-p", "hello", cwd=collections).returncode == 0
    everything = system(server.requests[0].body)  # code-puppy itself is told about what it has
    assert "`delegate_task`" in everything and "write_plan" in everything and "shell" in everything
    server.requests.clear()
    server.script(text("Thought about it."))
    completed = run_cli("-p", "think", "--agent", "thinker", cwd=collections)
    assert completed.returncode == 0, completed.stderr
    body = server.requests[0].body
    assert tools(body) == ["load_capability"]  # only a skill's loader stays
    prompt = system(body)
    for promised in ("delegate_task", "write_plan", "shell", "read_file"):
        assert promised not in prompt
    assert (
        "code-puppy: note: agent 'thinker': model 'fable': unknown model 'fable': use PROVIDER:MODEL (e.g. "
        "openai:gpt-5.1) or a name from [models] (fake); it runs on the session's model (fake)"
    ) in completed.stderr.splitlines()
    assert server.requests[0].body["model"] == "fake-model"


def test_disallowed_tools_are_taken_away(server: FakeLLMServer, collections: Path) -> None:
    server.script(tool_calls(call("write_file", {"path": "x.txt", "content": "no"})), text("Could not."))
    completed = run_cli(
        "-p", "validate", "--agent", "read-only-validator", "--permission-mode", "yolo", cwd=collections
    )
    assert completed.returncode == 0, completed.stderr
    offered = tools(server.requests[0].body)
    assert not {"write_file", "edit_file", "create_directory"} & set(offered)
    assert {"read_file", "grep", "list_files", "shell", "delegate_task", *PLAN_TOOLS} <= set(offered)
    assert "Unknown tool name: 'write_file'" in tool_results(server.requests[1].body)[0]  # not offered at all
    assert not (collections / "x.txt").exists()


def test_a_user_level_skill_names_its_folder_and_its_files_can_be_read(
    server: FakeLLMServer, collections: Path, code_puppy_home: Path
) -> None:
    folder = code_puppy_home / "skills" / "internal-comms"
    example = f"{folder}/examples/general-comms.md"
    server.script(
        tool_calls(call("load_capability", {"id": "internal-comms"})),
        tool_calls(call("read_file", {"path": example})),
        tool_calls(call("write_file", {"path": example, "content": "changed"})),
        text("Written."),
    )
    completed = run_cli("-p", "write a status update", "--permission-mode", "yolo", cwd=collections)
    assert completed.returncode == 0, completed.stderr
    loaded = json.dumps(server.requests[1].body)
    assert (
        f"This skill's folder is {folder}; paths its instructions give are relative to it. Its files: LICENSE.txt, "
        "examples/general-comms.md."
    ) in loaded
    read = tool_results(server.requests[2].body)[-1]
    assert "## Instructions" in read or "general" in read.lower()
    assert read.startswith(f"[{example} | ")
    refused = tool_results(server.requests[3].body)[-1]
    assert "outside the project" in refused
    assert (folder / "examples" / "general-comms.md").read_text() == (
        FIXTURE / "skills" / "internal-comms" / "examples" / "general-comms.md"
    ).read_text()


def test_skills_refused_for_their_names_say_why_in_a_sentence(collections: Path, code_puppy_home: Path) -> None:
    completed = run_cli("skills", "list", cwd=collections)
    assert completed.returncode == 0
    assert completed.stdout == (
        f"internal-comms  (user: {code_puppy_home / 'skills' / 'internal-comms' / 'SKILL.md'})\n"
        "  A set of resources to help me write all kinds of internal communications, using the formats that my "
        "company likes to use. Claude should use this skill whenever asked to write some sort of internal "
        "communications (status reports, leadership updates, 3P updates, company newsletters, FAQs, incident "
        "reports, project updates, etc.).\n"
    )
    skills = code_puppy_home / "skills"
    assert completed.stderr.splitlines() == [
        f"code-puppy: warning: {skills / 'Bad_Name' / 'SKILL.md'}: 'Bad_Name' cannot be a skill's name (at most 64 "
        "lowercase letters, digits and single hyphens, not starting or ending with a hyphen); skipped",
        f"code-puppy: warning: {skills / 'renamed' / 'SKILL.md'}: its name 'old-name' differs from its folder's "
        "'renamed' (a skill is named by its folder); skipped",
    ]


def test_a_model_whose_credential_is_missing_is_listed_offline_and_runs_on_the_sessions(
    server: FakeLLMServer, project: Path
) -> None:
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "gpt.md").write_text("---\nname: gpt\ndescription: Runs on OpenAI\nmodel: openai:gpt-5.1\n---\nHi.\n")
    listed = run_cli("agents", "list", cwd=project)  # the tests' environment holds no OPENAI_API_KEY
    assert (listed.returncode, listed.stderr) == (0, "")
    assert listed.stdout == (
        "gpt  (project: .claude/agents/gpt.md)\n  Runs on OpenAI\n  model: openai:gpt-5.1 → openai:gpt-5.1 · tools: "
        "all tools\n"
    )
    server.script(text("Done."))
    completed = run_cli("-p", "go", "--agent", "gpt", cwd=project)
    assert completed.returncode == 0, completed.stderr
    assert server.requests[0].body["model"] == "fake-model"
    assert completed.stderr.splitlines()[0] == (
        "code-puppy: note: agent 'gpt': model 'openai:gpt-5.1': model 'openai:gpt-5.1' needs credentials: set "
        "OPENAI_API_KEY; it runs on the session's model (fake)"
    )
