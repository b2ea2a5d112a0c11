"""`code-puppy sessions check` and `code-puppy sessions repair`: a damaged sessions.db is examined, never lost.

`check` runs SQLite's full `integrity_check`, which reads every page (so it is not done on every start: a store of
hundreds of MB takes seconds). `repair` moves the damaged file aside, with its WAL, as
`sessions.db.corrupt-YYYYMMDD-HHMMSS`, and copies into a fresh store every row SQLite can still read, table by table
and row by row, stepping over damaged pages (the `sqlite3` command line's `.recover` was tried and left out: the
Debian 12 build fails on damaged files with "SQL logic error"). A session whose history lost messages keeps those
up to its first gap; one with none left is counted as lost.

A row SQLite reads but code-puppy cannot (a message, or a journaled step of an interrupted turn, that does not parse)
stops the session it belongs to as a damaged page does, so `check` reads every message too, and `repair` leaves such
rows out of the rebuilt store and counts them: they stay in the file moved aside.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from code_puppy.errors import one_line

from .schema import Database, delete_conversation

SALVAGED_TABLES = (
    "entries",
    "conversations",
    "sessions",
    "journals",
    "journal_entries",
    "requests",
    "checkpoints",
    "session_sources",
)
"""What a repair copies, parents before children; the running runs and steers of dead processes are not worth it."""


@dataclass(frozen=True)
class RepairReport:
    moved_to: Path
    sessions: int
    """Sessions whose history reads back whole in the new store."""
    messages: int
    """Messages (conversation entries) copied."""
    shortened_sessions: int
    """Sessions kept up to the last message before a gap: what followed it could not be read."""
    lost_sessions: int
    """Sessions none of whose history could be read: left out."""
    unreadable_messages: int
    """Messages and journaled steps SQLite read but that do not parse: left out (they stay in `moved_to`)."""


INDEX_PROBLEM = "search index: "
"""How `check` begins a problem of the full-text search index (which `rebuild_index` may fix in place)."""


def check(path: Path) -> list[str]:
    """The problems SQLite's `integrity_check`, then the messages that do not parse, then
    FTS5's check of the search index, find in the database at `path`: empty when it is sound."""
    with contextlib.closing(sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)) as db:
        rows = db.execute("PRAGMA integrity_check").fetchall()
        problems = [str(row[0]) for row in rows]
        if problems != ["ok"]:
            return problems
        problems = _unreadable_messages(db)
        indexed = db.execute("SELECT 1 FROM sqlite_schema WHERE name = 'search'").fetchone() is not None
    if problems or not indexed:
        return problems
    # FTS5's check is an INSERT, refused on a read-only connection; it changes nothing.
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        try:
            db.execute("INSERT INTO search (search, rank) VALUES ('integrity-check', 1)")
        except sqlite3.DatabaseError as exc:
            return [f"{INDEX_PROBLEM}{exc}"]
    return []


_MESSAGE_ROWS = (
    ("entries", "a message", "SELECT seq, family, message FROM entries ORDER BY seq"),
    (
        "journal_entries",
        "a step of an interrupted turn",
        "SELECT journal_entries.id, journals.session_id, message FROM journal_entries "
        "LEFT JOIN journals ON journals.id = journal_id ORDER BY journal_entries.id",
    ),
)
"""The rows that hold a message: table, what the row is, and a query of its id, its session and its message."""


def _unreadable_messages(db: sqlite3.Connection) -> list[str]:
    """A line for each message row that does not parse, naming its session: what `Journal.read` and the store refuse
    as damage."""
    from .store import message_adapter

    found: list[str] = []
    for table, what, query in _MESSAGE_ROWS:
        with contextlib.suppress(sqlite3.OperationalError):  # a store of a schema before the table
            for row, session, message in db.execute(query):
                try:
                    message_adapter.validate_json(message)
                except ValueError as exc:
                    found.append(
                        f"{table} row {row} ({what} of session {str(session)[:8]}) does not parse: "
                        f"{one_line(exc, limit=120)}"
                    )
    return found


def rebuild_index(path: Path) -> bool:
    """Rebuild the search index of the database at `path` from the text it indexes; False when it is too damaged for
    that (then `repair` rebuilds the whole store, and every session is indexed again lazily)."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        try:
            db.execute("INSERT INTO search (search) VALUES ('rebuild')")
        except sqlite3.DatabaseError:
            return False
    return True


def repair(path: Path) -> RepairReport:
    """Move the database at `path` aside and rebuild it from what can still be read; the report of what was kept."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    moved = path.with_name(f"{path.name}.corrupt-{stamp}")
    for suffix in ("", "-wal", "-shm"):  # together, so the moved file still finds its log
        if (source := path.with_name(path.name + suffix)).exists():
            source.rename(moved.with_name(moved.name + suffix))
    Database(path).close()  # a fresh store, migrated
    with sqlite3.connect(path, isolation_level=None) as target:  # foreign keys off: rows arrive in any order
        target.execute("BEGIN IMMEDIATE")
        unreadable = _copy_rows(moved, target)
        # The search index is not salvaged: every session is read into it again, lazily (sessions/search.py).
        target.execute("UPDATE sessions SET indexed = 0, turns = 0")
        messages, kept, shortened, lost = _keep_whole_histories(target)
        target.execute("COMMIT")
    return RepairReport(moved, kept, messages, shortened, lost, unreadable)


def _copy_rows(source: Path, target: sqlite3.Connection) -> int:
    """Copy every readable row of the salvaged tables into `target`; messages that do not parse stay behind, and are
    counted."""
    from .store import message_adapter

    unreadable = 0
    with sqlite3.connect(f"{source.absolute().as_uri()}?mode=ro", uri=True) as db:
        for table in SALVAGED_TABLES:
            try:
                columns = [row[1] for row in target.execute(f"PRAGMA table_info({table})")]
                wanted = ", ".join(columns)
                rows = list(_readable_rows(db, table, wanted))
            except sqlite3.DatabaseError:
                continue  # the table itself is gone from the damaged file
            marks = ", ".join("?" for _ in columns)
            for row in rows:
                values = dict(zip(columns, row, strict=True))
                if "message" in values:
                    try:
                        message_adapter.validate_json(str(values["message"]))
                    except ValueError:
                        unreadable += 1
                        continue
                with contextlib.suppress(sqlite3.Error):
                    target.execute(f"INSERT OR IGNORE INTO {table} ({wanted}) VALUES ({marks})", row)
    return unreadable


def _keep_whole_histories(db: sqlite3.Connection) -> tuple[int, int, int, int]:
    """Drop what lost its parent; a history whose end was lost ends at its deepest readable message instead.

    Returns (messages, sessions kept, of which shortened, sessions lost).
    """
    while db.execute(
        "DELETE FROM entries WHERE parent_id IS NOT NULL AND parent_id NOT IN (SELECT id FROM entries)"
    ).rowcount:
        pass  # each pass removes one more level below a lost entry
    db.execute("DELETE FROM journal_entries WHERE journal_id NOT IN (SELECT id FROM journals)")
    cut = db.execute(
        """
        SELECT id, family FROM conversations
        WHERE head_id IS NOT NULL AND head_id NOT IN (SELECT id FROM entries)
        """
    ).fetchall()
    shortened = 0
    for conversation_id, family in cut:
        deepest = db.execute(
            "SELECT id, depth FROM entries WHERE family = ? ORDER BY depth DESC, seq DESC LIMIT 1", (family,)
        ).fetchone()
        if deepest is None:
            continue
        shortened += 1
        db.execute(
            "UPDATE conversations SET head_id = ?1, record = json_set(record, '$.head_id', ?1) WHERE id = ?2",
            (deepest[0], conversation_id),
        )
        db.execute("UPDATE sessions SET message_count = ? WHERE id = ?", (deepest[1], conversation_id))
    lost = [
        session_id
        for (session_id,) in db.execute(
            """
            SELECT sessions.id FROM sessions LEFT JOIN conversations ON conversations.id = sessions.id
            WHERE (conversations.id IS NULL AND sessions.message_count > 0)
                OR (conversations.head_id IS NOT NULL AND conversations.head_id NOT IN (SELECT id FROM entries))
            """
        )
    ]
    for session_id in lost:
        delete_conversation(db, session_id)
    (messages,) = db.execute("SELECT count(*) FROM entries").fetchone()
    (kept,) = db.execute("SELECT count(*) FROM sessions").fetchone()
    return int(messages), int(kept), shortened, len(lost)


def _readable_rows(db: sqlite3.Connection, table: str, columns: str) -> Iterator[tuple[object, ...]]:
    """The rows of `table` in rowid order, stepping over the ones a damaged page makes unreadable."""
    after, skip = -(2**63), 1
    while True:
        try:
            cursor = db.execute(f"SELECT rowid, {columns} FROM {table} WHERE rowid > ? ORDER BY rowid", (after,))
            for rowid, *values in cursor:
                after, skip = rowid, 1
                yield tuple(values)
            return
        except sqlite3.DatabaseError:
            if skip > 2**40:
                return
            after, skip = after + skip, skip * 2
