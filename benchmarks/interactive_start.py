"""Interactive start-up (DESIGN §4: the prompt within 0.3 s), measured in a pseudo-terminal.

    python benchmarks/interactive_start.py [--runs 10] [--project DIR]

Starts the installed `code-puppy` chat in a 120x40 pty (pexpect; pyte plays the terminal and answers its cursor
position requests) and reports, as medians: launch → the prompt is drawn and accepts input, and launch → the model,
session and agent have loaded behind it (the toolbar names the session). For scale on a busy machine it also times
a bare prompt-toolkit prompt, the floor any prompt-toolkit chat starts from. Needs the `test` extra.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pexpect
import pyte

BIN = Path(sys.executable).parent
BARE_PROMPT = """
import asyncio
from prompt_toolkit import PromptSession
async def main():
    try:
        await PromptSession(bottom_toolbar=" · session bare").prompt_async("› ")
    except EOFError:
        pass
asyncio.run(main())
"""


def one_start(home: Path, project: Path, command: list[str]) -> tuple[float, float, float]:
    """Seconds from launch to the prompt, from the prompt to a typed key's echo, and from launch to the agent."""
    screen = pyte.Screen(120, 40)
    stream = pyte.ByteStream(screen)
    started = time.perf_counter()
    child = pexpect.spawn(
        command[0],
        command[1:],
        cwd=str(project),
        env={**os.environ, "CODE_PUPPY_HOME": str(home), "TERM": "xterm-256color"},
        dimensions=(40, 120),
    )
    screen.write_process_input = lambda data: child.send(data.encode())  # pyright: ignore[reportAttributeAccessIssue]
    prompt_at = echo_at = ready_at = None
    try:
        while ready_at is None:
            with contextlib.suppress(pexpect.TIMEOUT):
                stream.feed(child.read_nonblocking(65536, timeout=0.005))
            now = time.perf_counter()
            if time.perf_counter() - started > 30:
                raise RuntimeError("no prompt within 30 s:\n" + "\n".join(screen.display))
            lines = [line.rstrip() for line in screen.display]
            if prompt_at is None and "›" in lines:
                prompt_at = now
                child.send(b"x")  # typed at once, while the agent loads behind the prompt
            if echo_at is None and "› x" in lines:
                echo_at = now
            if echo_at is not None and any(" · session " in line for line in lines):
                ready_at = now
        child.send(b"\x15\x04")
        child.expect(pexpect.EOF, timeout=10)
    finally:
        child.close(force=True)
    assert prompt_at is not None and echo_at is not None
    return prompt_at - started, echo_at - prompt_at, ready_at - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--project", type=Path, help="start the chat in a copy of this project")
    arguments = parser.parse_args()
    runs = arguments.runs
    with tempfile.TemporaryDirectory() as tmp:
        home, project = Path(tmp, "home"), Path(tmp, "project")
        home.mkdir()
        if arguments.project is not None:
            shutil.copytree(arguments.project, project)
        else:
            project.mkdir()
        # Nothing is sent to it: start-up only needs a model that resolves.
        (home / "config.toml").write_text(
            'model = "fake"\n[models.fake]\nname = "fake-model"\nbase_url = "http://127.0.0.1:9/v1"\n'
        )
        chat, bare = [str(BIN / "code-puppy")], [sys.executable, "-c", BARE_PROMPT]
        for command in (chat, bare):
            one_start(home, project, command)  # warm the file cache and the bytecode
        prompts, echoes, readies = zip(*(one_start(home, project, chat) for _ in range(runs)), strict=True)
        floor = [one_start(home, project, bare)[0] for _ in range(runs)]
    print(f"launch → usable prompt        {statistics.median(prompts) * 1000:6.0f} ms   (budget 300 ms)")
    print(f"key typed at once → echoed    {statistics.median(echoes) * 1000:6.0f} ms   (while the agent loads)")
    print(f"launch → agent loaded behind  {statistics.median(readies) * 1000:6.0f} ms")
    print(f"bare prompt-toolkit prompt    {statistics.median(floor) * 1000:6.0f} ms   (the floor)")
    print(f"medians of {runs} runs (min {min(prompts) * 1000:.0f} / max {max(prompts) * 1000:.0f} ms to the prompt)")


if __name__ == "__main__":
    main()
