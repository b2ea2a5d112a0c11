"""Checkpoint budget (DESIGN §4, issue 13): a checkpoint of a 10,000-file project where a turn changed 3 files costs
under 150 ms after the first one; the shadow repository of a session with 100 turns stays under 2x the size of the
changed content.

    python benchmarks/checkpoints.py [--files 10000] [--turns 100]

A project of `--files` text files (100 folders, ~2 KB each, like source code) is snapshotted once (the first
checkpoint: a full scan that hashes every file). Then each turn makes three tool calls that each rewrite one file,
with the snapshots the `Checkpoints` capability takes around every call (before, after, and the diff between them),
and the turn's checkpoint cost is the sum. Printed: the first snapshot's time, the median and 90th percentile of a
turn's cost and of one snapshot's, and the shadow repository's growth over the turns against the bytes of content
the turns wrote.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from code_puppy.checkpoints.shadow import ShadowRepo


def source_text(rng: random.Random, size: int) -> str:
    words = ["def", "return", "self", "value", "import", "class", "for", "in", "if", "else", "None", "x", "y"]
    lines: list[str] = []
    while sum(len(line) + 1 for line in lines) < size:
        lines.append("    " + " ".join(rng.choice(words) for _ in range(rng.randint(3, 10))))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=100)
    options = parser.parse_args()
    rng = random.Random(13)
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary) / "project"
        paths: list[Path] = []
        for index in range(options.files):
            path = root / f"pkg{index % 100:03d}" / f"module{index:05d}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source_text(rng, 2048))
            paths.append(path)
        shadow = ShadowRepo.open(root, Path(temporary) / "data", max_file_mb=10)
        started = time.perf_counter()
        shadow.snapshot()
        first = time.perf_counter() - started
        started = time.perf_counter()
        shadow.maintain()  # packs the first snapshot's objects, as the end of the first turn would
        packing = time.perf_counter() - started
        size_after_first = shadow.size()
        turns: list[float] = []
        snapshots: list[float] = []
        written = 0
        for _ in range(options.turns):
            cost = 0.0
            for path in rng.sample(paths, 3):
                started = time.perf_counter()
                before = shadow.snapshot()
                snapshots.append(time.perf_counter() - started)
                cost += snapshots[-1]
                content = source_text(rng, 2048)
                path.write_text(content)  # the tool call
                written += len(content.encode())
                started = time.perf_counter()
                after = shadow.snapshot()
                snapshots.append(time.perf_counter() - started)
                assert len(shadow.changes(before, after)) == 1
                cost += time.perf_counter() - started
            turns.append(cost)
            shadow.maintain()  # what the runner does after a turn's checkpoint (not in the turn's cost)
        growth = shadow.size() - size_after_first

    def ms(values: list[float]) -> str:
        quantiles = statistics.quantiles(values, n=10)
        return f"median {statistics.median(values) * 1000:.1f} ms, p90 {quantiles[-1] * 1000:.1f} ms"

    print(f"project: {options.files} files; {options.turns} turns of 3 tool calls, each rewriting one file")
    print(f"first snapshot (full scan): {first * 1000:.0f} ms, then packing its objects: {packing * 1000:.0f} ms")
    print(f"checkpoint cost per turn (6 snapshots + 3 diffs): {ms(turns)}  (budget: under 150 ms)")
    print(f"one snapshot: {ms(snapshots)}")
    print(
        f"shadow repository growth: {growth / 1024:.0f} KiB for {written / 1024:.0f} KiB of changed content "
        f"({growth / written:.2f}x; budget: under 2x)"
    )


if __name__ == "__main__":
    main()
