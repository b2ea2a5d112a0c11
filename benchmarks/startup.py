"""Start-up and headless-run budgets (DESIGN §4), measured as medians over repeated subprocess runs.

    python benchmarks/startup.py [--runs 10] [--project DIR]

Prints `--version`/`--help` times, the time Python needs to import pydantic-ai and the OpenAI client, and a
headless run of 3 model requests with 2 tool calls against the fake server, with its ratio to that import and its
peak memory (max RSS of the child). `--project DIR` runs it in a copy of DIR (e.g. tests/fixtures/claude_project, to
measure what reading agents, commands and skills adds).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SCRIPT = [
    {"tool_calls": [{"name": "read_file", "args": {"path": "README.md"}}]},
    {"tool_calls": [{"name": "grep", "args": {"pattern": "demo"}}]},
    {"text": "The project is a demo."},
]


def timed(command: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, int]:
    """Wall time of one run and the child's peak RSS in KiB."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    subprocess.run(
        command,
        env=env,
        cwd=cwd,
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    elapsed = time.perf_counter() - started
    return elapsed, max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, before)


def median_of(runs: int, command: list[str], **kwargs: object) -> tuple[float, int]:
    times, peaks = zip(*(timed(command, **kwargs) for _ in range(runs)), strict=True)  # type: ignore[arg-type]
    return statistics.median(times), max(peaks)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--project", type=Path, help="run the headless run in a copy of this project")
    arguments = parser.parse_args()
    runs = arguments.runs
    code_puppy = str(BIN / "code-puppy")

    version, _ = median_of(runs, [code_puppy, "--version"])
    help_, _ = median_of(runs, [code_puppy, "--help"])
    baseline, _ = median_of(
        runs, [sys.executable, "-c", "import pydantic_ai; from pydantic_ai.models.openai import OpenAIChatModel"]
    )

    with tempfile.TemporaryDirectory() as tmp:
        home, project = Path(tmp, "home"), Path(tmp, "project")
        home.mkdir()
        if arguments.project is not None:
            shutil.copytree(arguments.project, project)
        else:
            project.mkdir()
        (project / "README.md").write_text("# demo project\n")
        script = Path(tmp, "script.json")
        script.write_text(json.dumps(SCRIPT))
        server = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "fake_llm.py"), "--port", "0", "--script", str(script), "--repeat"],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            base_url = server.stdout.readline().strip()
            (home / "config.toml").write_text(
                f'model = "fake"\n[models.fake]\nname = "fake-model"\nbase_url = "{base_url}"\n'
            )
            env = {**os.environ, "CODE_PUPPY_HOME": str(home)}
            run, peak = median_of(runs, [code_puppy, "-p", "what is this?"], env=env, cwd=project)
        finally:
            server.terminate()
            server.wait()

    print(f"code-puppy --version               {version * 1000:7.0f} ms   (budget 150 ms)")
    print(f"code-puppy --help                  {help_ * 1000:7.0f} ms   (budget 150 ms)")
    print(f"import pydantic_ai + OpenAI model  {baseline * 1000:7.0f} ms")
    print(f"headless run, 3 requests, 2 tools  {run * 1000:7.0f} ms   = {run / baseline:.2f}x import (budget 1.3x)")
    print(f"headless run peak RSS              {peak / 1024:7.0f} MiB  (budget 120 MiB)")
    print(f"medians of {runs} runs; python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
