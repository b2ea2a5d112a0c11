"""End to end: Claude Code's and Codex's flags and habits, through the installed `code-puppy` and the fake server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, call, text, tool_calls


def offered(request: Any) -> set[str]:
    return {tool["function"]["name"] for tool in request.body["tools"]}


def tool_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def write_then_answer(server: FakeLLMServer) -> None:
    server.script(tool_calls(call("write_file", {"path": "notes.txt", "content": "new\n"})), text("Done."))


@pytest.mark.parametrize(
    ("flags", "written"),
    [
        (("--dangerously-skip-permissions",), True),
        (("--permission-mode", "bypassPermissions"), True),
        (("--permission-mode", "acceptEdits"), True),
        (("--permission-mode", "default"), False),
        (("--allowedTools", "Edit"), True),  # an allow rule, in the default ask mode
    ],
)
def test_claude_permission_flags_mean_ours(
    server: FakeLLMServer, project: Path, flags: tuple[str, ...], written: bool
) -> None:
    write_then_answer(server)
    completed = run_cli(*flags, "-p", "write notes", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "Done.\n"), completed.stderr
    assert (project / "notes.txt").exists() == written


def test_plan_mode_is_read_only(server: FakeLLMServer, project: Path) -> None:
    server.script(text("A plan."))
    completed = run_cli("--permission-mode", "plan", "-p", "plan it", cwd=project)
    assert completed.returncode == 0, completed.stderr
    assert not offered(server.requests[0]) & {"write_file", "edit_file", "shell"}


def test_skip_permissions_with_another_mode_is_refused(project: Path) -> None:
    completed = run_cli("--dangerously-skip-permissions", "--permission-mode", "plan", "-p", "x", cwd=project)
    assert (completed.returncode, completed.stdout) == (2, "")
    assert completed.stderr == (
        "code-puppy: error: --dangerously-skip-permissions is --permission-mode yolo, not read-only: give one of them\n"
    )


def test_max_turns_is_max_requests(server: FakeLLMServer, project: Path) -> None:
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("never reached"))
    completed = run_cli("--max-turns", "1", "-p", "go", "--output-format", "json", cwd=project)
    assert completed.returncode == 3
    assert json.loads(completed.stdout)["status"] == "limit"
    assert len(server.requests) == 1
    both = run_cli("--max-turns", "1", "--max-requests", "2", "-p", "go", cwd=project)
    assert (both.returncode, both.stderr) == (2, "code-puppy: error: --max-turns is --max-requests: give one of them\n")


@pytest.mark.parametrize(
    "args",
    [
        ("--print", "what is this?"),
        ("-p", "--output-format", "json", "what is this?"),  # claude -p [options] PROMPT
        ("--print", "--verbose", "--output-format", "stream-json", "what is this?"),
        ("exec", "what is this?"),
        ("exec", "what", "is", "this?"),
        ("--output-format", "json", "exec", "what is this?"),
        ("exec", "--output-format", "json", "what is this?"),  # Codex's options come after exec
        ("exec", "what is this?", "--output-format", "json"),
        ("what is this?", "-p"),  # options after the prompt's words, as `claude "task" -p`
        ("what is this?", "--print", "--output-format", "json"),
        ("what", "is", "-p", "--output-format", "stream-json", "this?"),
    ],
)
def test_print_and_exec_run_one_headless_prompt(server: FakeLLMServer, project: Path, args: tuple[str, ...]) -> None:
    server.script(text("A demo."))
    completed = run_cli(*args, cwd=project)
    assert completed.returncode == 0, completed.stderr
    assert server.requests[0].body["messages"][-1] == {"role": "user", "content": "what is this?"}
    if "json" in args:
        assert json.loads(completed.stdout)["output"] == "A demo."
    elif "stream-json" in args:
        assert json.loads(completed.stdout.splitlines()[-1])["output"] == "A demo."
    else:
        assert completed.stdout == "A demo.\n"


def test_a_bare_print_reads_the_prompt_from_stdin(server: FakeLLMServer, project: Path) -> None:
    server.script(text("ok"))
    completed = run_cli("--print", cwd=project, input="summarise the repo\n")
    assert completed.returncode == 0, completed.stderr
    assert server.requests[0].body["messages"][-1] == {"role": "user", "content": "summarise the repo"}


def test_claudes_stream_json_command_line_runs_as_it_is(server: FakeLLMServer, project: Path) -> None:
    # As SDK wrappers spawn Claude Code (a bare -p, stream-json both ways, --verbose, permissions skipped).
    server.script(text("4"))
    message = json.dumps({"type": "user", "message": {"role": "user", "content": "What is 2+2?"}})
    completed = run_cli(
        *("-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"),
        "--dangerously-skip-permissions",
        cwd=project,
        input=message + "\n",
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout.splitlines()[-1])["output"] == "4"
    assert server.requests[0].body["messages"][-1] == {"role": "user", "content": "What is 2+2?"}


def test_a_prompt_then_claudes_options(server: FakeLLMServer, project: Path) -> None:
    # `claude -p "Create a file ..." --output-format stream-json --verbose --dangerously-skip-permissions`
    write_then_answer(server)
    completed = run_cli(
        "-p",
        "Create notes.txt",
        "--output-format",
        "stream-json",
        "--verbose",
        "--dangerously-skip-permissions",
        cwd=project,
    )
    assert completed.returncode == 0, completed.stderr
    assert (project / "notes.txt").read_text() == "new\n"


def test_options_after_the_prompts_words_apply(server: FakeLLMServer, project: Path) -> None:
    write_then_answer(server)
    completed = run_cli("Create notes.txt", "-p", "--permission-mode", "accept-edits", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "Done.\n"), completed.stderr
    assert (project / "notes.txt").read_text() == "new\n"
    assert server.requests[0].body["messages"][-1] == {"role": "user", "content": "Create notes.txt"}


def test_words_then_a_bare_print_take_piped_context(server: FakeLLMServer, project: Path) -> None:
    server.script(text("ok"))
    completed = run_cli("summarise this", "-p", cwd=project, input="the text\n")
    assert completed.returncode == 0, completed.stderr
    content = "summarise this\n\n<stdin>\nthe text\n</stdin>"
    assert server.requests[0].body["messages"][-1] == {"role": "user", "content": content}


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("fix it", "-m", "sonnet", "--permission-mode", "accept-edits"),
            "code-puppy PROMPT opens the chat, which needs a terminal: for one headless run, -p 'fix it'",
        ),
        (
            ("fix it", "--output-format", "json"),
            "--output-format json shapes a headless run's output: use it with -p 'fix it'",
        ),
        (("--output-format", "json"), "--output-format json shapes a headless run's output: use it with -p PROMPT"),
        (("fix it", "--timeout", "5"), "--timeout bounds a headless run: use it with -p 'fix it'"),
        (  # after `--` every word is the prompt's, options' names too
            ("--", "fix it", "-p", "usage"),
            "code-puppy PROMPT opens the chat, which needs a terminal: for one headless run, -p 'fix it -p usage'",
        ),
        (  # a subcommand's name wins only as the first word
            ("fix it", "usage"),
            "code-puppy PROMPT opens the chat, which needs a terminal: for one headless run, -p 'fix it usage'",
        ),
        (
            ("fix it", "--frobnicate"),
            "no such option: --frobnicate (code-puppy --help lists the options; after -- every word is the prompt's)",
        ),
        (
            ("fix it", "--full-auto"),
            "no such option: --full-auto; use --permission-mode auto "
            "(code-puppy --help lists the options; after -- every word is the prompt's)",
        ),
    ],
)
def test_options_among_the_words_are_read_outside_a_terminal(
    server: FakeLLMServer, project: Path, args: tuple[str, ...], line: str
) -> None:
    completed = run_cli(*args, cwd=project)
    assert (completed.returncode, completed.stdout, completed.stderr) == (2, "", f"code-puppy: error: {line}\n")
    assert server.requests == []


def test_exec_without_a_prompt_is_refused(project: Path) -> None:
    completed = run_cli("exec", cwd=project)
    assert (completed.returncode, completed.stderr) == (
        2,
        "code-puppy: error: exec runs one headless prompt: code-puppy exec PROMPT\n",
    )


def test_words_open_the_chat_which_needs_a_terminal(project: Path) -> None:
    completed = run_cli("fix", "the bug", cwd=project)
    assert (completed.returncode, completed.stdout) == (2, "")
    assert completed.stderr == (
        "code-puppy: error: code-puppy PROMPT opens the chat, which needs a terminal: "
        "for one headless run, -p 'fix the bug'\n"
    )


def test_a_subcommand_name_wins_over_a_prompt(server: FakeLLMServer, project: Path) -> None:
    completed = run_cli("usage", "--json", cwd=project)
    assert completed.returncode == 0, completed.stderr
    json.loads(completed.stdout)
    assert server.requests == []


@pytest.mark.parametrize("alias", ["sonnet", "opus", "haiku"])
def test_claude_aliases_name_anthropics_current_models(code_puppy_home: Path, project: Path, alias: str) -> None:
    with FakeLLMServer() as fake:
        fake.script(text("from claude"))
        env = {"ANTHROPIC_BASE_URL": fake.anthropic_base_url, "ANTHROPIC_API_KEY": "sk-ant-test"}
        completed = run_cli("-m", alias, "-p", "hi", cwd=project, env=env)
        assert (completed.returncode, completed.stdout) == (0, "from claude\n"), completed.stderr
        assert (fake.requests[0].path, fake.requests[0].body["model"]) == ("/v1/messages", f"claude-{alias}-5-5")


def test_a_models_entry_named_sonnet_wins(server: FakeLLMServer, code_puppy_home: Path, project: Path) -> None:
    config = code_puppy_home / "config.toml"
    config.write_text(config.read_text() + f'[models.sonnet]\nname = "my-sonnet"\nbase_url = "{server.base_url}"\n')
    server.script(text("local"))
    completed = run_cli("-m", "sonnet", "-p", "hi", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "local\n"), completed.stderr
    assert server.requests[0].body["model"] == "my-sonnet"


def test_allowed_tools_let_a_command_run_unasked(server: FakeLLMServer, project: Path) -> None:
    server.script(
        tool_calls(call("shell", {"command": "echo allowed"}), call("shell", {"command": "echo other"})), text("ok")
    )
    completed = run_cli("--allowedTools", "Bash(echo allowed:*),Read", "-p", "go", cwd=project)
    assert completed.returncode == 0, completed.stderr
    results = tool_messages(server.requests[1].body)
    assert "allowed" in results[0] and "denied" not in results[0].lower()
    assert "denied" in results[1].lower()


def test_disallowed_tools_take_a_tool_away(server: FakeLLMServer, project: Path) -> None:
    server.script(text("ok"))
    flags = ("--disallowed-tools", "Bash", "--disallowedTools", "WebFetch", "--permission-mode", "yolo")
    completed = run_cli(*flags, "-p", "go", cwd=project)
    assert completed.returncode == 0, completed.stderr
    assert "read_file" in offered(server.requests[0])
    assert not offered(server.requests[0]) & {"shell", "run_command", "start_command"}
    assert (
        "code-puppy: note: --disallowedTools: rules code-puppy has no tool for, not applied: WebFetch"
        in completed.stderr.splitlines()
    )


def test_append_system_prompt_reaches_the_instructions(server: FakeLLMServer, project: Path) -> None:
    server.script(text("Bonjour."))
    completed = run_cli("--append-system-prompt", "Always answer in French.", "-p", "hi", cwd=project)
    assert completed.returncode == 0, completed.stderr
    system = [m["content"] for m in server.requests[0].body["messages"] if m["role"] == "system"]
    assert any("Always answer in French." in content for content in system)


@pytest.mark.parametrize(
    ("option", "line"),
    [
        ("--full-auto", "no such option: --full-auto; use --permission-mode auto"),
        ("--mcp-config=x.json", "no such option: --mcp-config; use [mcp_servers] in config.toml, or --no-mcp"),
        ("--frobnicate", "no such option: --frobnicate"),
        (
            "--tools=Read",
            "no such option: --tools; use --disallowedTools for the tools to take away, or --permission-mode read-only",
        ),
    ],
)
def test_unknown_options_are_refused_in_one_line(project: Path, option: str, line: str) -> None:
    completed = run_cli(option, "-p", "x", cwd=project)
    assert (completed.returncode, completed.stdout) == (2, "")
    assert completed.stderr == f"code-puppy: error: {line} (code-puppy --help lists the options)\n"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("--permission-mode", "dontAsk"),
            "Invalid value for '--permission-mode': 'dontAsk' is not one of 'ask', 'accept-edits', 'auto', 'yolo', "
            "'read-only', 'default', 'acceptEdits', 'plan', 'bypassPermissions'.",
        ),
        (("--max-turns", "0"), "Invalid value for '--max-turns': 0 is not in the range x>=1."),
    ],
)
def test_a_bad_value_is_one_line(project: Path, args: tuple[str, ...], line: str) -> None:
    completed = run_cli(*args, "-p", "x", cwd=project)
    assert (completed.returncode, completed.stdout, completed.stderr) == (2, "", f"code-puppy: error: {line}\n")


def test_a_prompt_that_starts_with_a_dash_is_still_a_prompt(server: FakeLLMServer, project: Path) -> None:
    server.script(text("ok"))
    completed = run_cli("-p", "-x is broken", cwd=project)
    assert completed.returncode == 0, completed.stderr
    assert server.requests[0].body["messages"][-1] == {"role": "user", "content": "-x is broken"}
