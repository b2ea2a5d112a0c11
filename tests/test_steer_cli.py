"""`code-puppy steer` and `--input-format stream-json`: steering a headless run from outside the process."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.conftest import CODE_PUPPY, run_cli
from tests.fake_llm import FakeLLMServer, call, text, tool_calls


def user_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def wait_for_request(server: FakeLLMServer, count: int = 1, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while len(server.requests) < count:
        assert time.monotonic() < deadline, "no request arrived"
        time.sleep(0.02)


def headless(project: Path, *args: str, stdin: int | None = subprocess.DEVNULL) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(CODE_PUPPY), *args, "--output-format", "stream-json"],
        cwd=project,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_steer_with_no_running_run_exits_1_and_sends_nothing(server: FakeLLMServer, project: Path) -> None:
    completed = run_cli("steer", "anyone there?", cwd=project)
    assert (completed.returncode, completed.stdout) == (1, "")
    assert completed.stderr == f"code-puppy: no running code-puppy run in {project}; nothing was sent\n"
    completed = run_cli("steer", "--session", "abc", "hello", cwd=project)
    assert completed.stderr == "code-puppy: no running code-puppy run of session abc; nothing was sent\n"
    completed = run_cli("steer", "--cancel", "why", cwd=project)
    assert (completed.returncode, completed.stdout, completed.stderr) == (
        2,
        "",
        "code-puppy: error: --cancel takes no TEXT\n",
    )
    completed = run_cli("steer", cwd=project)
    assert (completed.returncode, completed.stderr) == (2, "code-puppy: error: nothing to send: TEXT is empty\n")


def test_steer_reaches_a_running_headless_run_and_is_saved(server: FakeLLMServer, project: Path) -> None:
    server.script(text("A first draft.", delay=1.5), text("Revised with the tests in mind."))
    process = headless(project, "-p", "write it")
    try:
        wait_for_request(server)
        steered = run_cli("steer", "focus on the tests", cwd=project)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert steered.returncode == 0, steered.stderr
    assert steered.stdout.startswith("steered session ")
    assert process.returncode == 0, stderr
    events = [json.loads(line) for line in stdout.splitlines()]
    steers = [(event["type"], event["text"]) for event in events if event["type"] == "steer"]
    assert steers == [("steer", "focus on the tests")]
    assert events[-1]["output"] == "Revised with the tests in mind."
    assert user_messages(server.requests[1].body) == ["write it", "focus on the tests"]
    exported = json.loads(run_cli("sessions", "export", events[0]["session_id"], cwd=project).stdout)
    saved = json.dumps(exported)
    assert "focus on the tests" in saved and "Revised with the tests in mind." in saved
    assert run_cli("steer", "too late", cwd=project).returncode == 1  # the run is over: nothing is running


def test_stream_json_stdin_gives_the_prompt_and_steers(server: FakeLLMServer, project: Path) -> None:
    server.script(text("Looking.", delay=1.0), text("Looked, steered."))
    process = headless(project, "--input-format", "stream-json", stdin=subprocess.PIPE)
    assert process.stdin is not None
    try:
        process.stdin.write(json.dumps({"type": "user", "text": "look around"}) + "\n")
        process.stdin.flush()
        wait_for_request(server)
        claude_style = {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": "and list"}]}}
        process.stdin.write("not json\n" + json.dumps(claude_style) + "\n")
        process.stdin.flush()
        stdout, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert "code-puppy: ignored a stdin line (not JSON (Expecting value)): not json\n" in stderr
    events = [json.loads(line) for line in stdout.splitlines()]
    assert [event["text"] for event in events if event["type"] == "steer"] == ["and list"]
    assert user_messages(server.requests[0].body) == ["look around"]
    assert user_messages(server.requests[1].body) == ["look around", "and list"]


def test_stream_json_stdin_that_ends_before_a_message_is_a_usage_error(server: FakeLLMServer, project: Path) -> None:
    completed = run_cli("--input-format", "stream-json", cwd=project, input="")
    assert (completed.returncode, completed.stderr) == (
        2,
        "code-puppy: error: --input-format stream-json: stdin ended before the first user message\n",
    )
    assert server.requests == []


def test_steer_cancel_stops_a_headless_run_as_sigint_does(server: FakeLLMServer, project: Path) -> None:
    server.script(
        tool_calls(call("list_files", {})),
        tool_calls(call("shell", {"command": "touch started && sleep 30"})),
        text("never asked for"),
    )
    process = headless(project, "-p", "look, then run the slow thing", "--permission-mode", "yolo")
    try:
        deadline = time.monotonic() + 30
        while not (project / "started").exists():
            assert time.monotonic() < deadline, "the slow tool never started"
            time.sleep(0.05)
        cancelled = run_cli("steer", "--cancel", cwd=project)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    events = [json.loads(line) for line in stdout.splitlines()]
    session_id = events[0]["session_id"]
    assert (cancelled.returncode, cancelled.stderr) == (0, "")
    assert cancelled.stdout == f"cancelled the turn of session {session_id[:8]} (pid {process.pid})\n"
    assert stderr == ""  # as after SIGINT: the result event says it
    assert (events[-1]["type"], events[-1]["status"]) == ("result", "interrupted")
    assert len(server.requests) == 2  # the request after the cancelled tool was never sent
    saved = run_cli("sessions", "export", session_id, cwd=project)
    returns = [
        (part["tool_name"], part.get("outcome", "success"))
        for message in json.loads(saved.stdout)["messages"]
        for part in message["parts"]
        if part["part_kind"] == "tool-return"
    ]
    assert returns == [("list_files", "success"), ("shell", "interrupted")]
    assert run_cli("steer", "--cancel", cwd=project).stderr == (
        f"code-puppy: no running code-puppy run in {project}; nothing was cancelled\n"
    )
