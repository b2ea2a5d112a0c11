"""The fleet (`code-puppy queue add`, `code-puppy worker`, `code-puppy workers list`), end to end through the installed
console script: real git repositories, worker processes sharing one `CODE_PUPPY_HOME` (the SQLite default: workers on
one machine), the fake model server answering each conversation with the whole script."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import CODE_PUPPY, run_cli, wait_for
from tests.fake_llm import FakeLLMServer, call, hang, text, tool_calls
from tests.fleet_support import (
    Workers,
    first_prompts,
    fleet_server,  # noqa: F401  (a fixture)
    git,
    queue,
    repository,  # noqa: F401  (a fixture)
    runs,
    shown,
    worker_name,
    workers,  # noqa: F401  (a fixture)
)


def test_two_workers_run_each_queued_run_once_on_its_branch_a_cancelled_one_never_one_over_budget_fails(
    fleet_server: FakeLLMServer,  # noqa: F811
    repository: Path,  # noqa: F811
    workers: Workers,  # noqa: F811
    tmp_path: Path,
) -> None:
    prompts = [f"task {n}" for n in range(4)]
    ids = {queue("-p", prompt, "--project", str(repository), cwd=tmp_path): prompt for prompt in prompts[:2]}
    ids[queue("-p", "-", cwd=repository, input=prompts[2])] = prompts[2]  # the prompt from stdin
    (tmp_path / "task.md").write_text(prompts[3])
    ids[queue("--prompt-file", str(tmp_path / "task.md"), cwd=repository)] = prompts[3]
    dropped = queue("-p", "never", cwd=repository)
    added = run_cli(
        "queue", "add", "-p", "spend", "-m", "gpt", "--max-budget-usd", "0.000001", "--name", "spender", "--timeout",
        "60", "--max-requests", "5", "--priority", "7", "--json", cwd=repository,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    record = json.loads(added.stdout)
    spender = record.pop("id")
    assert record == {
        "status": "queued",
        "queue": "code-puppy-fleet",
        "name": "spender",
        "repository": str(repository),
        "ref": None,
        "prompt": "spend",
        "model": "gpt",
        "agent": None,
        "max_budget_usd": 0.000001,
        "timeout": 60,
        "max_requests": 5,
        "priority": 7,
    }
    cancelled = run_cli("runs", "cancel", dropped, cwd=tmp_path)
    assert (cancelled.returncode, cancelled.stdout) == (0, f"cancelled queued run {dropped}\n"), cancelled.stderr
    assert {run_id: entry["status"] for run_id, entry in runs(tmp_path).items()} == {
        **dict.fromkeys(ids, "queued"),
        dropped: "cancelled",
        spender: "queued",
    }

    first, second = workers.start("--permission-mode", "yolo"), workers.start("--permission-mode", "yolo")
    wait_for(
        lambda: all(
            entry["status"] in ("succeeded", "failed", "cancelled") for entry in runs(tmp_path, pause=0.5).values()
        )
    )
    listed = run_cli("workers", "list", "--json", cwd=tmp_path)
    assert sorted((w["pid"], w["concurrency"], w["queue"], w["alive"]) for w in json.loads(listed.stdout)) == sorted(
        [(first.pid, 2, "code-puppy-fleet", True), (second.pid, 2, "code-puppy-fleet", True)]
    )

    assert first_prompts(fleet_server) == Counter([*prompts, "spend"])  # each run sent its first request once
    assert len(fleet_server.requests) == 9  # two for each run, one for the run that spent its budget
    for run_id, prompt in ids.items():
        record = shown(run_id, tmp_path)
        assert {key: record[key] for key in ("status", "output", "error", "branch", "diff_stat")} == {
            "status": "succeeded",
            "output": "changed",
            "error": None,
            "branch": f"code-puppy/{run_id}",
            "diff_stat": "1 file changed, 1 insertion(+)",
        }
        assert record["worker"] in (f"{os.uname().nodename}:{first.pid}", f"{os.uname().nodename}:{second.pid}")
        assert git(repository, "log", "--format=%an|%s", "main..code-puppy/" + run_id) == f"code-puppy|{prompt}\n"
        assert git(repository, "show", f"code-puppy/{run_id}:change.txt") == "done\n"
        history = run_cli("sessions", "show", record["session_id"], cwd=tmp_path)
        assert f"› {prompt}" in history.stdout
    assert "never" not in first_prompts(fleet_server)
    assert git(repository, "branch", "--list", f"code-puppy/{dropped}") == ""
    worktrees = repository / ".code-puppy" / "worktrees"
    assert [path.name for path in worktrees.iterdir()] == [spender]  # removed once their runs succeeded
    assert git(repository, "status", "--porcelain") == ""  # the main checkout untouched

    for process in (first, second):
        code, stderr = workers.drain(process)
        assert (
            code == 0 and stderr.splitlines()[-1] == f"code-puppy: worker {os.uname().nodename}:{process.pid} stopped"
        )
    assert run_cli("workers", "list", cwd=tmp_path).stdout == "no workers (start one with code-puppy worker)\n"
    assert shown(dropped, tmp_path)["status"] == "cancelled"

    record = shown(spender, tmp_path)  # the run over its budget failed, with the reason; its worktree is kept
    assert {key: record[key] for key in ("status", "output", "branch", "diff_stat", "exit_code", "error")} == {
        "status": "failed",
        "output": None,
        "branch": f"code-puppy/{spender}",
        "diff_stat": "",
        "exit_code": 3,  # a limit's, as `-p` exits
        "error": f"stopped by a limit: budget $0.000001 reached (--max-budget-usd): ${record['cost_usd']:.4f} spent",
    }
    assert git(repository, "log", "--format=%s", f"main..code-puppy/{spender}") == ""


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ("-m", "nope"),
            "unknown model 'nope': use PROVIDER:MODEL (e.g. openai:gpt-5.1) or a name from [models] (fake, gpt)",
        ),
        (("--agent", "nope"), "unknown agent 'nope' (agents: none defined; see `code-puppy agents list`)"),
        (("--project", "{plain}"), "{plain} is not in a git repository: worktrees need one (run `git init` first)"),
        (("--project", "{missing}"), "--project: no folder {missing}"),
        (("--priority", "0"), "Invalid value for '--priority': 0 is not in the range 1<=x<=2147483647."),
    ],
)
def test_a_bad_queue_add_is_one_line_exit_2_and_nothing_is_queued(
    fleet_server: FakeLLMServer,  # noqa: F811
    repository: Path,  # noqa: F811
    tmp_path: Path,
    args: tuple[str, ...],
    error: str,
) -> None:
    plain, missing = tmp_path / "plain", tmp_path / "missing"
    plain.mkdir()
    shown = [arg.format(plain=plain, missing=missing) for arg in args]
    added = run_cli("queue", "add", "-p", "hi", *shown, cwd=repository)
    expected = error.format(plain=plain, missing=missing)
    if args[0] == "--priority":  # click's own usage error
        assert (added.returncode, added.stdout) == (2, "") and added.stderr.endswith(f"Error: {expected}\n")
    else:
        assert (added.returncode, added.stdout, added.stderr) == (2, "", f"code-puppy: error: {expected}\n")
    assert runs(tmp_path) == {}


def test_a_worker_refuses_a_mode_it_cannot_run_unattended_in_one_line(
    fleet_server: FakeLLMServer,  # noqa: F811
    code_puppy_home: Path,
    tmp_path: Path,
) -> None:
    with (code_puppy_home / "config.toml").open("a") as config:
        config.write('[permissions]\nmode = "ask"\n')
    refused = run_cli("worker", cwd=tmp_path)
    assert (refused.returncode, refused.stdout, refused.stderr) == (
        2,
        "",
        "code-puppy: error: a worker cannot run in permission mode ask: use auto, accept-edits, yolo, read-only\n",
    )


def test_a_killed_workers_run_is_taken_over_by_another_at_its_last_finished_step_of_the_same_concurrency(
    server: FakeLLMServer,
    repository: Path,  # noqa: F811
    workers: Workers,  # noqa: F811
    tmp_path: Path,
) -> None:
    gate = tmp_path / "go"
    command = f"if [ -f {gate} ]; then echo done > change.txt; else touch {tmp_path / 'started'}; sleep 30; fi"
    server.per_conversation = True
    server.script(tool_calls(call("shell", {"command": command})), text("changed"))
    run_id = queue("-p", "survive", cwd=repository)
    doomed = workers.start("--permission-mode", "yolo")
    wait_for(lambda: (tmp_path / "started").exists(), what="the tool call")
    refused = run_cli("worker", "--permission-mode", "yolo", "--concurrency", "3", cwd=tmp_path)
    assert (refused.returncode, refused.stderr) == (
        2,
        "code-puppy: error: queue code-puppy-fleet takes 2 runs per worker (DBOS keeps one worker concurrency per "
        f"queue; worker {os.uname().nodename}:{doomed.pid} has it): start with --concurrency 2, or use another "
        "--queue\n",
    )
    heir = workers.start("--permission-mode", "yolo")
    wait_for(lambda: len(json.loads(run_cli("workers", "list", "--json", cwd=tmp_path).stdout)) == 2, what="the heir")
    os.killpg(doomed.pid, signal.SIGKILL)  # the worker and its runs, as a machine that goes down
    doomed.communicate(timeout=10)
    assert runs(tmp_path)[run_id]["status"] == "interrupted"
    gate.touch()
    wait_for(lambda: runs(tmp_path, pause=0.5)[run_id]["status"] == "succeeded", what="the run taken over")
    record = shown(run_id, tmp_path)
    assert (record["output"], record["worker"], record["diff_stat"]) == (
        "changed",
        f"{os.uname().nodename}:{heir.pid}",
        "1 file changed, 1 insertion(+)",
    )
    assert len(server.requests) == 2  # the finished first request replayed, not sent again; the tool call ran again
    assert first_prompts(server) == Counter(["survive"])
    assert git(repository, "show", f"code-puppy/{run_id}:change.txt") == "done\n"
    code, stderr = workers.drain(heir)
    assert code == 0
    assert f"its run {run_id} is queued again" in stderr


def test_cancel_of_a_running_queued_run_in_auto_mode_stops_it_at_its_next_step_and_keeps_its_worktree(
    server: FakeLLMServer,
    repository: Path,  # noqa: F811
    workers: Workers,  # noqa: F811
    tmp_path: Path,
) -> None:
    server.per_conversation = True
    server.script(tool_calls(call("shell", {"command": "echo done > change.txt"})), text("changed", delay=3))
    run_id = queue("-p", "stop me", cwd=repository)
    worker = workers.start()  # in auto mode, the default: the shell call runs in the sandbox
    wait_for(lambda: len(server.requests) == 2, what="the second model request")
    cancelled = run_cli("runs", "cancel", run_id, cwd=tmp_path)
    assert (cancelled.returncode, cancelled.stdout) == (
        0,
        f"cancelled run {run_id}: it stops at its next step; its worktree is kept\n",
    ), cancelled.stderr
    code, stderr = workers.drain(worker)  # the run in hand ends at its next step
    name = f"{os.uname().nodename}:{worker.pid}"
    assert (code, stderr.splitlines()[0], stderr.splitlines()[-1]) == (
        0,
        f"code-puppy: worker {name} on queue code-puppy-fleet, 2 at a time, permission mode auto (SIGTERM drains, a "
        "second Ctrl-C stops)",
        f"code-puppy: worker {name} stopped",
    )
    assert shown(run_id, tmp_path)["status"] == "cancelled"
    worktree = repository / ".code-puppy" / "worktrees" / run_id
    assert (worktree / "change.txt").read_text() == "done\n"  # kept as it was, uncommitted
    assert git(repository, "log", "--format=%s", f"main..code-puppy/{run_id}") == ""
    assert len(server.requests) == 2


def test_a_first_ctrl_c_drains_and_a_second_stops_the_worker_leaving_its_run_interrupted(
    server: FakeLLMServer,
    repository: Path,  # noqa: F811
    workers: Workers,  # noqa: F811
    tmp_path: Path,
) -> None:
    server.script(hang())
    run_id = queue("-p", "wait", cwd=repository)
    worker = workers.start("--permission-mode", "yolo")
    wait_for(lambda: len(server.requests) == 1, what="the model request")
    worker.send_signal(signal.SIGINT)
    wait_for(lambda: runs(tmp_path, pause=0.2)[run_id]["status"] == "running", what="the run, still in hand")
    worker.send_signal(signal.SIGINT)
    _, stderr = worker.communicate(timeout=30)
    name = f"{os.uname().nodename}:{worker.pid}"
    assert (worker.returncode, stderr.splitlines()[1:]) == (
        130,
        [
            f"code-puppy: worker {name} draining: 1 run(s) in hand",
            "code-puppy: worker stopped; its runs in hand are interrupted",
        ],
    )
    assert runs(tmp_path)[run_id]["status"] == "interrupted"


def test_a_dead_worker_of_another_host_has_its_runs_taken_over(tmp_path: Path) -> None:
    """The hostile review's case: a pid of another host cannot be probed, so only its stale beat may decide."""
    from code_puppy.durable.system import Executor
    from code_puppy.fleet.heartbeat import Heartbeats, WorkerBeat
    from code_puppy.fleet.worker import _take_over

    here = Executor.this()
    there = Executor(here.host + "-elsewhere", here.pid, here.started, "other-box")  # this very pid, alive here
    heartbeats = Heartbeats(f"sqlite:///{tmp_path / 'durable.sqlite'}")
    stale = int(time.time() * 1000) - 60_000
    heartbeats.beat(WorkerBeat(there.id, "w-2", "other-box", here.pid, "q-x", 2, 1, "auto", stale, stale))

    class Resumed:
        """DBOS as `_take_over` uses it: the dead worker's pending runs listed, each resumed."""

        def __init__(self) -> None:
            self.listed: list[str] = []
            self.resumed: list[str] = []

        def list_workflows(self, **query: Any) -> list[Any]:
            self.listed.append(query["executor_id"])
            return [SimpleNamespace(workflow_id="run-1", queue_name="q-x")]

        def resume_workflow(self, workflow_id: str, **_: Any) -> None:
            self.resumed.append(workflow_id)

    dbos = Resumed()
    try:
        _take_over(heartbeats, dbos, "q-x")
    finally:
        heartbeats.close()
    assert (dbos.listed, dbos.resumed) == ([there.id], ["run-1"])


def test_steer_cancel_of_a_fleet_run_ends_that_run_alone_and_the_worker_takes_the_next(
    server: FakeLLMServer,
    repository: Path,  # noqa: F811
    workers: Workers,  # noqa: F811
    tmp_path: Path,
) -> None:
    """`steer --session ID --cancel` ends a headless run as a SIGINT does; a fleet run shares its worker's process, so
    the cancel must end that run's turn alone (a SIGINT to the worker would have drained it, the run going on)."""
    started = tmp_path / "started"
    server.per_conversation = True
    command = f"if [ -f {started} ]; then echo again; else touch {started}; sleep 30; fi"  # the first run alone waits
    server.script(tool_calls(call("shell", {"command": command})), text("done"))
    run_id = queue("-p", "cancel me", cwd=repository)
    worker = workers.start("--permission-mode", "yolo")
    wait_for(started.exists, what="the run's tool call")
    follower = subprocess.Popen(
        [str(CODE_PUPPY), "runs", "show", run_id, "--follow"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert follower.stdout is not None
    session_id = json.loads(follower.stdout.readline())["session_id"]  # a running fleet run's session: its first event
    cancelled = run_cli("steer", "--session", session_id, "--cancel", cwd=tmp_path)
    assert cancelled.returncode == 0, cancelled.stderr
    follower.communicate(timeout=60)
    record = shown(run_id, tmp_path)
    assert (record["status"], record["exit_code"], record["output"]) == ("cancelled", 130, None)
    assert len(server.requests) == 1  # the tool call cut off: no second request

    next_id = queue("-p", "the next one", cwd=repository)
    wait_for(lambda: runs(tmp_path, pause=0.5)[next_id]["status"] == "succeeded", what="the next run")
    assert shown(next_id, tmp_path)["worker"] == worker_name(worker)  # the same worker, which did not drain
    code, stderr = workers.drain(worker)
    assert code == 0
    assert "draining: 0 run(s) in hand" in stderr and stderr.count("draining") == 1  # only at the end
