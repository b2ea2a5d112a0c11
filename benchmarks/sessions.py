"""Session budgets (DESIGN §4): a save costs the same at any session length; resuming 10,000 messages adds < 0.5 s.

    python benchmarks/sessions.py [--runs 5]

1. Save cost: `Session.set_message_history` appending one exchange (2 messages) to a session of 100 and of 10,000
   messages, median of 25 saves each.
2. Resume cost: what `-r ID` adds before the first model request, in a fresh process: opening the store and
   loading a 10,000-message session, against opening it and starting a new session.
3. For scale, a whole `code-puppy -r ID -p …` run against the fake server with that session, against a fresh one:
   this also pays for sending 10,000 messages to the model (the OpenAI SDK transforms the request body
   recursively), which no store can avoid; compaction keeps real sessions far below that size.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)

from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.sessions_data import exchange  # noqa: E402  # the same realistic messages the store tests use

CODE_PUPPY = str(Path(sys.executable).parent / "code-puppy")


async def seeded_session(store: SqliteConversationStore, project: Path, messages: int) -> Session:
    session = await Session.start(store, project, model="fake")
    await session.set_message_history([m for i in range(messages // 4) for m in exchange(i)])
    return session


async def save_cost(messages: int) -> float:
    with tempfile.TemporaryDirectory() as tmp, SqliteConversationStore(Path(tmp) / "sessions.db") as store:
        session = await seeded_session(store, Path(tmp), messages)
        times: list[float] = []
        for i in range(25):
            grown = [
                *session.messages,
                ModelRequest(parts=[UserPromptPart(f"more {i}")]),
                ModelResponse(parts=[TextPart("ok")]),
            ]
            started = time.perf_counter()
            await session.set_message_history(grown)
            times.append(time.perf_counter() - started)
        return statistics.median(times)


def headless_time(runs: int, args: list[str], env: dict[str, str], cwd: Path) -> float:
    times: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([CODE_PUPPY, *args], env=env, cwd=cwd, check=True, capture_output=True, stdin=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


OPEN = """
import asyncio, sys, time
from pathlib import Path
started = time.perf_counter()
from code_puppy.sessions.store import open_store
from code_puppy.sessions.session import open_session
async def main():
    with open_store() as store:
        session = await open_session(store, Path.cwd(), model="fake", resume=sys.argv[1] or None)
        assert len(session.messages) >= int(sys.argv[2])
asyncio.run(main())
print(time.perf_counter() - started)
"""


def open_time(runs: int, session_id: str, messages: int, env: dict[str, str], cwd: Path) -> float:
    command = [sys.executable, "-c", OPEN, session_id, str(messages)]
    outputs = [
        subprocess.run(command, env=env, cwd=cwd, check=True, capture_output=True, text=True) for _ in range(runs)
    ]
    return statistics.median(float(output.stdout) for output in outputs)


def resume_cost(runs: int) -> tuple[float, float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        home, project = Path(tmp, "home"), Path(tmp, "project")
        project.mkdir(parents=True)
        home.mkdir()
        script = Path(tmp, "script.json")
        script.write_text(json.dumps([{"text": "ok"}]))
        server = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "fake_llm.py"), "--port", "0", "--script", str(script), "--repeat"],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            base_url = server.stdout.readline().strip()
            # Compaction off: it would (rightly) shrink the 10,000 messages after the first resumed run.
            (home / "config.toml").write_text(
                f'model = "fake"\n[history]\ncompaction = "off"\n[models.fake]\nname = "m"\nbase_url = "{base_url}"\n'
            )
            env = {**os.environ, "CODE_PUPPY_HOME": str(home)}
            fresh = headless_time(runs, ["-p", "hi"], env, project)
            with SqliteConversationStore(home / "sessions.db") as store:
                long_session = asyncio.run(seeded_session(store, project, 10_000))
            resumed = headless_time(runs, ["-r", long_session.id, "-p", "hi"], env, project)
            open_new = open_time(runs, "", 0, env, project)
            open_long = open_time(runs, long_session.id, 10_000, env, project)
        finally:
            server.terminate()
            server.wait()
    return open_new, open_long, fresh, resumed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    small, large = asyncio.run(save_cost(100)), asyncio.run(save_cost(10_000))
    print(f"save +2 messages, session of    100: {small * 1000:6.2f} ms")
    print(f"save +2 messages, session of 10,000: {large * 1000:6.2f} ms")
    open_new, open_long, fresh, resumed = resume_cost(runs)
    print(f"open store + new session (fresh process):         {open_new * 1000:6.0f} ms")
    print(f"open store + resume 10,000 messages:              {open_long * 1000:6.0f} ms")
    print(f"  resume adds {(open_long - open_new) * 1000:.0f} ms (budget 500)")
    print(f"whole headless run, fresh session:                {fresh * 1000:6.0f} ms")
    print(f"whole headless run, 10,000 messages sent:         {resumed * 1000:6.0f} ms")
    print(f"medians; python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
