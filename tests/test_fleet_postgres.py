"""The fleet on PostgreSQL, end to end through the installed console script: worker processes with different
`CODE_PUPPY_HOME`s (two "machines") sharing one `CODE_PUPPY_STORAGE_URL`, the project a git repository on the shared
disk, the fake model server; the test's own home (a third machine, with no worker) queues, watches and steers."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import CODE_PUPPY, run_cli, wait_for
from tests.fake_llm import FakeLLMServer, RecordedRequest, call, text, tool_calls
from tests.fleet_support import (
    Workers,
    first_prompts,
    git,
    queue,
    repository,  # noqa: F401  (a fixture)
    runs,
    shown,
    worker_name,
    workers,  # noqa: F401  (a fixture)
)
from tests.test_durable import merged

YOLO = ("--permission-mode", "yolo")


def prompt_of(request: RecordedRequest) -> str:
    """The prompt of the conversation a request belongs to (its first user message)."""
    return next(m["content"] for m in request.body["messages"] if m["role"] == "user")


def ended(listed: dict[str, dict[str, Any]]) -> bool:
    """Whether every run listed ended; a run that failed says why in the test's failure."""
    if all(entry["status"] in ("succeeded", "failed", "cancelled") for entry in listed.values()):
        assert [shown(run_id, Path.cwd())["error"] for run_id in listed] == [None] * len(listed)
        return True
    return False


def gated(gate: Path, marks: Path, then: str) -> str:
    """A shell command that marks the run's branch as started (`marks/code-puppy_RUN-ID`), waits for `gate`, then runs
    `then` in the run's worktree."""
    return f"touch {marks}/$(git branch --show-current | tr / _); while [ ! -f {gate} ]; do sleep 0.1; done; {then}"


def test_ten_queued_runs_on_two_machines_of_two_slots_each_run_once_each_on_its_own_branch_with_its_change(
    server: FakeLLMServer,
    repository: Path,  # noqa: F811
    workers: Workers,  # noqa: F811
    tmp_path: Path,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CODE_PUPPY_STORAGE_URL", postgres_url)
    gate, marks = tmp_path / "go", tmp_path / "marks"
    marks.mkdir()
    server.per_conversation = True
    server.script(
        tool_calls(call("shell", {"command": gated(gate, marks, "git branch --show-current > change.txt")})),
        text("changed", delay=0.2),
    )
    first, second = workers.start(*YOLO, home="a"), workers.start(*YOLO, home="b")
    names = {worker_name(first), worker_name(second)}
    for process in (first, second):  # each launched DBOS and beat once: it takes runs from now on
        assert workers.ready(process).startswith(f"code-puppy: worker {worker_name(process)} on queue ")
    with ThreadPoolExecutor(4) as pool:  # `queue add`s side by side, as from several terminals
        added = pool.map(lambda n: queue("-p", f"task {n}", "--project", str(repository), cwd=tmp_path), range(10))
        prompts = {run_id: f"task {n}" for n, run_id in enumerate(added)}

    wait_for(lambda: len(list(marks.iterdir())) == 4, what="four runs in their shell calls")
    listed = runs(tmp_path)  # each worker holds its two slots (the runs wait for the gate): the others wait for one
    assert Counter((entry["status"], entry["worker"]) for entry in listed.values()) == {
        **{("running", name): 2 for name in names},
        ("queued", None): 6,
    }
    gate.touch()

    wait_for(lambda: ended(runs(tmp_path, pause=0.5)), what="every run to end")
    listed = runs(tmp_path)  # from the test's home: a third machine
    assert {run_id: (entry["status"], entry["branch"]) for run_id, entry in listed.items()} == {
        run_id: ("succeeded", f"code-puppy/{run_id}") for run_id in prompts
    }
    assert {entry["worker"] for entry in listed.values()} == names
    with ThreadPoolExecutor(4) as pool:
        records = dict(zip(prompts, pool.map(lambda run_id: shown(run_id, tmp_path), prompts), strict=True))
    for run_id, prompt in prompts.items():
        record = records[run_id]
        assert (record["status"], record["output"], record["branch"], record["diff_stat"]) == (
            "succeeded",
            "changed",
            f"code-puppy/{run_id}",
            "1 file changed, 1 insertion(+)",
        )
        assert record["worker"] in names
        assert git(repository, "log", "--format=%an|%s", f"main..code-puppy/{run_id}") == f"code-puppy|{prompt}\n"
        assert git(repository, "show", f"code-puppy/{run_id}:change.txt") == f"code-puppy/{run_id}\n"  # made there
    assert first_prompts(server) == Counter(prompts.values())  # each run's first request sent once
    assert len(server.requests) == 20
    assert git(repository, "status", "--porcelain") == ""  # the main checkout untouched


def test_a_dead_workers_run_is_taken_over_on_the_other_machine_ahead_of_the_runs_queued_behind_it(
    server: FakeLLMServer,
    repository: Path,  # noqa: F811
    workers: Workers,  # noqa: F811
    tmp_path: Path,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CODE_PUPPY_STORAGE_URL", postgres_url)
    gate, marks = tmp_path / "go", tmp_path / "marks"
    marks.mkdir()
    server.per_conversation = True
    server.script(
        tool_calls(call("shell", {"command": gated(gate, marks, "git branch --show-current > change.txt")})),
        text("changed"),
    )

    def started(run_id: str) -> bool:
        return (marks / f"code-puppy_{run_id}").exists()

    def add(prompt: str) -> str:
        return queue("-p", prompt, "--project", str(repository), cwd=tmp_path)

    doomed = workers.start(*YOLO, "--concurrency", "1", home="a")
    survivor = add("survive")
    follower = subprocess.Popen(
        [str(CODE_PUPPY), "runs", "show", survivor, "--follow"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # watches the run through its takeover: the heir journals the replayed first response again
    wait_for(lambda: started(survivor), what="the doomed worker's run in its tool call")
    heir = workers.start(*YOLO, "--concurrency", "1", home="b")
    holder = add("hold")  # the heir's one slot, held until the gate opens
    wait_for(lambda: started(holder), what="the heir's run in its tool call")
    behind = {add(f"behind {n}"): f"behind {n}" for n in range(2)}  # queued after the survivor, before its takeover
    assert {run_id: (entry["status"], entry["worker"]) for run_id, entry in runs(tmp_path).items()} == {
        survivor: ("running", worker_name(doomed)),
        holder: ("running", worker_name(heir)),
        **dict.fromkeys(behind, ("queued", None)),
    }

    killed_ms = int(time.time() * 1000)
    workers.kill(doomed)  # the worker and its run, as a machine that goes down, in the survivor's tool call
    wait_for(lambda: runs(tmp_path, pause=0.5)[survivor]["status"] == "queued", what="the dead worker's run requeued")
    assert {run_id: entry["status"] for run_id, entry in runs(tmp_path).items()} == {
        survivor: "queued",
        holder: "running",
        **dict.fromkeys(behind, "queued"),
    }
    gate.touch()
    wait_for(lambda: ended(runs(tmp_path, pause=0.5)), what="every run to end")

    record = shown(survivor, tmp_path)
    assert (record["output"], record["worker"], record["diff_stat"]) == (
        "changed",
        worker_name(heir),
        "1 file changed, 1 insertion(+)",
    )
    assert git(repository, "show", f"code-puppy/{survivor}:change.txt") == f"code-puppy/{survivor}\n"
    assert first_prompts(server) == Counter(["survive", "hold", *behind.values()])  # no first request sent twice
    assert len(server.requests) == 8  # the survivor's finished first request replayed, not sent again

    # The heir took the survivor again before either run queued behind it: by the requests the fake server saw...
    order = [prompt_of(request) for request in server.requests]
    resumed = len(order) - 1 - order[::-1].index("survive")  # the survivor's second request, sent by the heir
    assert all(order.index(prompt) > resumed for prompt in behind.values()), order
    # ...and by DBOS's own record of when each step started.
    with psycopg.connect(postgres_url) as db:
        steps = db.execute(
            "SELECT workflow_uuid, function_name, started_at_epoch_ms FROM dbos.operation_outputs"
            " WHERE workflow_uuid = ANY(%s) ORDER BY workflow_uuid, function_id",
            ([survivor, *behind],),
        ).fetchall()
    taken = [(name, at < killed_ms) for run_id, name, at in steps if run_id == survivor]
    assert taken == [
        ("code_puppy.fleet.worktree", True),
        ("code_puppy__capability__workspace.call", True),
        ("code_puppy__capability__planning.read_plan", True),
        ("code_puppy__model.request_stream", True),  # the first request: finished on the dead worker, kept
        ("code_puppy.tool_call", False),  # the tool call the kill cut off: run again on the heir, then on from there
        ("code_puppy__capability__planning.read_plan", False),
        ("code_puppy__model.request_stream", False),
        ("code_puppy.fleet.finish", False),
    ]
    again = min(at for run_id, _, at in steps if run_id == survivor and at >= killed_ms)
    assert again < min(at for run_id, _, at in steps if run_id in behind)

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
    ]  # each once, through the takeover
    assert (events[-1]["session_id"], events[-1]["usage"]["requests"]) == (record["session_id"], 2)

    code, stderr = workers.drain(heir)
    assert code == 0
    assert f"code-puppy: worker {worker_name(doomed)} stopped beating; its run {survivor} is queued again\n" in stderr


def test_runs_show_follow_streams_a_queued_runs_events_from_another_machine_until_it_ends(
    server: FakeLLMServer,
    repository: Path,  # noqa: F811
    workers: Workers,  # noqa: F811
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
    workers.start(*YOLO, home="a")
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


def test_a_run_on_one_machine_is_steered_from_another_by_the_session_id_its_events_name(
    server: FakeLLMServer,
    repository: Path,  # noqa: F811
    workers: Workers,  # noqa: F811
    tmp_path: Path,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CODE_PUPPY_STORAGE_URL", postgres_url)
    gate, marks = tmp_path / "go", tmp_path / "marks"
    marks.mkdir()
    server.per_conversation = True
    server.script(
        tool_calls(call("shell", {"command": gated(gate, marks, "echo done > change.txt")})), text("tests added")
    )
    worker = workers.start(*YOLO, home="a")
    run_id = queue("-p", "write it", "--project", str(repository), cwd=tmp_path)
    wait_for(lambda: (marks / f"code-puppy_{run_id}").exists(), what="the run in its tool call")
    running = shown(run_id, tmp_path)  # from the test's home, a third machine: the session the worker journals in
    assert (running["status"], running["branch"], running["worker"]) == (
        "running",
        f"code-puppy/{run_id}",
        worker_name(worker),
    )
    follower = subprocess.Popen(
        [str(CODE_PUPPY), "runs", "show", run_id, "--follow"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # from the test's home, a third machine: its events name its session at once
    assert follower.stdout is not None
    session_id = running["session_id"]
    assert json.loads(follower.stdout.readline()) == {"type": "session", "session_id": session_id}
    assert session_id is not None

    steered = run_cli("steer", "--session", session_id, "add tests too", cwd=tmp_path)
    assert (steered.returncode, steered.stdout, steered.stderr) == (
        0,
        f"steered session {session_id[:8]} (pid {worker.pid})\n",
        "",
    )
    gate.touch()
    stdout, stderr = follower.communicate(timeout=60)
    assert (follower.returncode, stderr) == (0, "")
    assert json.loads(stdout.splitlines()[-1])["output"] == "tests added"
    record = shown(run_id, tmp_path)
    assert (record["status"], record["output"], record["session_id"], record["worker"]) == (
        "succeeded",
        "tests added",
        session_id,
        worker_name(worker),
    )
    assert len(server.requests) == 2
    users = [m["content"] for m in server.requests[1].body["messages"] if m["role"] == "user"]
    assert users == ["write it", "add tests too"]  # the run's next request carried the steer
