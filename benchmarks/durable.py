"""What `--durable` costs (issue 28): a 10-request headless run, plain and durable, side by side; and how long
`code-puppy runs resume` takes to send its first new request after a kill -9.

    python benchmarks/durable.py [--rounds 3] [--delay 0.5] [--storage-url URL]

Each round runs the same script both ways in a fresh `CODE_PUPPY_HOME`, against the in-repo fake OpenAI-compatible
server: 9 `read_file` tool calls, then the answer, each reply after a fixed `--delay` (a model's latency). Reported:
the median wall time of each (process start to exit), and durable / plain (goal: at most 1.15). Then a durable run is
killed (SIGKILL to its process group) while its third request is out, and `runs resume` is timed from its start to
its first request. `--storage-url` passes `CODE_PUPPY_STORAGE_URL` (a PostgreSQL store) to every run; without it
DBOS's system database is the SQLite file in the data directory.
"""

from __future__ import annotations

import argparse
import json
import os
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
    env = environment(tmp / "home-resume", server, storage_url)
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
    parser.add_argument("--storage-url", help="a PostgreSQL url for the store and DBOS (default: SQLite files)")
    args = parser.parse_args()
    plain: list[float] = []
    durable: list[float] = []
    with tempfile.TemporaryDirectory() as directory, FakeLLMServer() as server:
        tmp = Path(directory)
        project = tmp / "project"
        project.mkdir()
        (project / "README.md").write_text("# demo\n")
        for index in range(args.rounds):
            env = environment(tmp / f"home-{index}", server, args.storage_url)
            script(server, args.delay)
            plain.append(timed_run(project, env))
            script(server, args.delay)
            durable.append(timed_run(project, env, "--durable"))
        latency = resume_latency(tmp, server, project, args.delay, args.storage_url)
    where = "PostgreSQL" if args.storage_url else "SQLite"
    p, d = statistics.median(plain), statistics.median(durable)
    print(json.dumps({"plain_s": plain, "durable_s": durable, "store": where}))
    print(f"{REQUESTS} requests, {args.delay:g} s each, {args.rounds} rounds, durable on {where}")
    print(f"plain    {p:6.2f} s (median)")
    print(f"durable  {d:6.2f} s (median)   ratio {d / p:.3f} (goal <= 1.15)")
    print(f"runs resume -> first new request: {latency:.2f} s")


if __name__ == "__main__":
    main()
