"""`code-puppy acp` with clients that cannot answer: one whose stdin ends right after its requests, and the ACP SDK's
own example client (`tests/fixtures/acp/client.py`), which answers every permission question "Method not found"."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CODE_PUPPY, run_cli
from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.test_acp import initialize, raw_acp, tool_messages

EXAMPLE_CLIENT = Path(__file__).parent / "fixtures" / "acp" / "client.py"


@contextmanager
def busy_cores(count: int = 2) -> Iterator[None]:
    """`count` processes spinning on the CPU: the load under which the end of input raced the answers."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def test_every_request_read_before_stdin_closes_is_answered(project: Path, tmp_path: Path) -> None:
    """Issue 25: `printf 'garbage\\n{initialize}\\n' | code-puppy acp` lost the initialize answer in about one run
    of three (with stdout a file, nearly every run): at the end of input the SDK cancelled the handlers still running,
    the answer's write among them. 12 runs, under load, stdout a file or a pipe: each answers both lines."""
    lines = f"garbage\n{initialize(1)}\n".encode()

    def run(index: int) -> tuple[int, list[Any]]:
        out = tmp_path / f"out-{index}.jsonl"
        with out.open("wb") as stdout:
            done = subprocess.run(
                [str(CODE_PUPPY), "acp"],
                cwd=project,
                input=lines,
                stdout=stdout if index % 2 else subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                timeout=120,
                check=False,
            )
        written = (done.stdout or b"") + out.read_bytes()
        answers = [json.loads(line) for line in written.splitlines()]
        return done.returncode, [(answer["id"], "result" in answer) for answer in answers]

    with busy_cores(), ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(run, range(12)))
    assert runs == [(0, [(None, False), (1, True)])] * 12


def prompt_in_a_new_session(client: Any, project: Path, text: str) -> str:
    """Initialize, open a session in `project` and send `text` as prompt 3 over a raw client; the session's id."""
    new_session = {"cwd": str(project), "mcpServers": []}
    client.send(initialize(1), json.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": new_session}))
    answers = [client.answer(), client.answer()]
    session_id = next(answer["result"]["sessionId"] for answer in answers if answer.get("id") == 2)
    prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
    client.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt}))
    return session_id


def test_a_prompt_read_before_stdin_closes_is_answered_cancelled(server: FakeLLMServer, project: Path) -> None:
    """Closing stdin cancels a running turn (saved, as documented), and its `session/prompt` still gets its answer."""
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("too late", delay=30))
    with raw_acp(project) as client:
        session_id = prompt_in_a_new_session(client, project, "look")
        deadline = time.monotonic() + 30
        while len(server.requests) < 2:  # the turn runs: its tool call is done, the model's answer on its way
            assert time.monotonic() < deadline, "the turn never reached its second model request"
            time.sleep(0.02)
        returncode, stderr, rest = client.close()
    answered = [message for message in rest if json.loads(message).get("id") == 3]
    assert [json.loads(message) for message in answered] == [
        {"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "cancelled"}}
    ]
    assert returncode == 0 and "Traceback" not in stderr
    exported = json.loads(run_cli("sessions", "export", session_id, cwd=project).stdout)
    assert "# demo project" in json.dumps(exported["messages"])


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ({"error": {"code": -32000, "message": "no dialog\nhere \x1b[2J"}}, "an error (no dialog here \\x1b[2J)"),
        ({"error": {"code": -32601, "message": "Method not found"}}, "an error (Method not found)"),
        ({"result": {"outcome": {"outcome": "maybe"}}}, "no valid outcome"),
        ({"result": None}, "no valid outcome"),
    ],
)
def test_any_error_answer_to_a_permission_question_is_a_denial(
    server: FakeLLMServer, project: Path, answer: dict[str, Any], said: str
) -> None:
    """Whatever error a client answers `session/request_permission` with (or an answer with no outcome), the call is
    denied, the model is told and goes on, the prompt ends `end_turn`, and stderr says so in one line."""
    server.script(tool_calls(call("write_file", {"path": "new.txt", "content": "hi\n"})), text("Understood."))
    with raw_acp(project) as client:
        prompt_in_a_new_session(client, project, "write it")
        questions = 0
        while (message := client.answer()).get("id") != 3:
            if message.get("method") == "session/request_permission":
                questions += 1
                client.send(json.dumps({"jsonrpc": "2.0", "id": message["id"], **answer}))
        returncode, stderr, _ = client.close()
    assert (questions, message) == (1, {"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "end_turn"}})
    assert not (project / "new.txt").exists()
    assert tool_messages(server.requests[1].body) == ["The user denied this call (write file new.txt)."]
    assert returncode == 0 and "Traceback" not in stderr
    assert f"code-puppy acp: the client answered session/request_permission with {said}: write_file denied" in (
        stderr.splitlines()
    )


def test_the_sdks_example_client_gets_a_denial_and_the_turn_ends_normally(
    server: FakeLLMServer, project: Path, tmp_path: Path
) -> None:
    """The ACP Python SDK's own `examples/client.py`, unchanged, drives the installed `code-puppy acp`: it raises
    "Method not found" for `session/request_permission`, so the write is denied, the model is told and answers, and
    the prompt does not fail (the example logs "Prompt failed: …" to stderr when a prompt fails)."""
    server.script(tool_calls(call("write_file", {"path": "new.txt", "content": "hi\n"}, id="w-1")), text("Understood."))
    done = subprocess.run(
        [sys.executable, str(EXAMPLE_CLIENT), str(CODE_PUPPY), "acp"],
        cwd=project,
        input="write new.txt\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "> | Agent: Understood.\n> "
    assert "Prompt failed" not in done.stderr and "Traceback" not in done.stderr
    assert (
        "code-puppy acp: the client answered session/request_permission with an error (Method not found): "
        "write_file denied"
    ) in done.stderr.splitlines()
    assert not (project / "new.txt").exists()
    assert tool_messages(server.requests[1].body) == ["The user denied this call (write file new.txt)."]
