"""Sandbox budget (issue 12): running a command inside the sandbox adds at most 30 ms to its start.

    python benchmarks/sandbox.py [--runs 50] [--mechanism bwrap|landlock]

Runs `sh -c true` `--runs` times as the agent's shell would (`/bin/sh -c COMMAND`), once directly and once wrapped
by the project's sandbox (`Sandbox.wrap`, called for each run as the agent's shell does: the real bwrap with every
bind of this machine's defaults, or the Landlock launcher with its rules), and prints the median and the 90th
percentile of each and the median overhead.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from code_puppy.config import SandboxConfig
from code_puppy.sandbox import build_sandbox


def timed(command: Callable[[], str], runs: int) -> list[float]:
    times: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(["/bin/sh", "-c", command()], check=True)
        times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--mechanism", choices=["bwrap", "landlock"], default="bwrap")
    arguments = parser.parse_args()
    runs = arguments.runs
    project, tmp = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())
    try:
        sandbox = build_sandbox(SandboxConfig(mechanism=arguments.mechanism), project, tmp=tmp)
        print(f"mechanism: {sandbox.mechanism}")
        plain = timed(lambda: "true", runs)
        boxed = timed(lambda: sandbox.wrap("true", cwd=project), runs)
    finally:
        shutil.rmtree(project)
        shutil.rmtree(tmp)
    for name, times in (("direct", plain), ("sandboxed", boxed)):
        p90 = statistics.quantiles(times, n=10)[-1]
        print(f"{name:>9}: median {statistics.median(times):.1f} ms, p90 {p90:.1f} ms ({runs} runs)")
    print(f" overhead: {statistics.median(boxed) - statistics.median(plain):.1f} ms (budget 30 ms)")


if __name__ == "__main__":
    main()
