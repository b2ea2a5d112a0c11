"""`code-puppy runs show ID --follow`: a durable run's events as `-p --output-format stream-json` writes them, read
from the store on any machine that reaches it, until the run ends.

The source is what the run already writes, polled: its turn journal (`sessions/journal.py`: each finished model
response and tool result, in the sessions store, SQLite or PostgreSQL) while it runs, and its saved session once it
ended (the save deletes the journal). So events come a message at a time, not a token at a time: a response's text is
one `text_delta` of the whole text. Each event is printed once, keyed by its tool call id or its response, so a run
taken over by another worker (a new journal replaying the same messages) shows no event twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any, TextIO

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart

from code_puppy.durable.runs import DurableRun, find_run

POLL_SECONDS = 0.5
"""How often the store is read while the run goes on."""
ENDED = ("succeeded", "failed", "cancelled")


def follow(run_id: str, out: TextIO) -> int:
    """Print the run's events as JSON lines until it ends; its exit code (an interrupted `-p` run's: 130)."""
    found = find_run(run_id)
    printer = _Printer(out)
    while True:
        ended = found.status in ENDED or (found.status == "interrupted" and found.inputs.get("kind") != "fleet")
        session_id, messages = _messages(found, ended=ended)
        printer.session(session_id)
        printer.messages(m for m in messages if (m.run_id or "").startswith(found.id))
        if ended:
            return printer.result(found)
        time.sleep(POLL_SECONDS)
        found = find_run(found.id)


def _messages(found: DurableRun, *, ended: bool) -> tuple[str | None, list[ModelMessage]]:
    """The run's session and its messages so far: its saved session once it ended, else its journals."""
    from code_puppy.paths import store_exists, store_location

    if not store_exists():
        return None, []
    from code_puppy.sessions.schema import Database

    database = Database(store_location(), readonly=True)
    try:
        if ended and found.session_id is not None:
            return found.session_id, _saved(database, found.session_id)
        return _journaled(database, found.id)
    finally:
        database.close()


def _saved(database: Any, session_id: str) -> list[ModelMessage]:
    from code_puppy.sessions.store import message_adapter

    with database.read() as db:
        row = db.execute("SELECT head_id FROM conversations WHERE id = ?", (session_id,)).fetchone()
        if row is None or row[0] is None:
            return []
        rows = db.execute(
            """
            WITH RECURSIVE chain (n, id, parent_id, message) AS (
                SELECT 1, id, parent_id, message FROM entries WHERE id = ?
                UNION ALL
                SELECT chain.n + 1, entries.id, entries.parent_id, entries.message
                FROM chain JOIN entries ON entries.id = chain.parent_id
            )
            SELECT message FROM chain ORDER BY n DESC
            """,
            (row[0],),
        ).fetchall()
    return [message_adapter.validate_json(message) for (message,) in rows]


def _journaled(database: Any, run_id: str) -> tuple[str | None, list[ModelMessage]]:
    from code_puppy.sessions.journal import Journal

    pattern = run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    with database.read() as db:
        sessions = [
            session_id
            for (session_id,) in db.execute(
                "SELECT DISTINCT session_id FROM journals WHERE run_id LIKE ? ESCAPE '\\'", (pattern,)
            ).fetchall()
        ]
    journal = Journal(database)
    messages: list[ModelMessage] = []
    for session_id in sessions:
        for turn in journal.read(session_id):
            if (turn.run_id or "").startswith(run_id):
                messages.extend(turn.messages)
    return (sessions[-1] if sessions else None), messages


class _Printer:
    """Each event once, in `stream-json`'s shapes (`headless/sinks.py` `StreamJsonSink`)."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._seen: set[tuple[str, ...]] = set()

    def _emit(self, key: tuple[str, ...], **fields: Any) -> None:
        if key in self._seen:
            return
        self._seen.add(key)
        self._out.write(json.dumps(fields) + "\n")
        self._out.flush()

    def session(self, session_id: str | None) -> None:
        if session_id is not None and not any(key[0] == "session" for key in self._seen):
            self._emit(("session",), type="session", session_id=session_id)

    def messages(self, messages: Iterable[ModelMessage]) -> None:
        for message in messages:
            if isinstance(message, ModelResponse):
                stamp = message.timestamp.isoformat()
                for index, part in enumerate(message.parts):
                    if isinstance(part, TextPart) and part.content:
                        self._emit(("text", stamp, str(index)), type="text_delta", run=0, text=part.content)
                    elif isinstance(part, ToolCallPart):
                        self._emit(
                            ("call", part.tool_call_id),
                            type="tool_call",
                            run=0,
                            tool_name=part.tool_name,
                            tool_call_id=part.tool_call_id,
                            args=part.args_as_dict(),
                        )
            elif isinstance(message, ModelRequest):  # pyright: ignore[reportUnnecessaryIsInstance]
                for part in message.parts:
                    if isinstance(part, ToolReturnPart):
                        self._emit(
                            ("result", part.tool_call_id),
                            type="tool_result",
                            run=0,
                            tool_name=part.tool_name,
                            tool_call_id=part.tool_call_id,
                            outcome=getattr(part, "outcome", "success"),
                            content=part.model_response_str(),
                        )

    def result(self, found: DurableRun) -> int:
        result = found.result
        status = result.get("status") or ("interrupted" if found.status in ("cancelled", "interrupted") else "error")
        code = result.get("exit_code")
        code = code if isinstance(code, int) else (130 if status == "interrupted" else 1)
        self._emit(
            ("result",),
            type="result",
            run_id=found.id,
            session_id=found.session_id,
            output=found.output,
            status=status,
            error=found.error,
            cost_usd=result.get("cost_usd"),
            exit_code=code,
        )
        return code
