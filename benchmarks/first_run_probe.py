"""How long the first run's look for models takes (`code_puppy.model_choices.find_choices`): the probe of the four
usual local ports, when nothing listens (refused at once) and when every port accepts and never answers (bounded by
`PROBE_SECONDS`, the probes run at once), plus the providers' model lists for a key; medians over runs.

    python benchmarks/first_run_probe.py [--runs 10]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time
from contextlib import ExitStack

from code_puppy.config import Settings
from code_puppy.model_choices import PROBE_SECONDS, find_choices


def timed(environ: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        find_choices(Settings(), environ)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    find_choices(Settings(), {"ANTHROPIC_API_KEY": "x", "CODE_PUPPY_LOCAL_PORTS": ""})  # imports and tables, once
    with ExitStack() as stack:
        closed = []
        silent = []
        for _ in range(4):
            refusing = stack.enter_context(socket.socket())
            refusing.bind(("127.0.0.1", 0))  # bound, not listening: refused
            closed.append(str(refusing.getsockname()[1]))
            listening = stack.enter_context(socket.socket())
            listening.bind(("127.0.0.1", 0))
            listening.listen()  # accepts, never answers
            silent.append(str(listening.getsockname()[1]))
        cases = {
            "4 ports, nothing listening": {"CODE_PUPPY_LOCAL_PORTS": ",".join(closed)},
            "4 ports, each silent": {"CODE_PUPPY_LOCAL_PORTS": ",".join(silent)},
            "no ports, 3 provider keys": {
                "CODE_PUPPY_LOCAL_PORTS": "",
                "ANTHROPIC_API_KEY": "x",
                "OPENAI_API_KEY": "x",
                "GEMINI_API_KEY": "x",
            },
        }
        for name, environ in cases.items():
            print(f"{name:<28} {timed(environ, runs) * 1000:7.1f} ms  (probe timeout {PROBE_SECONDS * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
