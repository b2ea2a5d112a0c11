"""End to end: the installed `code-puppy -p` against the fake server, through the real OpenAI client."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from code_puppy.sessions.store import SqliteConversationStore
from tests.conftest import CODE_PUPPY, run_cli
from tests.fake_llm import FakeLLMServer, call, error, text, tool_calls

RESULT_KEYS = {"session_id", "output", "status", "usage", "duration_ms", "error", "cost_usd", "cost_complete", "denied"}


def two_tools_then_answer(server: Any) -> None:
    server.script(
        tool_calls(call("read_file", {"path": "README.md"})),
        tool_calls(call("grep", {"pattern": "demo"})),
        text("The project is a demo."),
    )


def tool_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def test_text_answer_on_stdout_progress_on_stderr(server: Any, project: Path) -> None:
    two_tools_then_answer(server)
    completed = run_cli("-p", "what is this project?", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "The project is a demo.\n")
    assert [line for line in completed.stderr.splitlines() if line.startswith("⚙")] == [
        "⚙ read_file(README.md)",
        "⚙ grep(demo)",
    ]
    assert len(server.requests) == 3
    assert "# demo project" in tool_messages(server.requests[1].body)[0]
    assert "README.md" in tool_messages(server.requests[2].body)[1]


def test_json_output_has_the_documented_keys(server: Any, project: Path) -> None:
    two_tools_then_answer(server)
    completed = run_cli("-p", "what is this project?", "--output-format", "json", cwd=project)
    assert completed.returncode == 0
    result = json.loads(completed.stdout)
    assert set(result) == RESULT_KEYS
    assert (result["output"], result["status"], result["error"]) == ("The project is a demo.", "success", None)
    assert result["usage"]["requests"] == 3
    assert result["usage"]["input_tokens"] > 0 and result["usage"]["output_tokens"] > 0
    assert isinstance(result["duration_ms"], int) and len(result["session_id"]) >= 32


def test_stream_json_is_session_events_result(server: Any, project: Path) -> None:
    two_tools_then_answer(server)
    completed = run_cli("-p", "what is this project?", "--output-format", "stream-json", cwd=project)
    assert completed.returncode == 0
    events = [json.loads(line) for line in completed.stdout.splitlines()]
    assert events[0]["type"] == "session"
    assert events[-1]["type"] == "result" and set(events[-1]) == RESULT_KEYS | {"type"}
    assert events[-1]["session_id"] == events[0]["session_id"]
    calls = [(e["tool_name"], e["args"]) for e in events if e["type"] == "tool_call"]
    assert calls == [("read_file", {"path": "README.md"}), ("grep", {"pattern": "demo"})]
    results = [(e["tool_name"], e["outcome"]) for e in events if e["type"] == "tool_result"]
    assert results == [("read_file", "success"), ("grep", "success")]
    assert "".join(e["text"] for e in events if e["type"] == "text_delta") == "The project is a demo."
    assert events[-1]["output"] == "The project is a demo."


def test_prompt_from_stdin_with_dash(server: Any, project: Path) -> None:
    server.script(text("ok"))
    completed = run_cli("-p", "-", cwd=project, input="summarise the repo\n")
    assert completed.returncode == 0
    assert server.requests[0].body["messages"][-1] == {"role": "user", "content": "summarise the repo"}


def test_piped_stdin_alone_is_the_prompt(server: Any, project: Path) -> None:
    server.script(text("ok"))
    completed = run_cli(cwd=project, input="what is 2+2?")
    assert (completed.returncode, completed.stdout) == (0, "ok\n")
    assert server.requests[0].body["messages"][-1]["content"] == "what is 2+2?"


def test_piped_stdin_with_prompt_is_appended_as_context(server: Any, project: Path) -> None:
    server.script(text("looks fine"))
    completed = run_cli("-p", "review this diff", cwd=project, input="+added line\n")
    assert completed.returncode == 0
    assert server.requests[0].body["messages"][-1]["content"] == "review this diff\n\n<stdin>\n+added line\n</stdin>"


def test_empty_prompt_is_a_usage_error(server: Any, project: Path) -> None:
    completed = run_cli("-p", "  ", cwd=project)
    assert (completed.returncode, completed.stderr) == (2, "code-puppy: error: the prompt is empty\n")
    assert server.requests == []


def test_provider_error_after_retries_is_one_line_exit_1(server: Any, project: Path) -> None:
    server.script(*[error(500, "upstream exploded") for _ in range(3)])
    completed = run_cli("-p", "hi", cwd=project)
    assert completed.returncode == 1
    assert completed.stdout == ""
    *retries, failure = completed.stderr.splitlines()
    assert [line.rsplit(";", 1)[1] for line in retries] == [" retrying 1/2 in 0.5 s", " retrying 2/2 in 1 s"]
    assert failure.startswith("code-puppy: run failed: ")
    assert "500" in failure and "upstream exploded" in failure
    assert "Traceback" not in completed.stderr
    assert len(server.requests) == 3  # two retries, each said aloud, then the error


def test_a_tool_that_keeps_failing_ends_the_run_exit_1(server: Any, project: Path) -> None:
    server.script(*[tool_calls(call("read_file", {"path": "missing.txt"})) for _ in range(4)])
    completed = run_cli("-p", "read missing.txt", cwd=project)
    assert completed.returncode == 1
    assert completed.stderr.splitlines()[-1] == (
        "code-puppy: run failed: Tool 'read_file' exceeded max retries count of 3. Consider raising the retry "
        "limit, or see the docs on tool retries: https://pydantic.dev/docs/ai/tools-toolsets/tools-advanced/#tool-retries"
    )


def test_max_requests_stops_with_exit_3(server: Any, project: Path) -> None:
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("never reached"))
    completed = run_cli("-p", "go", "--max-requests", "1", "--output-format", "json", cwd=project)
    assert completed.returncode == 3
    result = json.loads(completed.stdout)
    assert (result["status"], result["output"]) == ("limit", None)
    assert result["error"] == "stopped after 1 model request (--max-requests 1)"  # our flag, not pydantic-ai's words
    assert len(server.requests) == 1


def test_openai_base_url_route_with_openai_chat_model_string(code_puppy_home: Path, project: Path) -> None:
    with FakeLLMServer() as fake:
        fake.script(text("via env"))
        completed = run_cli(
            "-p",
            "hi",
            "-m",
            "openai-chat:fake-model",
            env={"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test"},
            cwd=project,
        )
    assert (completed.returncode, completed.stdout) == (0, "via env\n")


@pytest.mark.parametrize(
    ("signum", "code", "status"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_signals_during_a_run(server: Any, project: Path, signum: int, code: int, status: str) -> None:
    server.script(text("too late", delay=30))
    process = subprocess.Popen(
        [str(CODE_PUPPY), "-p", "hi", "--output-format", "json"],
        cwd=project,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 20
    while not server.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=20)
    assert process.returncode == code, stderr
    assert json.loads(stdout)["status"] == status
    assert "Traceback" not in stderr


def test_rg_is_found_when_run_by_absolute_path_from_an_inactive_venv(server: Any, project: Path) -> None:
    server.script(tool_calls(call("list_files", {})), text("listed"))
    bare_path = os.pathsep.join(p for p in ("/usr/bin", "/bin") if Path(p).is_dir())
    completed = run_cli("-p", "list files", "--output-format", "stream-json", cwd=project, env={"PATH": bare_path})
    assert completed.returncode == 0, completed.stderr
    results = [json.loads(line) for line in completed.stdout.splitlines() if '"tool_result"' in line]
    assert results[0]["outcome"] == "success"
    assert "README.md" in results[0]["content"]


def test_debug_shows_the_traceback_of_a_failed_run(server: Any, project: Path) -> None:
    completed = run_cli("-p", "hi", "--debug", "-m", "foo:bar", cwd=project)
    assert completed.returncode == 2
    assert "Traceback (most recent call last)" in completed.stderr
    assert completed.stderr.rstrip().splitlines()[-1].startswith("code-puppy: error: unknown provider 'foo'")


def test_python_dash_m_runs_the_same_command(server: Any, project: Path) -> None:
    import sys

    server.script(text("module entry"))
    completed = subprocess.run(
        [sys.executable, "-m", "code_puppy", "-p", "hi"],
        cwd=project,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert (completed.returncode, completed.stdout) == (0, "module entry\n")


@pytest.mark.parametrize("route", ["anthropic-endpoint", "openai-responses"])
def test_other_wire_protocols_run_the_same_tool_loop(route: str, code_puppy_home: Path, project: Path) -> None:
    with FakeLLMServer() as fake:
        two_tools_then_answer(fake)
        if route == "anthropic-endpoint":
            (code_puppy_home / "config.toml").write_text(
                '[models.claude]\nprovider = "anthropic"\nname = "claude-fake"\n'
                f'base_url = "{fake.anthropic_base_url}"\napi_key_env = "FAKE_ANTHROPIC_KEY"\n'
            )
            completed = run_cli("-p", "what is it?", "-m", "claude", env={"FAKE_ANTHROPIC_KEY": "sk-ant"}, cwd=project)
        else:
            env = {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test"}
            completed = run_cli("-p", "what is it?", "-m", "openai:fake-model", env=env, cwd=project)
        paths = {request.path.split("?")[0] for request in fake.requests}
    assert (completed.returncode, completed.stdout) == (0, "The project is a demo.\n"), completed.stderr
    assert paths == {"/v1/messages" if route == "anthropic-endpoint" else "/v1/responses"}


INVALID = b"fix caf\xe9 \xff now"
"""Latin-1 and a stray byte: not UTF-8."""


@pytest.mark.parametrize("where", ["argument", "stdin", "piped context"])
def test_a_prompt_that_is_not_utf8_is_decoded_with_replacement(server: Any, project: Path, where: str) -> None:
    server.script(text("done"))
    args: list[bytes | str] = [str(CODE_PUPPY), "-p"]
    stdin = b""
    if where == "argument":
        args.append(INVALID)
    elif where == "stdin":
        args.append("-")
        stdin = INVALID
    else:
        args.append("review")
        stdin = INVALID
    completed = subprocess.run(args, cwd=project, input=stdin, capture_output=True, timeout=60)
    assert (completed.returncode, completed.stdout) == (0, b"done\n"), completed.stderr
    what = "the prompt" if where == "argument" else "stdin"
    assert completed.stderr.decode() == (
        f"code-puppy: note: {what} is not valid UTF-8; the bytes that are not were replaced with U+FFFD\n"
    )
    sent = server.requests[0].body["messages"][-1]["content"]
    assert "fix caf\ufffd \ufffd now" in sent


LATIN_1 = "caf\udce9"
"""`café` in Latin-1 as Python hands over a command-line argument that is not UTF-8: the byte as a surrogate escape."""


@pytest.mark.parametrize(
    ("args", "flag", "value"),
    [
        (("-p", "hi", "--name"), "--name", LATIN_1),
        (("-p", "hi", "-r"), "-r/--resume", LATIN_1),
        (("-p", "hi", "-m"), "-m/--model", f"openai:{LATIN_1}"),
        (("sessions", "show"), "ID", LATIN_1),
        (("rewind", "--session"), "--session", LATIN_1),
    ],
)
def test_a_name_that_is_not_utf8_is_one_line_exit_2(
    server: Any, project: Path, code_puppy_home: Path, args: tuple[str, ...], flag: str, value: str
) -> None:
    SqliteConversationStore(code_puppy_home / "sessions.db").close()  # so a lookup would get as far as the database
    env = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": server.base_url}
    completed = run_cli(*args, value, cwd=project, env=env)
    assert (completed.returncode, completed.stdout, completed.stderr) == (
        2,
        "",
        f"code-puppy: error: {flag}: {value!r} is not valid UTF-8\n",
    )
    assert server.requests == []


def test_a_failure_after_the_session_line_names_the_same_session(
    server: Any, project: Path, code_puppy_home: Path
) -> None:
    config = code_puppy_home / "config.toml"
    config.write_text(config.read_text() + '[history]\nprocessors = ["no_such_module_x:fn"]\n')
    completed = run_cli("-p", "hi", "--output-format", "stream-json", cwd=project)
    assert completed.returncode == 2
    first, last = (json.loads(line) for line in completed.stdout.splitlines())
    assert first["type"] == "session" and last["type"] == "result"
    assert (last["status"], last["session_id"]) == ("error", first["session_id"])
    assert last["error"].startswith("[history] processors: cannot import 'no_such_module_x:fn'")
    assert server.requests == []
