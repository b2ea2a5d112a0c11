"""`code-puppy storage check` and `storage migrate --from sqlite`: what a store holds, and a SQLite store copied into
the PostgreSQL one.

The copy goes session by session: a session whose id the target has already is left out with everything of it, so a
second copy adds only the sessions made since (idempotent). Messages (`entries`) and conversation records keep their
ids; rows with numeric ids (search text, journals, checkpoints, costs) get the target's. Costs are copied for each
session id that has none in the target yet, including sessions deleted since (their money was spent). Running runs
and steers are left out: they belong to live processes. All of it is one transaction of the target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .schema import Connection, Database

__all__ = ("CopyCounts", "StoreSummary", "copy_store", "summary")

_COUNTED = {
    "sessions": "sessions",
    "messages": "entries",
    "cost rows": "requests",
    "checkpoints": "checkpoints",
    "journals": "journals",
    "running runs": "running_runs",
}
"""What `storage check` counts, by the table it counts."""


@dataclass(frozen=True)
class StoreSummary:
    """What `storage check` reports of a store."""

    migrations: list[str]
    """The migrations applied, in order: the last one is the schema's version."""
    counts: dict[str, int]


def summary(database: Database) -> StoreSummary:
    with database.read() as db:
        migrations = [name for (name,) in db.execute("SELECT name FROM schema_migrations ORDER BY name")]
        counts = {label: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for label, table in _COUNTED.items()}
    return StoreSummary(migrations, counts)


@dataclass(frozen=True)
class CopyCounts:
    """What a copy added, and the sessions it found there already."""

    sessions: int = 0
    messages: int = 0
    cost_rows: int = 0
    checkpoints: int = 0
    journals: int = 0
    already_there: int = 0

    def describe(self) -> str:
        return (
            f"copied {self.sessions} sessions, {self.messages} messages, {self.cost_rows} cost rows, "
            f"{self.checkpoints} checkpoints, {self.journals} journals; "
            f"{self.already_there} sessions were there already"
        )


_SESSION_COLUMNS = (
    "id, project_dir, title, model, created_at, updated_at, input_tokens, output_tokens, requests, message_count, "
    "cache_epoch, history_version, name, archived_at, turns, indexed"
)
_REQUEST_COLUMNS = (
    "session_id, project_dir, run_id, run, kind, model, input_tokens, output_tokens, cache_read_tokens, "
    "cache_write_tokens, cost_usd, saved_usd, created_at"
)
_CHECKPOINT_COLUMNS = "session_id, project_dir, kind, prompt, run_ids, changes, skipped, created_at, rewound_at"
_JOURNAL_COLUMNS = "session_id, run_id, base_revision, base_head, snapshot, prompt, host, pid, pid_started, started_at"


def copy_store(source: Database, target: Database) -> CopyCounts:
    """Copy what `target` lacks of `source` (see the module's docstring), in one transaction of `target`."""
    with source.read() as src:
        sessions = src.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions ORDER BY created_at").fetchall()
        with target.write() as dst:
            present = {row[0] for row in dst.execute("SELECT id FROM sessions")}
            new = [row for row in sessions if row[0] not in present]
            new_ids = [row[0] for row in new]
            messages = _copy_conversations(src, dst, new_ids)
            _insert(dst, "sessions", _SESSION_COLUMNS, new)
            for session_id in new_ids:
                _copy_session_rows(src, dst, session_id)
            cost_rows = _copy_costs(src, dst)
            checkpoints = sum(_count(src, "checkpoints", session_id) for session_id in new_ids)
            journals = sum(_count(src, "journals", session_id) for session_id in new_ids)
    return CopyCounts(len(new), messages, cost_rows, checkpoints, journals, len(sessions) - len(new))


def _copy_conversations(src: Connection, dst: Connection, session_ids: Sequence[str]) -> int:
    """The conversations of these sessions with every entry of their families (forks share them), parents first."""
    added = 0
    for session_id in session_ids:
        row = src.execute(
            "SELECT id, head_id, family, scope, revision, updated_at, record FROM conversations WHERE id = ?",
            (session_id,),
        ).fetchone()
        if row is None:
            continue
        entries = src.execute(
            "SELECT id, parent_id, family, depth, message FROM entries WHERE family = ? ORDER BY seq", (row[2],)
        ).fetchall()
        for entry in entries:
            added += dst.execute(
                "INSERT INTO entries (id, parent_id, family, depth, message) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO NOTHING",
                entry,
            ).rowcount
        dst.execute(
            "INSERT INTO conversations (id, head_id, family, scope, revision, updated_at, record) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
            row,
        )
    return added


def _copy_session_rows(src: Connection, dst: Connection, session_id: str) -> None:
    """A new session's search text, source, checkpoints and journals (with their entries)."""
    rows = src.execute("SELECT session_id, role, text FROM search_text WHERE session_id = ? ORDER BY id", (session_id,))
    _insert(dst, "search_text", "session_id, role, text", rows.fetchall())
    sources = src.execute("SELECT session_id, tool, source_id FROM session_sources WHERE session_id = ?", (session_id,))
    _insert(dst, "session_sources", "session_id, tool, source_id", sources.fetchall())
    checkpoints = src.execute(
        f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE session_id = ? ORDER BY id", (session_id,)
    ).fetchall()
    _insert(dst, "checkpoints", _CHECKPOINT_COLUMNS, checkpoints)
    for journal_id, *journal in src.execute(
        f"SELECT id, {_JOURNAL_COLUMNS} FROM journals WHERE session_id = ? ORDER BY id", (session_id,)
    ).fetchall():
        marks = ", ".join("?" * len(journal))
        (copied_id,) = dst.execute(
            f"INSERT INTO journals ({_JOURNAL_COLUMNS}) VALUES ({marks}) RETURNING id", journal
        ).fetchone()
        entries = src.execute(
            "SELECT pending, message FROM journal_entries WHERE journal_id = ? ORDER BY id", (journal_id,)
        ).fetchall()
        _insert(dst, "journal_entries", "journal_id, pending, message", [(copied_id, *entry) for entry in entries])


def _copy_costs(src: Connection, dst: Connection) -> int:
    """The cost rows of every session id that has none in the target yet."""
    counted = {session_id for (session_id,) in dst.execute("SELECT DISTINCT session_id FROM requests")}
    rows = [
        row
        for row in src.execute(f"SELECT {_REQUEST_COLUMNS} FROM requests ORDER BY id").fetchall()
        if row[0] not in counted
    ]
    _insert(dst, "requests", _REQUEST_COLUMNS, rows)
    return len(rows)


def _count(db: Connection, table: str, session_id: str) -> int:
    return db.execute(f"SELECT count(*) FROM {table} WHERE session_id = ?", (session_id,)).fetchone()[0]


def _insert(db: Connection, table: str, columns: str, rows: Sequence[Sequence[Any]]) -> None:
    if rows:
        marks = ", ".join("?" * len(columns.split(",")))
        db.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", rows)
