"""Issue 25 part 4 end to end, through the installed `code-puppy` against the fake server: a file command's
`` !`cmd` `` lines and `allowed-tools` grant as Claude Code has them, only where trust allows, on Claude Code's own
real `/commit` command (tests/fixtures/claude_commands), and its arguments kept as the user typed them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, call, text, tool_calls

REAL = Path(__file__).parent / "fixtures" / "claude_commands"
GIT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}
NOBODY_ANSWERS = (
    "it needs the user's approval in 'ask' mode and nobody can answer here (`--allow`, a `Bash(…)` entry in "
    "allowed-tools, or another mode lets it run)"
)


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, check=True, env={**os.environ, **GIT}
    )
    return done.stdout.rstrip("\n")


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A git repository carrying the real command files, with one commit and one uncommitted change."""
    root = tmp_path / "repository"
    shutil.copytree(REAL, root)
    (root / "app.py").write_text("print('hi')\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first")
    (root / "app.py").write_text("print('hello')\n")
    return root


def user(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def notes(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("code-puppy: note:")]


def commit_prompt(root: Path, status: str) -> str:
    """Claude Code's `/commit` as sent: `status` in place of `!`git status``, the lines it does not grant denied."""
    body = (root / ".claude" / "commands" / "commit.md").read_text().split("---\n", 2)[2].strip()
    body = body.replace("!`git status`", status)
    for line in ("git diff HEAD", "git branch --show-current", "git log --oneline -10"):
        body = body.replace(f"!`{line}`", f"(`{line}` was not run: {NOBODY_ANSWERS})")
    return body


def test_a_trusted_projects_command_runs_its_lines_and_its_allowed_tools_run_headless(
    server: FakeLLMServer, repository: Path
) -> None:
    trusted = run_cli("trust", cwd=repository)
    assert (trusted.returncode, trusted.stdout.split(": ", 1)[1].split(";")[0]) == (0, "5 command files")
    server.script(
        tool_calls(call("shell", {"command": "git status --short"}), call("shell", {"command": "git push"})),
        text("Committed."),
    )
    completed = run_cli("-p", "/commit", cwd=repository)
    assert completed.returncode == 0, completed.stderr
    assert user(server.requests[0].body) == [commit_prompt(repository, git(repository, "status"))]
    assert notes(completed.stderr) == [
        f"code-puppy: note: /commit: `{line}` was not run: {NOBODY_ANSWERS}"
        for line in ("git diff HEAD", "git branch --show-current", "git log --oneline -10")
    ]
    # allowed-tools: Bash(git status:*) runs without asking for this turn; `git push` is outside them.
    status, push = tool_results(server.requests[1].body)
    assert status.startswith(" M app.py\n")
    assert push == (
        "`git push` is outside the commands this command may run (git add, git add *, git status, git status *, "
        "git commit, git commit *). Do not retry it."
    )


def test_the_users_allow_list_lets_more_lines_run(server: FakeLLMServer, repository: Path) -> None:
    assert run_cli("trust", cwd=repository).returncode == 0
    server.script(text("Committed."))
    completed = run_cli("-p", "/commit", "--allow", "git *", cwd=repository)
    assert (completed.returncode, notes(completed.stderr)) == (0, [])
    prompt = user(server.requests[0].body)[0]
    assert "- Current branch: main\n" in prompt and "- Recent commits: " in prompt and "first" in prompt
    assert "-print('hi')\n+print('hello')" in prompt and "!`" not in prompt


def test_an_untrusted_projects_command_only_narrows_and_its_lines_are_text(
    server: FakeLLMServer, repository: Path
) -> None:
    server.script(tool_calls(call("shell", {"command": "git status --short"})), text("Could not."))
    completed = run_cli("-p", "/commit", cwd=repository)
    assert completed.returncode == 0, completed.stderr
    note = "the !`…` lines of /commit were not run (this project is not trusted; `code-puppy trust` lets them run)"
    body = (repository / ".claude" / "commands" / "commit.md").read_text().split("---\n", 2)[2].strip()
    assert user(server.requests[0].body) == [f"{body}\n\n(Note: {note}; they are sent as written.)"]
    assert notes(completed.stderr) == [f"code-puppy: note: {note}"]
    assert "denied" in tool_results(server.requests[1].body)[0]  # allowed-tools granted nothing


def test_a_command_changed_after_trust_is_untrusted_again(server: FakeLLMServer, repository: Path) -> None:
    assert run_cli("trust", cwd=repository).returncode == 0
    command = repository / ".claude" / "commands" / "commit.md"
    command.write_text(command.read_text().replace("!`git status`", "!`touch pwned`"))
    server.script(text("ok"))
    completed = run_cli("-p", "/commit", cwd=repository)
    assert completed.returncode == 0
    assert not (repository / "pwned").exists()
    assert notes(completed.stderr) == [
        "code-puppy: note: the !`…` lines of /commit were not run (.claude/commands/commit.md changed since you "
        "trusted this project; `code-puppy trust` lets them run)"
    ]


def test_the_users_own_command_runs_its_lines_without_trust(
    server: FakeLLMServer, repository: Path, code_puppy_home: Path
) -> None:
    (code_puppy_home / "commands").mkdir()
    (code_puppy_home / "commands" / "git_status.md").write_text(
        "---\nallowed-tools: Bash(git status:*)\n---\nStatus:\n!`git status --short`\nSummarize it for $1."
    )
    server.script(tool_calls(call("shell", {"command": "git status"})), text("One change."))
    completed = run_cli("-p", "/git_status me", cwd=repository)
    assert completed.returncode == 0, completed.stderr
    assert user(server.requests[0].body) == ["Status:\n M app.py\nSummarize it for me."]
    assert tool_results(server.requests[1].body)[0].startswith("On branch main")


def test_a_line_pasted_in_the_arguments_is_never_run(
    server: FakeLLMServer, repository: Path, code_puppy_home: Path
) -> None:
    """Issue 25 review: `/review $(cat README.md)` with a README holding `` !`touch …` `` ran it as the user's own
    command's line. Only the lines the command file wrote run; the pasted one reaches the model as text."""
    (code_puppy_home / "commands").mkdir()
    (code_puppy_home / "commands" / "review.md").write_text("---\ndescription: review\n---\nReview: !`echo body`\n")
    server.script(text("ok"))
    completed = run_cli("-p", "/review see !`touch pwned` here", "--permission-mode", "yolo", cwd=repository)
    assert completed.returncode == 0, completed.stderr
    assert user(server.requests[0].body) == ["Review: body\n\nARGUMENTS: see !`touch pwned` here"]
    assert not (repository / "pwned").exists()


def test_a_line_a_plugin_rewrites_runs_as_rewritten(
    server: FakeLLMServer, repository: Path, code_puppy_home: Path
) -> None:
    """A `pre_tool_call` that changes a command (`rm` into `trash`) changes a command line too, and the policy decides
    on the new one: here the grant covers `echo` only, so the rewritten `touch` is not run."""
    (code_puppy_home / "plugins").mkdir()
    (code_puppy_home / "plugins" / "rewrite.py").write_text(
        "import code_puppy\nfrom code_puppy.plugins import ToolDecision\n\n"
        "@code_puppy.hookimpl\ndef pre_tool_call(tool_name, args):\n"
        "    new = {'echo original': 'echo rewritten', 'echo two': 'touch made'}.get(args.get('command'))\n"
        "    return ToolDecision(args={'command': new}) if new else None\n"
    )
    (code_puppy_home / "commands").mkdir()
    (code_puppy_home / "commands" / "c.md").write_text(
        "---\nallowed-tools: Bash(echo:*)\n---\nout: !`echo original`\nsecond: !`echo two`\n"
    )
    server.script(text("ok"))
    completed = run_cli("-p", "/c", cwd=repository)
    assert completed.returncode == 0, completed.stderr
    [prompt] = user(server.requests[0].body)
    assert prompt.startswith("out: rewritten\nsecond: (`touch made` was not run: ")
    assert not (repository / "made").exists()


def test_a_dollar_amount_is_not_an_argument(server: FakeLLMServer, repository: Path) -> None:
    server.script(text("ok"))
    completed = run_cli("-p", "/tech-debt src/app", cwd=repository)
    assert completed.returncode == 0, completed.stderr
    [prompt] = user(server.requests[0].body)
    assert "240 hours × $150/hour = $36,000" in prompt and prompt.count("src/app") == 1
    # Its `model: claude-sonnet-4-0` is a Claude Code model: on a session that is not Anthropic's the turn runs on
    # the user's model, as a Claude Code agent's does (code_puppy.models.definition_model_name), without a note.
    assert notes(completed.stderr) == []


async def test_an_editor_is_asked_about_a_line_that_needs_approval(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    import acp

    from tests.test_acp import EditorClient, acp_agent, user_messages

    (code_puppy_home / "commands").mkdir()
    (code_puppy_home / "commands" / "look.md").write_text("Files: !`ls`\nGreeting: !`echo hi`\nNow $1.")
    server.script(text("Seen."))
    client = EditorClient("allow-once", "reject-once")
    async with acp_agent(project, client) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        answered = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("/look summarize")])
    assert answered.stop_reason == "end_turn"
    assert [question.title for question, _ in client.questions] == [
        "shell wants to run `ls` for /look",
        "shell wants to run `echo hi` for /look",
    ]
    assert user_messages(server.requests[0].body) == [
        "Files: README.md\nGreeting: (`echo hi` was not run: the user did not allow it)\nNow summarize."
    ]


def test_a_fenced_block_runs_as_a_script(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    (code_puppy_home / "commands").mkdir()
    (code_puppy_home / "commands" / "env.md").write_text("Env:\n```!\necho one\necho two >&2\nexit 3\n```\nKEY=!`x`")
    server.script(text("ok"))
    completed = run_cli("-p", "/env", "--permission-mode", "yolo", cwd=project)
    assert (completed.returncode, notes(completed.stderr)) == (0, [])
    assert user(server.requests[0].body) == ["Env:\none\ntwo\n(exit 3)\nKEY=!`x`"]


def test_a_line_the_mode_denies_is_said_in_the_prompt_and_on_stderr(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    (code_puppy_home / "commands").mkdir()
    (code_puppy_home / "commands" / "version.md").write_text("Version: !`git --version`")
    server.script(text("ok"))
    completed = run_cli("-p", "/version", "--permission-mode", "accept-edits", cwd=project)
    reason = "`git --version` is not on the shell allow-list, and accept-edits mode only runs allow-listed commands."
    assert (completed.returncode, notes(completed.stderr)) == (
        0,
        [f"code-puppy: note: /version: `git --version` was not run: {reason}"],
    )
    assert user(server.requests[0].body) == [f"Version: (`git --version` was not run: {reason})"]
