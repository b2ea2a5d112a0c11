"""Session search (issue 17): what indexing adds to a save, how long an older store takes to catch up, queries.

    python benchmarks/session_search.py [--sessions 300] [--exchanges 25]

1. A store of N sessions of M exchanges each (4 messages: prompt, tool call, tool result, answer) is written, then
   made as the schema before `m007_finding_sessions` left it (no index, nothing marked indexed).
2. Catch-up: `catch_up` indexing every session, in all and per session (each is one transaction: the longest a
   concurrent writer waits for the indexer).
3. Query: `search` for a word of one session's 3rd turn, and for a word in every session, median of 20 each.
4. Save cost: appending one exchange to an indexed 100-exchange session, with the FTS5 index and with its trigger
   dropped (the text is still extracted and stored: the difference is what keeping the FTS5 index adds), median of
   25.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pydantic_ai import Conversation
from pydantic_ai.messages import ModelRequest, UserPromptPart

from code_puppy.sessions.schema import Database
from code_puppy.sessions.search import catch_up, search
from code_puppy.sessions.store import SqliteConversationStore

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.sessions_data import exchange  # noqa: E402  # the same realistic messages the store tests use


def build(path: Path, project: Path, sessions: int, exchanges: int) -> None:
    async def write() -> None:
        with SqliteConversationStore(path) as store:
            for s in range(sessions):
                session_id = f"session-{s:05d}"
                store.sessions.create(project, session_id=session_id)
                messages = [message for i in range(exchanges) for message in exchange(s * 1000 + i)]
                messages[8] = ModelRequest(parts=[UserPromptPart(f"third turn of session {s}: the quokka{s} module")])
                await store.save(Conversation(conversation_id=session_id, messages=messages))

    asyncio.run(write())
    with sqlite3.connect(path) as db:  # as the previous schema left it
        db.execute("DELETE FROM search_text")
        db.execute("UPDATE sessions SET indexed = 0, turns = 0")


def timed(action: object, runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()  # type: ignore[operator]
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def save_cost(directory: Path, project: Path, *, indexed: bool) -> float:
    async def measure() -> float:
        path = directory / f"save-{indexed}.db"
        with SqliteConversationStore(path) as store:
            if not indexed:
                with store.database.write() as db:
                    db.execute("DROP TRIGGER search_text_inserted")
                    db.execute("DROP TABLE search_text")
                    db.execute("CREATE TABLE search_text (id INTEGER PRIMARY KEY, session_id, role, text)")
            store.sessions.create(project, session_id="s")
            conversation = Conversation(conversation_id="s", messages=[m for i in range(100) for m in exchange(i)])
            await store.save(conversation)
            samples = []
            for i in range(25):
                conversation.messages.extend(exchange(100 + i))
                started = time.perf_counter()
                await store.save(conversation)
                samples.append(time.perf_counter() - started)
            return statistics.median(samples)

    return asyncio.run(measure())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--exchanges", type=int, default=25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        project = directory / "project"
        project.mkdir()
        path = directory / "sessions.db"
        build(path, project, args.sessions, args.exchanges)
        size = path.stat().st_size / 1e6
        print(f"store: {args.sessions} sessions × {args.exchanges} exchanges, {size:.1f} MB before indexing")
        database = Database(path)
        started = time.perf_counter()
        indexed = catch_up(database)
        total = time.perf_counter() - started
        print(f"catch-up: {indexed} sessions in {total:.2f} s, {total / max(indexed, 1) * 1000:.1f} ms per session")
        one = timed(lambda: search(database, f"quokka{args.sessions // 2}", project_dir=project), 20)
        every = timed(lambda: search(database, "fix", project_dir=project), 20)
        print(f"query, one session matches: {one * 1000:.1f} ms; every session matches: {every * 1000:.1f} ms")
        database.close()
        with_index = save_cost(directory, project, indexed=True)
        without = save_cost(directory, project, indexed=False)
        print(
            f"save of one exchange: {with_index * 1000:.2f} ms indexed, {without * 1000:.2f} ms without the FTS5 index"
        )


if __name__ == "__main__":
    main()
