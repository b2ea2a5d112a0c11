"""Checkpoint budget (DESIGN §4, issue 13): a checkpoint of a 10,000-file project where a turn changed 3 files costs
under 150 ms after the first one; the shadow repository of a session with 100 turns stays under 2x the size of the
changed content.

    python benchmarks/checkpoints.py [--files 10000] [--turns 100]

A project of `--files` text files (100 folders, ~2 KB each, like source code) is snapshotted once (the first
checkpoint: a full scan that hashes every file), and packed as the end of the first turn would. Then `--turns` turns of
each kind below run through the `Checkpoints` capability as the agent's tool calls do (`tracked`, keyed by the model
response, then `take` at the end of the turn), each turn rewriting 3 different files:

- 3 commands (a shell call can change anything), each in a model response of its own: each call's snapshot before it
  is taken, and each one after it walks the whole project (the worst case);
- 3 file edits (`write_file`/`edit_file`: only their file can change), each in a model response of its own: the
  snapshot after each looks at its file only;
- 3 commands of one model response: the first call's snapshot before is taken, the others start from the one after
  the call before them;
- 1 command that changes 3 files.

A turn's checkpoint cost is the time spent in the capability (the snapshots, the changes, `take`); the tool calls'
own writing is not counted, and neither is the packing after the turn, which runs in the background (its median is
printed). Beside the wall time, the CPU time the turn's checkpoint took (this process and its git processes, user and
system): on a shared machine whose other work makes the wall time wait for a CPU, it is close to what the wall time
would be on an idle one (nothing here waits for the disk; git's stat threads make the idle wall time a little lower
still). Printed: the first snapshot's time, the median and 90th percentile of a turn's cost for each kind, and the
shadow repository's growth against the bytes of content the turns wrote, after 20 turns and after `--turns` of the
first kind, and after all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from code_puppy.checkpoints.capability import Checkpoints
from code_puppy.checkpoints.shadow import ShadowRepo


def source_text(rng: random.Random, size: int) -> str:
    words = ["def", "return", "self", "value", "import", "class", "for", "in", "if", "else", "None", "x", "y"]
    lines: list[str] = []
    while sum(len(line) + 1 for line in lines) < size:
        lines.append("    " + " ".join(rng.choice(words) for _ in range(rng.randint(3, 10))))
    return "\n".join(lines) + "\n"


class Bench:
    def __init__(self, root: Path, shadow: ShadowRepo, paths: list[Path], rng: random.Random) -> None:
        self.root, self.shadow, self.paths, self.rng = root, shadow, paths, rng
        self.checkpoints = Checkpoints(shadow)
        self.written = 0
        self.maintenance: list[float] = []
        self.cpu: list[float] = []

    def write(self, path: Path) -> float:
        """The tool call: rewrite `path`; the time it took (not the checkpoint's)."""
        started = time.perf_counter()
        content = source_text(self.rng, 2048)
        path.write_text(content)
        self.written += len(content.encode())
        return time.perf_counter() - started

    async def turn(self, number: int, kind: str) -> float:
        """One turn of `kind`; the checkpoint's cost."""
        files = self.rng.sample(self.paths, 3)
        cpu = cpu_time()
        started = time.perf_counter()
        tool_time = 0.0
        self.checkpoints.begin_turn()
        if kind in (COMMANDS, EDITS):
            for index, path in enumerate(files):
                edits = (path.relative_to(self.root).as_posix(),) if kind == EDITS else None
                async with self.checkpoints.tracked(response=("run", number, index), edits=edits):
                    tool_time += self.write(path)
        elif kind == ONE_RESPONSE:
            for path in files:
                async with self.checkpoints.tracked(response=("run", number)):
                    tool_time += self.write(path)
        else:
            async with self.checkpoints.tracked(response=("run", number)):
                for path in files:
                    tool_time += self.write(path)
        taken = self.checkpoints.take()
        cost = time.perf_counter() - started - tool_time
        self.cpu.append(cpu_time() - cpu - tool_time)  # the writing is all CPU: no process, a page-cache write
        assert len(taken.changes) == 3 and taken.failure is None, taken
        started = time.perf_counter()
        self.checkpoints.maintain()  # in the background after a real turn: not the turn's cost
        self.maintenance.append(time.perf_counter() - started)
        return cost


def cpu_time() -> float:
    spent = os.times()
    return spent.user + spent.system + spent.children_user + spent.children_system


COMMANDS = "3 commands, 3 responses"
EDITS = "3 file edits, 3 responses"
ONE_RESPONSE = "3 commands, 1 response"
KINDS = (COMMANDS, EDITS, ONE_RESPONSE, "1 command changing 3 files")


async def run(options: argparse.Namespace, say: Callable[[str], None]) -> None:
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
        shadow.maintain()
        packing = time.perf_counter() - started
        say(f"project: {options.files} files; {options.turns} turns of each kind, each rewriting 3 files")
        say(f"first snapshot (full scan): {first * 1000:.0f} ms, then packing after it: {packing * 1000:.0f} ms")
        bench = Bench(root, shadow, paths, rng)
        base = shadow.size()

        def growth(turns: int) -> None:
            grown = shadow.size() - base
            say(
                f"  shadow repository growth after {turns} turns: {grown / 1024:.0f} KiB for "
                f"{bench.written / 1024:.0f} KiB of changed content ({grown / bench.written:.2f}x; budget: under 2x)"
            )

        number = 0
        for kind in KINDS:
            costs: list[float] = []
            bench.cpu = []
            for turn in range(1, options.turns + 1):
                number += 1
                costs.append(await bench.turn(number, kind))
                if kind == KINDS[0] and turn == 20 and options.turns > 20:
                    growth(turn)
            quantiles = statistics.quantiles(costs, n=10)
            say(
                f"checkpoint cost per turn, {kind}: median {statistics.median(costs) * 1000:.1f} ms, "
                f"p90 {quantiles[-1] * 1000:.1f} ms  (budget: under 150 ms); CPU time: median "
                f"{statistics.median(bench.cpu) * 1000:.1f} ms"
            )
            if kind == KINDS[0]:
                growth(options.turns)
        growth(number)
        say(f"packing after a turn (in the background): median {statistics.median(bench.maintenance) * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=100)
    options = parser.parse_args()
    asyncio.run(run(options, lambda line: print(line, flush=True)))


if __name__ == "__main__":
    main()
