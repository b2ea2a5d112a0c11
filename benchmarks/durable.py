"""What `--durable` costs (issue 28): a 10-request headless run, plain and durable, side by side; and how long
`code-puppy runs resume` takes to send its first new request after a kill -9.

    python benchmarks/durable.py [--rounds 3] [--delay 0.5] [--storage-url URL | --postgres]

Each round runs the same script each way in a fresh `CODE_PUPPY_HOME`, against the in-repo fake OpenAI-compatible
server: 9 `read_file` tool calls, then the answer, each reply after a fixed `--delay` (a model's latency): plain and
durable on SQLite, and, with `--postgres` (a local server started as the tests start theirs, tests/postgres.py) or
`--storage-url URL`, plain and durable on PostgreSQL too, side by side in the same rounds. Reported: the median wall
time of each (process start to exit), and its ratio to the plain SQLite run (goal for durable / plain on one store:
at most 1.15). Then on each store a durable run is killed (SIGKILL to its process group) while its third request is
out, and `runs resume` is timed from its start to its first request. On PostgreSQL the connections of the durable
run's database are sampled while it runs (`pg_stat_activity`): DBOS's (`application_name` dbos_transact) and the
rest (the store's).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fake_llm import FakeLLMServer, call, hang, text, tool_calls  # noqa: E402

CODE_PUPPY = str(Path(sys.executable).parent / "code-puppy")
REQUESTS = 10


def script(server: FakeLLMServer, delay: float, *, hang_at: int | None = None) -> None:
    steps = [tool_calls(call("read_file", {"path": "README.md"}), delay=delay) for _ in range(REQUESTS - 1)]
    steps.append(text("The README says demo.", delay=delay))
    if hang_at is not None:
        steps[hang_at] = hang()
    server.script(*steps)


def environment(home: Path, server: FakeLLMServer, storage_url: str | None) -> dict[str, str]:
    home.mkdir(parents=True)
    (home / "config.toml").write_text(
        f'model = "fake"\n[sessions]\nauto_title = false\n[models.fake]\nname = "fake-model"\n'
        f'base_url = "{server.base_url}"\n'
    )
    env = {**os.environ, "CODE_PUPPY_HOME": str(home)}
    if storage_url is not None:
        env["CODE_PUPPY_STORAGE_URL"] = storage_url
    return env


class ConnectionCounter:
    """The most connections to the database of `url` seen while a run goes (DBOS's, and all), sampled every 20 ms."""

    def __init__(self, url: str) -> None:
        import threading

        self.url, self.most, self.dbos = url, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        import psycopg

        name = self.url.rsplit("/", 1)[-1]
        with psycopg.connect(self.url, autocommit=True) as connection:
            while not self._stop.wait(0.02):
                row = connection.execute(
                    "SELECT count(*), count(*) FILTER (WHERE application_name = 'dbos_transact')"
                    " FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                    (name,),
                ).fetchone()
                assert row is not None
                self.most, self.dbos = max(self.most, row[0]), max(self.dbos, row[1])

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def timed_run(project: Path, env: dict[str, str], *durable: str) -> float:
    started = time.monotonic()
    completed = subprocess.run(
        [CODE_PUPPY, "-p", "read the README", *durable], cwd=project, env=env, capture_output=True, text=True
    )
    took = time.monotonic() - started
    if completed.returncode != 0:
        sys.exit(f"run failed ({completed.returncode}): {completed.stderr[-2000:]}")
    return took


def resume_latency(tmp: Path, server: FakeLLMServer, project: Path, delay: float, storage_url: str | None) -> float:
    """Seconds from `runs resume` starting to its first model request, after a kill -9 during the third request."""
    env = environment(tmp / "home-resume", server, storage_url)  # tmp: a fresh folder per store
    script(server, delay, hang_at=2)
    before = len(server.requests)
    process = subprocess.Popen(
        [CODE_PUPPY, "-p", "read the README", "--durable"],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    while len(server.requests) < before + 3:
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)
    assert process.stderr is not None
    run_id = process.communicate()[1].splitlines()[0].rsplit(" ", 1)[-1]
    sent = len(server.requests)
    started = time.monotonic()
    resumed = subprocess.Popen(
        [CODE_PUPPY, "runs", "resume", run_id], cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    while len(server.requests) == sent and resumed.poll() is None:
        time.sleep(0.005)
    first = time.monotonic() - started
    _, err = resumed.communicate()
    if resumed.returncode != 0:
        sys.exit(f"resume failed ({resumed.returncode}): {err.decode()[-2000:]}")
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.5, help="seconds before each model reply")
    parser.add_argument("--storage-url", help="a PostgreSQL url for the store and DBOS, besides the SQLite files")
    parser.add_argument("--postgres", action="store_true", help="start a local PostgreSQL for the PostgreSQL runs")
    args = parser.parse_args()
    postgres, stop = None, []
    if args.postgres:
        from tests.postgres import start_server as start_postgres

        postgres, stop = start_postgres()
    fixed_url: str | None = args.storage_url

    def url_for() -> str | None:
        return postgres.create_database() if postgres is not None else fixed_url

    stores = ["sqlite"] + (["postgresql"] if postgres is not None or fixed_url else [])
    times: dict[str, list[float]] = {f"{way} {store}": [] for store in stores for way in ("plain", "durable")}
    latency: dict[str, float] = {}
    connections: list[tuple[int, int]] = []
    try:
        with tempfile.TemporaryDirectory() as directory, FakeLLMServer() as server:
            tmp = Path(directory)
            project = tmp / "project"
            project.mkdir()
            (project / "README.md").write_text("# demo\n")
            for index in range(args.rounds):
                for store in stores:
                    url = url_for() if store == "postgresql" else None
                    env = environment(tmp / f"home-{store}-{index}", server, url)
                    script(server, args.delay)
                    times[f"plain {store}"].append(timed_run(project, env))
                    script(server, args.delay)
                    counter = ConnectionCounter(url) if url is not None else None
                    times[f"durable {store}"].append(timed_run(project, env, "--durable"))
                    if counter is not None:
                        counter.stop()
                        connections.append((counter.most, counter.dbos))
            for store in stores:
                url = url_for() if store == "postgresql" else None
                latency[store] = resume_latency(tmp / store, server, project, args.delay, url)
    finally:
        if postgres is not None:
            subprocess.run(stop, capture_output=True, check=False)
            shutil.rmtree(postgres.directory, ignore_errors=True)
    print(json.dumps({"times_s": times, "resume_first_request_s": latency, "pg_connections": connections}))
    print(f"{REQUESTS} requests, {args.delay:g} s each, {args.rounds} rounds (medians; ratio to plain SQLite)")
    base = statistics.median(times["plain sqlite"])
    for name, taken in times.items():
        median = statistics.median(taken)
        store = name.split()[1]
        own = median / statistics.median(times[f"plain {store}"])
        print(f"{name:<19} {median:6.2f} s   ratio {median / base:.3f}   to plain on its store {own:.3f}")
    for store, first in latency.items():
        print(f"runs resume -> first new request ({store}): {first:.2f} s")
    if connections:
        print(
            f"PostgreSQL connections during one durable run: at most {max(c[0] for c in connections)} "
            f"(DBOS's: at most {max(c[1] for c in connections)})"
        )


if __name__ == "__main__":
    main()
