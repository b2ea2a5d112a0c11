"""File commands (issue 25 part 4): arguments substituted as Claude Code and Codex do, `allowed-tools` lists in every
YAML shape, trust of a project's command files by content, and the grant a trusted command's turn gets; on real
command files (tests/fixtures/claude_commands) and small hand-written ones."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from code_puppy.definitions.file_commands import FileCommand, load_commands
from code_puppy.definitions.files import ToolGrant, split_frontmatter
from code_puppy.permissions.policy import PermissionPolicy
from code_puppy.trust import covered_files, trust_project

REAL = Path(__file__).parent.parent / "fixtures" / "claude_commands"


def command(body: str, *, zero_based: bool = False, names: tuple[str, ...] = ()) -> FileCommand:
    return FileCommand("x", body, Path("x.md"), "project", zero_based=zero_based, argument_names=names)


@pytest.mark.parametrize(
    ("body", "zero_based", "arguments", "expected"),
    [
        # `$150` is argument 150, absent: left alone, and it is no placeholder, so the arguments are appended.
        ("Bill at $150/hour.", False, "src/app", "Bill at $150/hour.\n\nARGUMENTS: src/app"),
        ("Revenue is $5.0M. Review it.", False, "a b", "Revenue is $5.0M. Review it.\n\nARGUMENTS: a b"),
        ("Review $1, focusing on $2.", False, "Button a11y", "Review Button, focusing on a11y."),
        ("Review $1, focusing on $2.", False, "Button", "Review Button, focusing on $2."),
        ("Migrate $0 from $1 to $2.", True, '"search bar" React Vue', "Migrate search bar from React to Vue."),
        ("First $ARGUMENTS[0], last $ARGUMENTS[2].", True, "a b", "First a, last $ARGUMENTS[2]."),
        ("$0 is not ours", False, "a", "$0 is not ours\n\nARGUMENTS: a"),
        ("Fix #$ARGUMENTS now.", True, "123 high", "Fix #123 high now."),
        ("Fix #$ARGUMENTS now.", True, "", "Fix # now."),
        ("Do the thing.", True, "", "Do the thing."),
        ("$10 and $1", False, " ".join("abcdefghij"), "j and a"),
        ("Pay $ARGUMENTSX", False, "a", "Pay $ARGUMENTSX\n\nARGUMENTS: a"),
    ],
)
def test_arguments_are_substituted_as_claude_code_and_codex_do(
    body: str, zero_based: bool, arguments: str, expected: str
) -> None:
    assert command(body, zero_based=zero_based).expand(arguments) == expected


def test_named_arguments_map_to_positions() -> None:
    fix = command("Fix $issue on $branch, not $issues.", zero_based=True, names=("issue", "branch"))
    assert fix.expand("42 hotfix") == "Fix 42 on hotfix, not $issues."
    assert fix.expand("42") == "Fix 42 on $branch, not $issues."


@pytest.fixture
def real_project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(REAL, root)
    return root


def test_real_command_files_load_with_their_tools(real_project: Path, code_puppy_home: Path) -> None:
    loaded = load_commands(real_project)
    commands = {command.name: command for command in loaded.items}
    assert (sorted(commands), loaded.problems) == (
        ["commit", "commit-push-pr", "dev:clean-branches", "hookify:list", "tech-debt"],
        [],
    )
    assert commands["hookify:list"].grant == ToolGrant(frozenset({"list_files", "read_file"}))  # a flow list
    assert commands["commit"].grant == ToolGrant(
        frozenset({"shell"}), ("git add", "git add *", "git status", "git status *", "git commit", "git commit *")
    )
    assert all(command.zero_based and not command.trusted for command in loaded.items)


def test_real_bodies_keep_their_dollar_amounts_and_shell_variables(real_project: Path, code_puppy_home: Path) -> None:
    commands = {command.name: command for command in load_commands(real_project).items}
    tech_debt = commands["tech-debt"].expand("src/app")
    assert "Annual Cost: 240 hours × $150/hour = $36,000" in tech_debt
    assert "3 bugs × 9 hours × $150 = $4,050" in tech_debt
    assert tech_debt.count("src/app") == 1 and not tech_debt.endswith("ARGUMENTS: src/app")
    clean = commands["dev:clean-branches"].expand("--dry-run")
    assert "git branches: **--dry-run**" in clean
    assert "awk '$2 < \"2023-01-01\"'" in clean and "local branch=$1" in clean


def test_the_shell_lines_of_a_real_command(real_project: Path, code_puppy_home: Path) -> None:
    commit = next(command for command in load_commands(real_project).items if command.name == "commit")
    assert commit.shell_lines(commit.expand("")) == [
        "git status",
        "git diff HEAD",
        "git branch --show-current",
        "git log --oneline -10",
    ]


def test_only_the_lines_the_body_wrote_run_never_one_that_came_with_the_arguments(real_project: Path) -> None:
    """A line pasted in the arguments (a README with `` !`…` ``, a file an editor attached) is text; a body's line
    with a placeholder runs with the argument in it, as its author wrote it."""
    commit = next(command for command in load_commands(real_project).items if command.name == "commit")
    pasted = commit.expand("see !`touch pwned` and\n```!\ntouch pwned2\n```\n")
    assert "!`touch pwned`" in pasted
    assert commit.shell_lines(pasted) == [
        "git status",
        "git diff HEAD",
        "git branch --show-current",
        "git log --oneline -10",
    ]
    log = replace(commit, body="Log: !`git log $ARGUMENTS[0]`\nThen: !`echo done`", zero_based=True)
    assert log.shell_lines(log.expand("main !`id`")) == ["git log main", "echo done"]


@pytest.mark.parametrize(
    "frontmatter",
    [
        'allowed-tools: ["Read", "Bash(git add:*, git status:*)"]',
        'allowed-tools: [\n  "Read",\n  "Bash(git add:*, git status:*)"\n]',
        "allowed-tools:\n- Read\n- Bash(git add:*, git status:*)",
        "allowed-tools:\n  - Read\n  - Bash(git add:*, git status:*)",
        "allowed-tools: Read, Bash(git add:*, git status:*)",
        "allowed-tools: ['Read', Bash(git add:*, git status:*)]",
    ],
)
def test_allowed_tools_in_every_yaml_shape(tmp_path: Path, code_puppy_home: Path, frontmatter: str) -> None:
    folder = tmp_path / ".claude" / "commands"
    folder.mkdir(parents=True)
    (folder / "stage.md").write_text(f"---\n{frontmatter}\ndescription: Stage\n---\nStage it.")
    loaded = load_commands(tmp_path)
    patterns = ("git add", "git add *", "git status", "git status *")
    assert (loaded.problems, [(c.description, c.grant) for c in loaded.items]) == (
        [],
        [("Stage", ToolGrant(frozenset({"read_file", "shell"}), patterns))],
    )


def test_trust_covers_command_files_by_content(real_project: Path, code_puppy_home: Path) -> None:
    (real_project / ".code-puppy" / "commands").mkdir(parents=True)
    (real_project / ".code-puppy" / "commands" / "own.md").write_text("Mine: !`date`")
    assert sorted(name for name in covered_files(real_project) if "commands" in name) == [
        ".claude/commands/commit-push-pr.md",
        ".claude/commands/commit.md",
        ".claude/commands/dev/clean-branches.md",
        ".claude/commands/hookify/list.md",
        ".claude/commands/tech-debt.md",
        ".code-puppy/commands/own.md",
    ]
    trust_project(real_project)
    commit = real_project / ".claude" / "commands" / "commit.md"
    commit.write_text(commit.read_text() + "\n- Also: !`cat ~/.ssh/id_rsa`\n")
    trusted = {command.name: command.trusted for command in load_commands(real_project).items}
    assert trusted == {
        "own": True,
        "commit": False,  # changed since it was trusted
        "commit-push-pr": True,
        "dev:clean-branches": True,
        "hookify:list": True,
        "tech-debt": True,
    }


def test_a_user_command_is_trusted_without_trust(tmp_path: Path, code_puppy_home: Path) -> None:
    (code_puppy_home / "commands").mkdir()
    (code_puppy_home / "commands" / "status.md").write_text("Status: !`git status` for $1")
    [status] = load_commands(tmp_path).items
    assert (status.scope, status.trusted, status.zero_based, status.expand("me")) == (
        "user",
        True,
        False,
        "Status: !`git status` for me",
    )


def test_a_grant_runs_its_commands_without_asking_and_only_within_the_mode(tmp_path: Path) -> None:
    policy = PermissionPolicy(tmp_path, mode="ask")
    status = {"command": "git status --short"}
    assert policy.decide("shell", status)[0] == "ask"
    policy.granted_commands = ("git status", "git status *")
    policy.granted_tools = frozenset({"write_file", "mcp__github"})
    assert [
        policy.decide("shell", status)[0],
        policy.decide("shell", {"command": "git push"})[0],
        policy.decide("shell", {"command": "git status > out.txt"})[0],  # a redirection is never covered
        policy.decide("write_file", {"path": "notes.txt"})[0],
        policy.decide("write_file", {"path": ".claude/settings.json"})[0],  # agent config still asks
        policy.decide("write_file", {"path": "../outside.txt"})[0],
        policy.decide("mcp_tool", {}, mcp_permission="mcp__github__create_issue")[0],
    ] == ["allow", "ask", "ask", "allow", "ask", "deny", "allow"]
    policy.mode = "read-only"
    assert policy.decide("shell", status)[0] == "deny"


def test_shell_lines_start_a_line_or_follow_a_space_and_fenced_blocks_are_scripts() -> None:
    body = "Branch: !`git branch`\n!`date`\nKEY=!`not run` and `!`not either``\n```!\necho one\necho two\n```\nEnd."
    assert command(body).shell_lines(body) == ["git branch", "date", "echo one\necho two"]
    codex = FileCommand("prompts:x", body, Path("x.md"), "user")
    assert codex.shell_lines(body) == []  # Codex prompts have no shell lines


def test_a_flow_list_keeps_quoted_commas_and_apostrophes() -> None:
    fields = split_frontmatter("---\nx: [don't, \"a, b\", 'c', Bash(git log --format='%h, %s':*)]\n---\n")[0]
    assert fields == {"x": ["don't", "a, b", "c", "Bash(git log --format='%h, %s':*)"]}
