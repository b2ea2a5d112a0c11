"""The fleet's throughput (issue 29): runs per minute for 1, 2 and 4 workers (concurrency 2 each) over queued runs,
and the queue latency at idle (enqueue to the run's first model request).

    python benchmarks/fleet.py [--runs 40] [--delays 0.5,2] [--workers 1,2,4] [--concurrency 2] [--postgres]

`--postgres`: on a PostgreSQL of its own (tests/postgres.py's, a fresh database a round), each worker with a
`CODE_PUPPY_HOME` of its own (the workers as on several machines).

Each round starts its workers in a fresh `CODE_PUPPY_HOME` (the SQLite default: workers on one machine share it), waits
for their heartbeats, then enqueues `--runs` runs on a fresh git repository (in this process, through `DBOSClient` as
`queue add` does) and times them until every one succeeded. Every run is two model requests against the in-repo fake
OpenAI-compatible server, each after a fixed delay (a round per value of `--delays`: 0.5 s is a fast local model, 2 s
nearer a hosted one): a shell call writing a file, then the answer. Checked: every
run succeeded and sent its first request once (none lost, none run twice). Goal: throughput grows with the workers up
to the machine's limit (the fake server is not one: it answers every request in its own thread).
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fake_llm import FakeLLMServer, call, text, tool_calls  # noqa: E402

CODE_PUPPY = str(Path(sys.executable).parent / "code-puppy")


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def home_and_repository(base: Path, server: FakeLLMServer) -> tuple[Path, Path]:
    home, repository = base / "home", base / "repository"
    home.mkdir()
    (home / "config.toml").write_text(
        f'model = "fake"\n[sessions]\nauto_title = false\n[models.fake]\nname = "fake-model"\n'
        f'base_url = "{server.base_url}"\n'
    )
    repository.mkdir()
    (repository / "README.md").write_text("# demo\n")
    git(repository, "init", "-q")
    git(repository, "add", "-A")
    git(repository, "-c", "user.name=b", "-c", "user.email=b@example.invalid", "commit", "-qm", "start")
    return home, repository


def worker_home(cwd: Path, n: int) -> dict[str, str]:
    """On PostgreSQL, worker `n`'s own `CODE_PUPPY_HOME` (a copy of the config): a machine of its own."""
    if not os.environ.get("CODE_PUPPY_STORAGE_URL"):
        return dict(os.environ)
    home = cwd / f"machine-{n}"
    home.mkdir()
    (home / "config.toml").write_text((Path(os.environ["CODE_PUPPY_HOME"]) / "config.toml").read_text())
    return {**os.environ, "CODE_PUPPY_HOME": str(home)}


def start_workers(count: int, concurrency: int, cwd: Path) -> list[subprocess.Popen[bytes]]:
    from code_puppy.fleet.heartbeat import Heartbeats

    workers = [
        subprocess.Popen(
            [CODE_PUPPY, "worker", "--concurrency", str(concurrency), "--permission-mode", "yolo"],
            cwd=cwd,
            env=worker_home(cwd, n),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for n in range(count)
    ]
    from code_puppy.durable.system import system_database_path, system_database_url

    while True:  # every worker beating: launched and listening
        if os.environ.get("CODE_PUPPY_STORAGE_URL") or system_database_path().exists():
            heartbeats = Heartbeats(system_database_url())
            try:
                if len(heartbeats.listed()) == count:
                    return workers
            finally:
                heartbeats.close()
        time.sleep(0.1)


def stop(workers: list[subprocess.Popen[bytes]]) -> None:
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        worker.wait(timeout=60)


def wait_settled(ids: set[str]) -> dict[str, str]:
    from code_puppy.durable.runs import list_runs

    while True:
        statuses = {run.id: run.status for run in list_runs() if run.id in ids}
        if all(status in ("succeeded", "failed", "cancelled") for status in statuses.values()):
            return statuses
        time.sleep(0.1)


def first_prompts(server: FakeLLMServer) -> collections.Counter[str]:
    counted: collections.Counter[str] = collections.Counter()
    for request in server.requests:
        messages = request.body["messages"]
        if not any(message["role"] == "assistant" for message in messages):
            counted[next(m["content"] for m in messages if m["role"] == "user")] += 1
    return counted


POSTGRES: list[Any] = []
"""`--postgres`: the server, once started."""


def fresh_store() -> None:
    """With `--postgres`, a new database for the next round."""
    if POSTGRES:
        os.environ["CODE_PUPPY_STORAGE_URL"] = POSTGRES[0].create_database()


def round_of(workers: int, concurrency: int, runs: int, delay: float) -> tuple[float, bool]:
    """Runs per minute with `workers` workers, and whether every run succeeded exactly once."""
    from code_puppy.fleet.queue import QueuedRun, enqueue

    fresh_store()

    with tempfile.TemporaryDirectory() as base, FakeLLMServer(per_conversation=True) as server:
        server.script(
            tool_calls(call("shell", {"command": "echo done > change.txt"}), delay=delay), text("done", delay=delay)
        )
        home, repository = home_and_repository(Path(base), server)
        os.environ["CODE_PUPPY_HOME"] = str(home)
        started = start_workers(workers, concurrency, Path(base))
        try:
            began = time.monotonic()
            ids = {enqueue(QueuedRun(prompt=f"task {n}", project=repository)) for n in range(runs)}
            statuses = wait_settled(ids)
            elapsed = time.monotonic() - began
        finally:
            stop(started)
        once = set(statuses.values()) == {"succeeded"} and first_prompts(server) == collections.Counter(
            f"task {n}" for n in range(runs)
        )
        if not once:
            from code_puppy.durable.runs import list_runs

            twice = {prompt: n for prompt, n in first_prompts(server).items() if n != 1}
            failed = [(run.id[:8], run.status, run.error) for run in list_runs() if run.status != "succeeded"]
            print(f"  not once: first requests sent {twice or 'once each'}; not succeeded: {failed}")
        return runs / elapsed * 60, once


def idle_latency(delay: float, rounds: int = 3) -> tuple[float, float]:
    """Seconds from `code-puppy queue add` starting, and from its enqueue committed, to the run's first model request,
    one idle worker waiting (the medians of `rounds` runs, each after the last one ended)."""
    from code_puppy.fleet.queue import QueuedRun, enqueue

    fresh_store()

    with tempfile.TemporaryDirectory() as base, FakeLLMServer(per_conversation=True) as server:
        server.script(text("done", delay=delay))
        home, repository = home_and_repository(Path(base), server)
        os.environ["CODE_PUPPY_HOME"] = str(home)
        started = start_workers(1, 2, Path(base))
        from_command: list[float] = []
        from_enqueue: list[float] = []
        try:
            time.sleep(1)
            for n in range(rounds):
                began = time.monotonic()
                added = subprocess.run(
                    [CODE_PUPPY, "queue", "add", "-p", f"command {n}", "--project", str(repository)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                from_command.append(first_request_after(server, f"command {n}") - began)
                wait_settled({added.stdout.split()[-1]})
                run_id = enqueue(QueuedRun(prompt=f"enqueue {n}", project=repository))
                enqueued = time.monotonic()
                from_enqueue.append(first_request_after(server, f"enqueue {n}") - enqueued)
                wait_settled({run_id})
        finally:
            stop(started)
        return sorted(from_command)[rounds // 2], sorted(from_enqueue)[rounds // 2]


def first_request_after(server: FakeLLMServer, prompt: str) -> float:
    """When the server got the first request of `prompt` (time.monotonic), waiting for it."""
    while prompt not in first_prompts(server):
        time.sleep(0.005)
    return time.monotonic()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--delays", default="0.5,2", help="Seconds before each reply, comma-separated.")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--postgres", action="store_true", help="On a PostgreSQL store, a home per worker.")
    args = parser.parse_args()
    stop_server: list[str] = []
    if args.postgres:
        from tests.postgres import start_server

        server, stop_server = start_server()
        POSTGRES.append(server)
    try:
        report(args)
    finally:
        if stop_server:
            subprocess.run(stop_server, capture_output=True, timeout=60)


def report(args: argparse.Namespace) -> None:
    delays = [float(word) for word in args.delays.split(",")]
    for delay in delays:
        print(f"{args.runs} runs of 2 requests ({delay} s a reply), concurrency {args.concurrency} per worker")
        base: float | None = None
        for count in (int(word) for word in args.workers.split(",")):
            rate, once = round_of(count, args.concurrency, args.runs, delay)
            base = base or rate
            print(
                f"{count} worker(s): {rate:6.1f} runs/min  ({rate / base:.2f}x)  "
                f"{'each run once' if once else 'NOT EVERY RUN SUCCEEDED ONCE'}"
            )
    command, enqueued = idle_latency(delays[0])
    print(
        f"queue latency at idle, to the run's first request: {command:.2f} s from `code-puppy queue add` starting, "
        f"{enqueued:.2f} s from the enqueue committed"
    )


if __name__ == "__main__":
    main()
