"""The fleet on PostgreSQL, end to end through the installed console script: two worker processes with different
`CODE_PUPPY_HOME`s (two "machines") sharing one `CODE_PUPPY_STORAGE_URL`, the project a git repository on the shared
disk, the fake model server; a third home queues and watches."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CODE_PUPPY, wait_for
from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.test_durable import merged
from tests.test_fleet import first_prompts, git, queue, repository, runs, shown  # noqa: F401  (fixture)


class Machines:
    """Worker processes, each with a `CODE_PUPPY_HOME` of its own (a copy of the test's config), in a process group
    of its own."""

    def __init__(self, root: Path, config: Path) -> None:
        self.root, self.config = root, config
        self.processes: list[subprocess.Popen[str]] = []

    def worker(self, name: str) -> subprocess.Popen[str]:
        home = self.root / name
        home.mkdir()
        shutil.copy(self.config, home / "config.toml")
        process = subprocess.Popen(
            [str(CODE_PUPPY), "worker", "--permission-mode", "yolo"],
            cwd=self.root,
            env={**os.environ, "CODE_PUPPY_HOME": str(home)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate(timeout=10)


@pytest.fixture
def machines(tmp_path: Path, code_puppy_home: Path) -> Iterator[Machines]:
    started = Machines(tmp_path / "machines", code_puppy_home / "config.toml")
    started.root.mkdir()
    yield started
    started.close()


def test_two_machines_on_postgresql_run_each_queued_run_once_and_one_takes_over_the_others_run(
    server: FakeLLMServer,
    repository: Path,  # noqa: F811
    machines: Machines,
    tmp_path: Path,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CODE_PUPPY_STORAGE_URL", postgres_url)
    gate, started = tmp_path / "go", tmp_path / "started"
    gate.touch()
    command = f"if [ -f {gate} ]; then echo done > change.txt; else touch {started}; sleep 60; fi"
    server.per_conversation = True
    server.script(tool_calls(call("shell", {"command": command})), text("changed"))
    first, second = machines.worker("a"), machines.worker("b")
    names = {f"{os.uname().nodename}:{process.pid}" for process in (first, second)}
    prompts = {queue("-p", f"task {n}", "--project", str(repository), cwd=tmp_path): f"task {n}" for n in range(3)}
    wait_for(lambda: all(entry["status"] == "succeeded" for entry in runs(tmp_path, pause=0.5).values()))
    listed = runs(tmp_path)
    assert {run_id: (entry["status"], entry["branch"]) for run_id, entry in listed.items()} == {
        run_id: ("succeeded", f"code-puppy/{run_id}") for run_id in prompts
    }
    assert {entry["worker"] for entry in listed.values()} <= names
    for run_id, prompt in prompts.items():
        record = shown(run_id, tmp_path)
        assert (record["status"], record["output"], record["branch"], record["diff_stat"]) == (
            "succeeded",
            "changed",
            f"code-puppy/{run_id}",
            "1 file changed, 1 insertion(+)",
        )
        assert record["worker"] in names
        assert git(repository, "log", "--format=%an|%s", f"main..code-puppy/{run_id}") == f"code-puppy|{prompt}\n"
        assert git(repository, "show", f"code-puppy/{run_id}:change.txt") == "done\n"
    assert first_prompts(server) == {prompt: 1 for prompt in prompts.values()}
    assert len(server.requests) == 6

    gate.unlink()
    survivor = queue("-p", "survive", "--project", str(repository), cwd=tmp_path)
    follower = subprocess.Popen(
        [str(CODE_PUPPY), "runs", "show", survivor, "--follow"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # watches the run through its takeover: the heir journals the replayed first response again
    wait_for(lambda: started.exists(), what="the tool call")
    holder = runs(tmp_path)[survivor]
    assert holder["status"] == "running"
    doomed, heir = (first, second) if holder["worker"].endswith(f":{first.pid}") else (second, first)
    os.killpg(doomed.pid, signal.SIGKILL)  # the worker and its runs, as a machine that goes down
    doomed.communicate(timeout=10)
    gate.touch()
    killed = time.monotonic()
    wait_for(lambda: runs(tmp_path, pause=0.5)[survivor]["status"] == "succeeded", what="the run taken over")
    assert time.monotonic() - killed < 60
    record = shown(survivor, tmp_path)
    assert (record["output"], record["worker"], record["diff_stat"]) == (
        "changed",
        f"{os.uname().nodename}:{heir.pid}",
        "1 file changed, 1 insertion(+)",
    )
    assert first_prompts(server)["survive"] == 1  # the finished first request replayed, not sent again
    assert len(server.requests) == 8
    assert git(repository, "show", f"code-puppy/{survivor}:change.txt") == "done\n"
    stdout, stderr = follower.communicate(timeout=60)
    assert (follower.returncode, stderr) == (0, "")
    events = [json.loads(line) for line in stdout.splitlines()]
    assert [event["type"] for event in events] == [
        "session",
        "request",
        "tool_call",
        "tool_result",
        "text_delta",
        "request",
        "result",
    ]  # each once
    assert (events[-1]["session_id"], events[-1]["usage"]["requests"]) == (record["session_id"], 2)


def test_runs_show_follow_streams_a_queued_runs_events_from_another_machine_until_it_ends(
    server: FakeLLMServer,
    repository: Path,  # noqa: F811
    machines: Machines,
    tmp_path: Path,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CODE_PUPPY_STORAGE_URL", postgres_url)
    server.per_conversation = True
    server.script(tool_calls(call("shell", {"command": "echo done > change.txt"})), text("changed", delay=3))
    run_id = queue("-p", "watch me", "--project", str(repository), cwd=tmp_path)
    follower = subprocess.Popen(
        [str(CODE_PUPPY), "runs", "show", run_id, "--follow"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # from the test's home, a machine without a worker, before any worker took the run
    machines.worker("a")
    assert follower.stdout is not None
    early = [follower.stdout.readline() for _ in range(4)]  # the session, the request, the tool call, its result
    assert runs(tmp_path)[run_id]["status"] == "running"  # streamed while the run goes on (its answer takes 3 s)
    stdout, stderr = follower.communicate(timeout=60)
    assert (follower.returncode, stderr) == (0, "")
    events = [json.loads(line) for line in [*early, *stdout.splitlines()]]
    assert '"exit_code": 0' in events[3]["content"]  # the shell's report
    record = shown(run_id, tmp_path)
    call_id = events[2]["tool_call_id"]
    first, second = server.requests
    usages = [
        {"input_tokens": r.input_tokens, "output_tokens": r.output_tokens, "cache_read_tokens": 0,
         "cache_write_tokens": 0}
        for r in (first, second)
    ]  # fmt: skip
    assert events == [
        {"type": "session", "session_id": record["session_id"]},
        {"type": "request", "run": 0, "kind": "main", "model": "fake-model", "usage": usages[0], "cost_usd": None},
        {"type": "tool_call", "run": 0, "tool_name": "shell", "tool_call_id": call_id,
         "args": {"command": "echo done > change.txt"}},
        {"type": "tool_result", "run": 0, "tool_name": "shell", "tool_call_id": call_id, "outcome": "success",
         "content": events[3]["content"]},
        {"type": "text_delta", "run": 0, "text": "changed"},
        {"type": "request", "run": 0, "kind": "main", "model": "fake-model", "usage": usages[1], "cost_usd": None},
        {"type": "result", "session_id": record["session_id"], "output": "changed", "status": "success",
         "usage": {"input_tokens": first.input_tokens + second.input_tokens,
                   "output_tokens": first.output_tokens + second.output_tokens, "requests": 2,
                   "cache_read_tokens": 0, "cache_write_tokens": 0},
         "duration_ms": events[-1]["duration_ms"], "error": None, "cost_usd": None, "cost_complete": False,
         "denied": 0},
    ]  # fmt: skip
    assert 3000 <= events[-1]["duration_ms"] < 60_000  # from a worker's taking it to its end: the answer's 3 s at least

    # The same script run by `-p --output-format stream-json` here: the same events, its text a word at a time.
    plain = subprocess.run(
        [str(CODE_PUPPY), "-p", "watch me", "--permission-mode", "yolo", "--output-format", "stream-json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert plain.returncode == 0, plain.stderr
    streamed = [json.loads(line) for line in plain.stdout.splitlines()]
    assert [(event["type"], sorted(event)) for event in merged(streamed)] == [
        (event["type"], sorted(event)) for event in events
    ]
