"""`code-puppy acp` answers `initialize` within 1.3x the time Python needs to `import acp` (issue 14, which replaces
DESIGN §4's 300 ms: the SDK's schema alone takes longer to import), as medians over interleaved subprocess runs.

    python benchmarks/acp.py [--runs 10]

The time to `initialize` runs from starting the process until its answer line arrives on stdout; the baseline is
`python -c "import acp"` from start to exit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}) + "\n"


def import_acp() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import acp"], check=True)
    return time.perf_counter() - started


def initialize(cwd: Path) -> float:
    """From start to the `initialize` answer; stdin then closes and the process ends."""
    started = time.perf_counter()
    with subprocess.Popen(
        [str(BIN / "code-puppy"), "acp"],
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(INITIALIZE)
        process.stdin.flush()
        answer = json.loads(process.stdout.readline())
        elapsed = time.perf_counter() - started
        assert answer["result"]["protocolVersion"] == 1, answer
        process.stdin.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        pairs = [(import_acp(), initialize(Path(tmp))) for _ in range(runs)]  # interleaved: the same load for both
    baseline, answered = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
    base, init = statistics.median(baseline), statistics.median(answered)
    print(f"python -c 'import acp'          {base * 1000:7.0f} ms")
    print(f"code-puppy acp -> initialize    {init * 1000:7.0f} ms   ratio {init / base:.2f} (budget 1.30)")


if __name__ == "__main__":
    main()
