"""`code-puppy runs show ID --follow`: a durable run's events as `-p --output-format stream-json` writes them, read
from the store on any machine that reaches it, until the run ends.

The source is what the run already writes, polled: its turn journal (`sessions/journal.py`: each finished model
response and tool result, in the sessions store, SQLite or PostgreSQL) while it runs, and its saved session once it
ended (the save deletes the journal); and its requests in the costs book (`sessions/costs.py`: each model request's
kind, model, tokens and price, recorded as it returned), which make its `request` events and the `result`'s cost. So
events come a message at a time, not a token at a time: a response's text is one `text_delta` of the whole text, its
thinking one `thinking_delta`. The shapes are `run/stream_events.py`'s, the ones headless writes. Each event is printed
once, keyed by its response, tool call id or request record, so a run taken over by another worker (a new journal
replaying the same messages) shows no event twice.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, TextIO, cast, get_args

from pydantic_ai.messages import (
    BaseToolReturnPart,
    ModelMessage,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
)

from code_puppy.durable.runs import DurableRun, find_run
from code_puppy.run.stream_events import (
    RunOutcome,
    Status,
    Usage,
    request_event,
    result_event,
    session_event,
    text_delta,
    thinking_delta,
    tool_call_event,
    tool_result_event,
)
from code_puppy.sessions.costs import CostTotals, RequestCost

POLL_SECONDS = 0.5
"""How often the store is read while the run goes on."""
ENDED = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class _Stored:
    """What the run has stored so far."""

    session_id: str | None
    messages: list[ModelMessage]
    """Its messages (those of its agent runs), in order."""
    requests: list[tuple[int, RequestCost]]
    """Its model requests' records, oldest first, with their row ids."""


def follow(run_id: str, out: TextIO) -> int:
    """Print the run's events as JSON lines until it ends; its exit code (an interrupted `-p` run's: 130)."""
    found = find_run(run_id)
    printer = _Printer(out)
    while True:
        ended = found.status in ENDED or (found.status == "interrupted" and found.inputs.get("kind") != "fleet")
        stored = _stored(found, ended=ended)
        printer.session(stored.session_id)
        printer.messages(stored)
        if ended:
            return printer.result(found, stored)
        time.sleep(POLL_SECONDS)
        found = find_run(found.id)


def _stored(found: DurableRun, *, ended: bool) -> _Stored:
    """The run's session, messages and request records so far: its saved session once it ended, else its journals."""
    from code_puppy.paths import store_exists, store_location

    if not store_exists():
        return _Stored(None, [], [])
    from code_puppy.sessions.costs import CostBook
    from code_puppy.sessions.schema import Database

    database = Database(store_location(), readonly=True)
    try:
        if ended and found.session_id is not None:
            session_id, messages = found.session_id, _saved(database, found.session_id)
        else:
            session_id, messages = _journaled(database, found.id)
        # Read after the messages: a request is recorded before its response is journaled, so each response found
        # has its record here.
        requests = CostBook(database).of_durable_run(found.id)
    finally:
        database.close()
    return _Stored(session_id, [m for m in messages if (m.run_id or "").startswith(found.id)], requests)


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


def journaling_session(run_id: str) -> str | None:
    """The session durable run `run_id` journals its turn in while it runs (None before its first step, or once the
    save deleted the journal)."""
    from code_puppy.paths import store_exists, store_location

    if not store_exists():
        return None
    from code_puppy.sessions.schema import Database

    database = Database(store_location(), readonly=True)
    try:
        sessions = _journal_sessions(database, run_id)
    finally:
        database.close()
    return sessions[-1] if sessions else None


def _journal_sessions(database: Any, run_id: str) -> list[str]:
    pattern = run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    with database.read() as db:
        return [
            session_id
            for (session_id,) in db.execute(
                "SELECT DISTINCT session_id FROM journals WHERE run_id LIKE ? ESCAPE '\\'", (pattern,)
            ).fetchall()
        ]


def _journaled(database: Any, run_id: str) -> tuple[str | None, list[ModelMessage]]:
    from code_puppy.sessions.journal import Journal

    sessions = _journal_sessions(database, run_id)
    journal = Journal(database)
    messages: list[ModelMessage] = []
    for session_id in sessions:
        for turn in journal.read(session_id):
            if (turn.run_id or "").startswith(run_id):
                messages.extend(turn.messages)
    return (sessions[-1] if sessions else None), messages


class _Printer:
    """Each event once, in `stream-json`'s order: a response's thinking and text, its `request`, its tool calls, then
    their results."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._seen: set[tuple[Any, ...]] = set()
        self._runs: dict[str, int] = {}
        """The run index (`run`: 0 for the prompt's run, then one per follow-up) of each agent run id, as they come."""

    def _emit(self, key: tuple[Any, ...], event: dict[str, Any]) -> None:
        if key not in self._seen:
            self._seen.add(key)
            self._write(event)

    def _write(self, event: dict[str, Any]) -> None:
        self._out.write(json.dumps(event, default=str) + "\n")
        self._out.flush()

    def session(self, session_id: str | None) -> None:
        if session_id is not None:
            self._emit(("session",), session_event(session_id))

    def messages(self, stored: _Stored) -> None:
        for message in stored.messages:
            run = self._runs.setdefault(message.run_id or "", len(self._runs))
            if isinstance(message, ModelResponse):
                self._response(message, run, stored.requests)
                continue
            for part in message.parts:
                if isinstance(part, BaseToolReturnPart):
                    self._emit(("result", part.tool_call_id), tool_result_event(run, part))

    def _response(self, response: ModelResponse, run: int, requests: list[tuple[int, RequestCost]]) -> None:
        # Keyed whole: a journal holds whole messages, and a run taken over journals the same ones again.
        key = _key(response)
        if key in self._seen:
            return
        self._seen.add(key)
        for part in response.parts:
            if isinstance(part, ThinkingPart) and part.content:
                self._write(thinking_delta(run, part.content))
            elif isinstance(part, TextPart) and part.content:
                self._write(text_delta(run, part.content))
        self._request(response, run, requests)
        for part in response.parts:
            if isinstance(part, ToolCallPart):
                self._emit(("call", part.tool_call_id), tool_call_event(run, part))

    def _request(self, response: ModelResponse, run: int, requests: list[tuple[int, RequestCost]]) -> None:
        """The response's request, from its record: the first one of its agent run not printed yet, after the records
        before it that no response stands for (a delegated run's, a compaction summary's)."""
        for index, (row, cost) in enumerate(requests):
            if cost.run_id == response.run_id and ("request", row) not in self._seen:
                for earlier, other in requests[: index + 1]:
                    self._emit(("request", earlier), request_event(other))
                return
        # No record (it could not be stored): what the response itself says it used, unpriced.
        usage = response.usage
        unrecorded = RequestCost(
            session_id="",
            kind="main" if run == 0 else "continuation",
            model=response.model_name or "",
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            run=run,
        )
        self._write(request_event(unrecorded))

    def result(self, found: DurableRun, stored: _Stored) -> int:
        """The rest of the requests, then the `result` with the keys of headless's; the run's exit code."""
        for row, cost in stored.requests:
            self._emit(("request", row), request_event(cost))
        recorded = found.result
        status = recorded.get("status")
        if status not in get_args(Status):
            status = "interrupted" if found.status in ("cancelled", "interrupted") else "error"
        code = recorded.get("exit_code")
        code = code if isinstance(code, int) else (130 if status == "interrupted" else 1)
        # Once each: a run taken over before it saved a session has journaled its messages twice.
        responses = list({_key(m): m for m in stored.messages if isinstance(m, ModelResponse)}.values())
        results = {
            part.tool_call_id: part
            for message in stored.messages
            for part in message.parts
            if isinstance(part, BaseToolReturnPart)
        }
        spent = sum((CostTotals.of(cost) for _, cost in stored.requests), CostTotals())
        outcome = RunOutcome(
            session_id=found.session_id,
            output=found.output,
            status=cast(Status, status),
            usage=Usage(
                sum(r.usage.input_tokens for r in responses),
                sum(r.usage.output_tokens for r in responses),
                len(responses),
                sum(r.usage.cache_read_tokens for r in responses),
                sum(r.usage.cache_write_tokens for r in responses),
            ),
            duration_ms=found.duration_ms,
            error=found.error,
            cost_usd=spent.cost_usd,
            cost_complete=spent.complete,
            denied=sum(1 for part in results.values() if part.outcome == "denied"),
        )
        self._emit(("result",), result_event(outcome))
        return code


def _key(response: ModelResponse) -> tuple[str, ...]:
    return ("response", response.run_id or "", response.timestamp.isoformat())
