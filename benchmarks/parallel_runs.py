"""Parallel agents on one machine (DESIGN §4, issue 17): N concurrent headless runs on one project and one store.

    python benchmarks/parallel_runs.py [--counts 1,4,16] [--rounds 2] [--postgres]

For each N, N `code-puppy -p` processes start at once in one project, against one fake OpenAI-compatible server that
answers every conversation with the same script: 3 model requests, 2 `read_file` tool calls. Each round uses a fresh
`CODE_PUPPY_HOME` (a fresh sessions.db). Reported per N: throughput (runs finished per second of wall time, from the
first start to the last exit, best round), and the store's write latency, which the store itself measures when
`CODE_PUPPY_STORE_TIMINGS` names a file (sessions/schema.py): p50 and p95 of every committed write transaction of
every run, from asking to write to the commit (waiting for other processes' writes included), the p95 of the time
the write lock was held, and the p95 latency of the synced (fsync'd) writes alone: the saves of sessions.

With `--postgres` the store is PostgreSQL (`CODE_PUPPY_STORAGE_URL`): a local server started as the tests start
theirs (tests/postgres.py: Debian's `postgresql`, an unprivileged user under root), a fresh database per round.

It fails loudly (exit 1) when a run fails, when any run's stderr says `database is locked` (or the store is locked),
or when a session is missing from the store afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE_PUPPY = str(Path(sys.executable).parent / "code-puppy")
SCRIPT = [
    {"tool_calls": [{"name": "read_file", "args": {"path": "README.md"}}]},
    {"tool_calls": [{"name": "read_file", "args": {"path": "notes.txt"}}]},
    {"text": "The project has a README and notes."},
]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def start_server(tmp: Path) -> tuple[subprocess.Popen[str], str]:
    script = tmp / "script.json"
    script.write_text(json.dumps(SCRIPT))
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "fake_llm.py"), "--script", str(script), "--per-conversation"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    return server, server.stdout.readline().strip()


def one_round(
    tmp: Path, base_url: str, count: int, index: int, url: str | None = None
) -> tuple[float, list[tuple[float, float, str]]]:
    """Run `count` headless runs at once; wall seconds, and each store write's latency and lock hold time (ms), and
    whether it was synced (`durable`) or not (`fast`)."""
    home = tmp / f"home-{count}-{index}"
    home.mkdir()
    (home / "config.toml").write_text(f'model = "fake"\n[models.fake]\nname = "fake-model"\nbase_url = "{base_url}"\n')
    project = tmp / "project"
    timings = home / "store-timings.txt"
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith(("OPENAI_", "CODE_PUPPY_"))},
        "CODE_PUPPY_HOME": str(home),
        "CODE_PUPPY_STORE_TIMINGS": str(timings),
        **({"CODE_PUPPY_STORAGE_URL": url} if url else {}),
    }
    started = time.perf_counter()
    runs = [
        subprocess.Popen(
            [CODE_PUPPY, "-p", f"run {n}: what is in this project?", "--output-format", "json"],
            cwd=project,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(count)
    ]
    results = [run.communicate(timeout=300) for run in runs]
    wall = time.perf_counter() - started
    sessions: set[str] = set()
    for run, (stdout, stderr) in zip(runs, results, strict=True):
        if "database is locked" in stderr or "is locked by another process" in stderr:
            sys.exit(f"FAIL: N={count}: a run hit a locked store:\n{stderr}")
        if run.returncode != 0:
            sys.exit(f"FAIL: N={count}: a run exited {run.returncode}:\n{stderr}")
        result = json.loads(stdout)
        if result["usage"]["requests"] != 3:
            sys.exit(f"FAIL: N={count}: a run made {result['usage']['requests']} requests, not 3")
        sessions.add(result["session_id"])
    stored = subprocess.run(
        [CODE_PUPPY, "sessions", "list"], cwd=project, env=env, capture_output=True, text=True, check=True
    ).stdout
    if len(sessions) != count or any(session[:8] not in stored for session in sessions):
        sys.exit(f"FAIL: N={count}: not every run's session is in the store:\n{stored}")
    writes: list[tuple[float, float, str]] = []
    for line in timings.read_text().splitlines():
        total, held, kind = line.split()
        writes.append((float(total), float(held), kind))
    return wall, writes


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--counts", default="1,4,16", help="the numbers of concurrent runs, comma-separated")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per N (throughput: the best)")
    parser.add_argument("--postgres", action="store_true", help="the store on a local PostgreSQL, not SQLite")
    args = parser.parse_args()
    postgres, stop = None, []
    if args.postgres:
        sys.path.insert(0, str(ROOT))
        from tests.postgres import start_server as start_postgres

        postgres, stop = start_postgres()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        project = tmp / "project"
        project.mkdir()
        (project / "README.md").write_text("# demo\n\nA project for the benchmark.\n")
        (project / "notes.txt").write_text("notes\n" * 50)
        server, base_url = start_server(tmp)
        try:
            print(
                f"{'N':>3} {'runs/s':>7} {'runs/min':>8} {'wall s':>7} {'writes':>7} {'synced':>7} {'p50 ms':>7} "
                f"{'p95 ms':>7} {'held p95':>9} {'synced p95':>11}"
            )
            for count in (int(n) for n in args.counts.split(",")):
                walls: list[float] = []
                writes: list[tuple[float, float, str]] = []
                for index in range(args.rounds):
                    url = postgres.create_database() if postgres else None
                    wall, round_writes = one_round(tmp, base_url, count, index, url)
                    walls.append(wall)
                    writes += round_writes
                best = min(walls)
                totals = [total for total, _, _ in writes]
                synced = [total for total, _, kind in writes if kind == "durable"]
                held = percentile([held for _, held, _ in writes], 0.95)
                print(
                    f"{count:>3} {count / best:>7.2f} {60 * count / best:>8.0f} {best:>7.2f} {len(totals):>7} "
                    f"{len(synced):>7} {statistics.median(totals):>7.1f} {percentile(totals, 0.95):>7.1f} {held:>9.1f} "
                    f"{percentile(synced, 0.95):>11.1f}"
                )
        finally:
            server.terminate()
            server.wait()
            if postgres:
                subprocess.run(stop, capture_output=True, check=False)
                shutil.rmtree(postgres.directory, ignore_errors=True)
    print("no run hit `database is locked`; every session was stored")


if __name__ == "__main__":
    main()
