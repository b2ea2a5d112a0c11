"""The journal of a run in progress: what a process that died mid-turn leaves for the next start to recover.

A run writes its journal step by step (`TurnJournal`, run/turn_journal.py): when it starts, its prompt; after
each model request, the request and the response; as each tool finishes, its result. Every write is one small
append-only transaction without an fsync (a killed process loses nothing the OS has; only a power cut can take
the last steps), so a step costs well under a millisecond. A process's save of a session's conversation deletes
that process's journals of the session in the same transaction, so a run that ends (a success through
`HistoryPersistence`, anything else through its checkpoint) leaves none; a journal found later whose process is gone
belongs to a process that died without either.

A journal's rows are `message` rows, the run's own messages in order (its history from where it started, or the
whole history once the run rewrote it: `snapshot`), and `pending` rows: a prompt or tool result not yet part of
those messages.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from .catalog import title_of
from .runs import THIS_HOST, process_alive, process_started
from .schema import Connection, Database, Location, store_error, timestamp
from .store import message_adapter

__all__ = ("InterruptedTurn", "Journal")


@dataclass(frozen=True)
class InterruptedTurn:
    """A journal: the steps one run completed before its process stopped (or so far, if it still runs)."""

    journal_id: int
    session_id: str
    run_id: str | None
    """The run that journaled; its own messages carry this `run_id`."""
    base_revision: str | None
    """The revision of the session the run continued; the journal continues the session only while it is still that."""
    base_head: str | None
    """The conversation entry the run's history continued from (None: it continued no stored entry, or a stale one)."""
    snapshot: bool
    """Whether `messages` are the whole history (the run rewrote it, or began on a stale one) rather than what follows
    `base_head`."""
    messages: list[ModelMessage]
    """The journaled messages, pending ones (an unanswered prompt, finished tool results) last."""
    host: str
    pid: int
    pid_started: str | None

    @property
    def orphaned(self) -> bool:
        """Whether the process that wrote it is gone (a process of another host is never taken for gone)."""
        return self.host == THIS_HOST and not process_alive(self.pid, self.pid_started)


class Journal:
    """The `journals` and `journal_entries` tables of one sessions database."""

    def __init__(self, database: Database) -> None:
        self._database = database

    @property
    def path(self) -> Location:
        """The database file."""
        return self._database.path

    def begin(
        self, session_id: str, run_id: str | None, prompt: str | None, *, revision: str | None
    ) -> tuple[int, bool]:
        """A run of `session_id`, continuing its history at `revision`, starts in this process: a journal holding its
        prompt. Returns the journal's id, and whether the stored session is still at `revision`: when it is not (another
        process saved it since), the run's history is stale, and the journal must hold the whole of it.

        The session is listed from now on (`SessionCatalog.recent`), under its prompt as title if it has none yet. The
        prompt is kept as text, so that starting a run needs no message serializer (its first build is slow).
        """
        request = ModelRequest(parts=[UserPromptPart(prompt)], run_id=run_id) if prompt else None
        pid = os.getpid()
        now = timestamp(datetime.now(UTC))
        with self._database.write(durable=False) as db:
            stored = db.execute("SELECT head_id, revision FROM conversations WHERE id = ?", (session_id,)).fetchone()
            head, stored_revision = stored if stored is not None else (None, None)
            current = stored_revision == revision
            (journal_id,) = db.execute(
                """
                INSERT INTO journals (session_id, run_id, base_revision, base_head, snapshot, prompt, host, pid,
                    pid_started, started_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id
                """,
                (
                    session_id,
                    run_id,
                    revision,
                    head if current else None,
                    int(not current),
                    prompt,
                    THIS_HOST,
                    pid,
                    process_started(pid),
                    now,
                ),
            ).fetchone()
            db.execute(
                "UPDATE sessions SET updated_at = ?, title = CASE WHEN title = '' THEN ? ELSE title END WHERE id = ?",
                (now, title_of([request] if request else []), session_id),
            )
        return int(journal_id), current

    def append(self, journal_id: int, messages: Sequence[ModelMessage], *, snapshot: bool = False) -> None:
        """Add the run's next messages (pending rows are superseded); `snapshot` replaces every row with them."""
        with self._database.write(durable=False) as db:
            if snapshot:
                db.execute("DELETE FROM journal_entries WHERE journal_id = ?", (journal_id,))
                db.execute("UPDATE journals SET snapshot = 1 WHERE id = ?", (journal_id,))
            else:
                db.execute("DELETE FROM journal_entries WHERE journal_id = ? AND pending = 1", (journal_id,))
            _insert(db, journal_id, messages, pending=False)

    def pending(self, journal_id: int, message: ModelMessage) -> None:
        """A step finished that is not yet part of the run's messages (a tool result)."""
        with self._database.write(durable=False) as db:
            _insert(db, journal_id, [message], pending=True)

    def read(self, session_id: str) -> list[InterruptedTurn]:
        """The session's journals, oldest first.

        Raises:
            StoreError: A journal that does not read back (the store is damaged: `code-puppy sessions repair`).
        """
        try:
            return self._read(session_id)
        except (sqlite3.DatabaseError, ValueError) as exc:  # ValueError: a message row that does not parse
            raise store_error(self._database.path, exc) from None

    def _read(self, session_id: str) -> list[InterruptedTurn]:
        with self._database.read() as db:
            headers = db.execute(
                """
                SELECT id, run_id, base_revision, base_head, snapshot, prompt, host, pid, pid_started FROM journals
                WHERE session_id = ? ORDER BY started_at, id
                """,
                (session_id,),
            ).fetchall()
            rows = {
                journal_id: db.execute(
                    "SELECT pending, message FROM journal_entries WHERE journal_id = ? ORDER BY pending, id",
                    (journal_id,),
                ).fetchall()
                for journal_id, *_ in headers
            }
        turns: list[InterruptedTurn] = []
        for journal_id, run_id, base_revision, base_head, snapshot, prompt, host, pid, pid_started in headers:
            messages = [message_adapter.validate_json(message) for _, message in rows[journal_id]]
            if prompt and not any(not pending for pending, _ in rows[journal_id]):
                # No model request completed: the prompt is all the run's own history there is.
                messages.insert(0, ModelRequest(parts=[UserPromptPart(prompt)], run_id=run_id))
            turns.append(
                InterruptedTurn(
                    journal_id,
                    session_id,
                    run_id,
                    base_revision,
                    base_head,
                    bool(snapshot),
                    messages,
                    host,
                    pid,
                    pid_started,
                )
            )
        return turns

    def claim(self, turn: InterruptedTurn, *, into: str) -> bool:
        """Make an orphaned journal this process's own, as one of session `into`, so that the save that recovers it
        deletes it in the same transaction (a process killed in between leaves it to be recovered again, whole).
        False when another process claimed it first."""
        with self._database.write() as db:
            claimed = db.execute(
                """
                UPDATE journals SET session_id = ?, host = ?, pid = ?, pid_started = ?
                WHERE id = ? AND host = ? AND pid = ? AND coalesce(pid_started, '') = coalesce(?, '')
                """,
                (
                    into,
                    THIS_HOST,
                    os.getpid(),
                    process_started(os.getpid()),
                    turn.journal_id,
                    turn.host,
                    turn.pid,
                    turn.pid_started,
                ),
            ).rowcount
        return claimed == 1

    def move_own(self, session_id: str, into: str) -> None:
        """This process's journals of `session_id` go on as journals of session `into` (its run moved there)."""
        with self._database.write() as db:
            db.execute(
                "UPDATE journals SET session_id = ? WHERE session_id = ? AND host = ? AND pid = ?",
                (into, session_id, THIS_HOST, os.getpid()),
            )


def _insert(db: Connection, journal_id: int, messages: Sequence[ModelMessage], *, pending: bool) -> None:
    db.executemany(
        "INSERT INTO journal_entries (journal_id, pending, message) VALUES (?, ?, ?)",
        [(journal_id, int(pending), message_adapter.dump_json(message).decode()) for message in messages],
    )
