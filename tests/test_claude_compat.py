"""End to end: `--compat claude` writes Claude Code's headless messages, checked against the schema of the public Claude
Agent SDK's types (tests/fixtures/claude_sdk) and against the `anthropic` package's `BetaMessage`."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from anthropic.types.beta import BetaMessage
from jsonschema import Draft202012Validator

from tests.conftest import run_cli, start_cli, wait_for
from tests.fake_llm import FakeLLMServer, call, text, tool_calls

SCHEMA = json.loads((Path(__file__).parent / "fixtures" / "claude_sdk" / "messages.schema.json").read_text())
VALIDATOR = Draft202012Validator(SCHEMA)
KINDS = {"system": "system_init", "assistant": "assistant", "user": "user"}
STREAM = ("--compat", "claude", "--output-format", "stream-json", "--verbose")
UNPRICED_NOTE = (
    "code-puppy: note: total_cost_usd leaves out the requests to fake-model: no price is known for it"
    " (give its [models.NAME] entry input_price and output_price)"
)


def messages(stdout: str) -> list[dict[str, Any]]:
    """Each line of a stream-json output, checked against Claude Code's schema: against its own kind of message first,
    so a failure names the field, then against the whole (it is exactly one kind)."""
    lines = [json.loads(line) for line in stdout.splitlines()]
    for line in lines:
        kind = KINDS.get(line.get("type"), "result_success" if line.get("subtype") == "success" else "result_error")
        validator = Draft202012Validator({"$ref": f"#/$defs/{kind}", "$defs": SCHEMA["$defs"]})
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(line)]
        assert errors == [], (line, errors)
        VALIDATOR.validate(line)
        if line["type"] == "assistant":
            BetaMessage.model_validate(line["message"])
    return lines


def test_a_run_with_a_tool_call_streams_claude_codes_messages(server: FakeLLMServer, project: Path) -> None:
    server.script(tool_calls(call("read_file", {"path": "README.md"}, id="call_read")), text("It is a demo."))
    completed = run_cli("-p", "what is this project?", *STREAM, cwd=project)
    assert completed.returncode == 0, completed.stderr
    lines = messages(completed.stdout)
    assert [(m["type"], m.get("subtype")) for m in lines] == [
        ("system", "init"),
        ("assistant", None),
        ("user", None),
        ("assistant", None),
        ("result", "success"),
    ]
    init, called, returned, answered, result = lines
    session_id = init["session_id"]
    assert {m["session_id"] for m in lines} == {session_id}
    assert len({m["uuid"] for m in lines}) == len(lines)
    assert (init["cwd"], init["model"], init["permissionMode"]) == (str(project), "fake-model", "default")
    assert {"read_file", "write_file", "edit_file", "shell", "grep", "list_files"} <= set(init["tools"])
    assert called["message"]["content"] == [
        {"type": "tool_use", "id": "call_read", "name": "read_file", "input": {"path": "README.md"}}
    ]
    assert called["message"]["id"] != answered["message"]["id"]  # two model responses
    (tool_result,) = returned["message"]["content"]
    assert (tool_result["type"], tool_result["tool_use_id"], tool_result["is_error"]) == (
        "tool_result",
        "call_read",
        False,
    )
    assert "# demo project" in tool_result["content"]
    assert answered["message"]["content"] == [{"type": "text", "text": "It is a demo."}]
    usage = result["usage"]
    requests = server.requests
    assert (usage["input_tokens"], usage["output_tokens"]) == (
        sum(r.input_tokens for r in requests),
        sum(r.output_tokens for r in requests),
    )
    assert result | {"duration_ms": 0, "duration_api_ms": 0, "uuid": "", "usage": {}} == {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "duration_ms": 0,
        "duration_api_ms": 0,
        "num_turns": 2,
        "result": "It is a demo.",
        "stop_reason": None,
        "session_id": session_id,
        "total_cost_usd": 0.0,
        "usage": {},
        "modelUsage": {
            "fake-model": {
                "inputTokens": usage["input_tokens"],
                "outputTokens": usage["output_tokens"],
                "cacheReadInputTokens": 0,
                "cacheCreationInputTokens": 0,
                "webSearchRequests": 0,
                "costUSD": 0.0,
                "contextWindow": 0,
                "maxOutputTokens": 0,
            }
        },
        "permission_denials": [],
        "uuid": "",
        "terminal_reason": "completed",
    }
    assert 0 < result["duration_api_ms"] <= result["duration_ms"]
    assert UNPRICED_NOTE in completed.stderr.splitlines()


def test_max_turns_ends_with_error_max_turns(server: FakeLLMServer, project: Path) -> None:
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("never reached"))
    completed = run_cli("-p", "go", "--max-turns", "1", *STREAM, cwd=project)
    assert completed.returncode == 3, completed.stderr
    result = messages(completed.stdout)[-1]
    assert (result["subtype"], result["is_error"], result["num_turns"], result["terminal_reason"]) == (
        "error_max_turns",
        True,
        1,
        "max_turns",
    )
    assert result["errors"] == ["stopped after 1 model request (--max-requests 1)"]
    assert "result" not in result
    assert len(server.requests) == 1


def test_a_denied_call_is_a_permission_denial(server: FakeLLMServer, project: Path) -> None:
    server.script(tool_calls(call("write_file", {"path": "notes.txt", "content": "hi\n"}, id="call_w")), text("No."))
    completed = run_cli("-p", "write notes", *STREAM, cwd=project)
    assert completed.returncode == 0, completed.stderr
    lines = messages(completed.stdout)
    (tool_result,) = lines[2]["message"]["content"]
    assert (tool_result["tool_use_id"], tool_result["is_error"]) == ("call_w", True)
    assert lines[-1]["permission_denials"] == [
        {"tool_name": "write_file", "tool_use_id": "call_w", "tool_input": {"path": "notes.txt", "content": "hi\n"}}
    ]
    assert not (project / "notes.txt").exists()


def test_an_anthropic_model_is_priced(code_puppy_home: Path, project: Path) -> None:
    with FakeLLMServer() as fake:
        fake.script(text("from claude"))
        env = {"ANTHROPIC_BASE_URL": fake.anthropic_base_url, "ANTHROPIC_API_KEY": "sk-ant-test"}
        flags = ("-m", "anthropic:claude-sonnet-4-5", "--permission-mode", "acceptEdits")
        completed = run_cli(*flags, "-p", "hi", *STREAM, cwd=project, env=env)
        request = fake.requests[0]
    assert completed.returncode == 0, completed.stderr
    init, _, result = messages(completed.stdout)
    assert (init["model"], init["permissionMode"], init["apiKeySource"]) == (
        "claude-sonnet-4-5",
        "acceptEdits",
        "ANTHROPIC_API_KEY",
    )
    assert (result["subtype"], result["result"], result["num_turns"]) == ("success", "from claude", 1)
    # Claude Sonnet 4.5's list price: $3 and $15 per million input and output tokens.
    expected = (request.input_tokens * 3 + request.output_tokens * 15) / 1_000_000
    assert result["total_cost_usd"] == pytest.approx(expected)
    assert result["modelUsage"]["claude-sonnet-4-5"]["costUSD"] == pytest.approx(expected)
    assert result["modelUsage"]["claude-sonnet-4-5"]["contextWindow"] > 0
    assert "total_cost_usd" not in completed.stderr


def test_json_is_the_result_message_alone(server: FakeLLMServer, project: Path) -> None:
    server.script(text("Hello."))
    completed = run_cli("-p", "hi", "--compat", "claude", "--output-format", "json", cwd=project)
    assert completed.returncode == 0, completed.stderr
    assert len(completed.stdout.splitlines()) == 1
    (result,) = messages(completed.stdout)
    assert (result["type"], result["subtype"], result["result"], result["total_cost_usd"]) == (
        "result",
        "success",
        "Hello.",
        0.0,
    )
    assert UNPRICED_NOTE in completed.stderr.splitlines()


def test_an_interrupted_run_ends_with_error_during_execution(server: FakeLLMServer, project: Path) -> None:
    server.script(text("too late", delay=30))
    process = start_cli("-p", "hi", *STREAM, cwd=project)
    wait_for(lambda: server.requests, what="the model request")
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    init, result = messages(stdout)
    assert (init["subtype"], result["subtype"], result["is_error"], result["errors"]) == (
        "init",
        "error_during_execution",
        True,
        ["interrupted"],
    )
    assert "terminal_reason" not in result


def test_a_run_that_fails_before_its_session_still_ends_with_a_result(server: FakeLLMServer, project: Path) -> None:
    completed = run_cli("-p", "hi", "-m", "nosuch:model", *STREAM, cwd=project)
    assert completed.returncode == 2
    (result,) = messages(completed.stdout)
    assert (result["subtype"], result["is_error"], result["session_id"], result["num_turns"]) == (
        "error_during_execution",
        True,
        "",
        0,
    )
    assert result["errors"] == [completed.stderr.splitlines()[-1].removeprefix("code-puppy: error: ")]


def test_text_output_is_the_same_with_compat(server: FakeLLMServer, project: Path) -> None:
    server.script(text("plain"))
    completed = run_cli("-p", "hi", "--compat", "claude", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "plain\n"), completed.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("-p", "hi", "--compat", "codex", "--output-format", "json"),
            "--compat codex: the one schema known is claude (Claude Code's json and stream-json output)",
        ),
        (("--compat", "claude"), "--compat claude shapes a headless run's output: use it with -p PROMPT"),
    ],
)
def test_bad_compat_is_one_line(server: FakeLLMServer, project: Path, args: tuple[str, ...], message: str) -> None:
    completed = run_cli(*args, cwd=project)
    assert (completed.returncode, completed.stdout, completed.stderr) == (2, "", f"code-puppy: error: {message}\n")
    assert server.requests == []
