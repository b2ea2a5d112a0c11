"""The schema of the sessions store: named migrations, applied in order and recorded in `schema_migrations`.

One schema for both backends: each migration is written in SQLite's words, which `PostgresConnection` translates
(parameters, row ids, `REAL`); the full-text index is the one part that differs (FTS5 on SQLite, a `tsvector`
column with a GIN index on PostgreSQL).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import Any, Protocol

__all__ = ("MIGRATIONS", "Connection", "Cursor", "Migration", "is_postgres")


class Cursor(Protocol):
    """What the store modules read from a statement: a `sqlite3.Cursor`, or its PostgreSQL stand-in."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """A `sqlite3.Connection`, or a `PostgresConnection` (sessions/postgres.py) speaking the same SQL."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Any, /) -> Cursor: ...


def is_postgres(db: Connection) -> bool:
    """Whether `db` is the PostgreSQL store, for the few statements that differ."""
    return not isinstance(db, sqlite3.Connection)


Migration = Callable[[Connection], None]
"""A schema change, recorded in `schema_migrations` under its function's name once applied."""


def m001_conversations(db: Connection) -> None:
    # `family` groups a conversation with its forks: the only records whose histories can reach its entries.
    db.execute(
        """
        CREATE TABLE entries (
            seq INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            parent_id TEXT REFERENCES entries (id),
            family TEXT NOT NULL,
            depth INTEGER NOT NULL,
            message TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX entries_parent ON entries (parent_id)")
    db.execute("CREATE INDEX entries_family ON entries (family)")
    db.execute(
        """
        CREATE TABLE conversations (
            id TEXT PRIMARY KEY,
            head_id TEXT REFERENCES entries (id),
            family TEXT NOT NULL,
            scope TEXT,
            revision TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            record TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX conversations_updated ON conversations (updated_at)")
    db.execute("CREATE INDEX conversations_family ON conversations (family)")


def m002_sessions(db: Connection) -> None:
    db.execute(
        """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            project_dir TEXT NOT NULL,
            title TEXT NOT NULL DEFAULT '',
            model TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            requests INTEGER NOT NULL DEFAULT 0,
            message_count INTEGER NOT NULL DEFAULT 0,
            cache_epoch INTEGER NOT NULL DEFAULT 0,
            history_version INTEGER NOT NULL DEFAULT 0
        )
        """
    )
    db.execute("CREATE INDEX sessions_project ON sessions (project_dir, updated_at)")


def m003_running_runs(db: Connection) -> None:
    # `running_runs`: the sessions a live process is running a turn of, so `code-puppy steer` finds them; a row
    # whose pid is dead (or reused: `pid_started` differs) is stale. `steers`: text for a running run, claimed by
    # the running process's poller; `status` is pending, then delivered or rejected.
    db.execute(
        """
        CREATE TABLE running_runs (
            session_id TEXT PRIMARY KEY,
            pid INTEGER NOT NULL,
            pid_started TEXT,
            project_dir TEXT NOT NULL,
            started_at TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX running_runs_project ON running_runs (project_dir, started_at)")
    db.execute(
        """
        CREATE TABLE steers (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            text TEXT NOT NULL,
            created_at TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending'
        )
        """
    )
    db.execute("CREATE INDEX steers_pending ON steers (session_id, status)")


def m004_journal(db: Connection) -> None:
    # The steps of runs in progress (sessions/journal.py): one journal per run, keyed by the process running it, so
    # that two processes running one session never touch each other's; its rows in order.
    db.execute(
        """
        CREATE TABLE journals (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            run_id TEXT,
            base_revision TEXT,
            base_head TEXT,
            snapshot INTEGER NOT NULL DEFAULT 0,
            prompt TEXT,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            pid_started TEXT,
            started_at TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX journals_session ON journals (session_id, pid)")
    db.execute(
        """
        CREATE TABLE journal_entries (
            id INTEGER PRIMARY KEY,
            journal_id INTEGER NOT NULL REFERENCES journals (id) ON DELETE CASCADE,
            pending INTEGER NOT NULL,
            message TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX journal_entries_journal ON journal_entries (journal_id, pending, id)")


def m005_request_costs(db: Connection) -> None:
    # One row per model request code-puppy made (sessions/costs.py): main, follow-up and delegated runs, compaction
    # summaries. `cost_usd` is NULL when the request could not be priced. Rows outlive their session (the money was
    # spent: `code-puppy usage` and the daily budget still count it), so `project_dir` is kept here too.
    db.execute(
        """
        CREATE TABLE requests (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            project_dir TEXT,
            run_id TEXT,
            run INTEGER NOT NULL DEFAULT 0,
            kind TEXT NOT NULL,
            model TEXT NOT NULL,
            input_tokens INTEGER NOT NULL,
            output_tokens INTEGER NOT NULL,
            cache_read_tokens INTEGER NOT NULL,
            cache_write_tokens INTEGER NOT NULL,
            cost_usd REAL,
            created_at TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX requests_session ON requests (session_id)")
    db.execute("CREATE INDEX requests_created ON requests (created_at)")


def m006_checkpoints(db: Connection) -> None:
    # The turns that changed the project's files, and the rewinds (sessions/checkpoints.py): `changes` is JSON,
    # {path: [before, after]} with each a [mode, blob] in the project's shadow repository, or null.
    db.execute(
        """
        CREATE TABLE checkpoints (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            project_dir TEXT NOT NULL,
            kind TEXT NOT NULL,
            prompt TEXT NOT NULL DEFAULT '',
            run_ids TEXT NOT NULL DEFAULT '[]',
            changes TEXT NOT NULL,
            skipped TEXT NOT NULL DEFAULT '[]',
            created_at TEXT NOT NULL,
            rewound_at TEXT
        )
        """
    )
    db.execute("CREATE INDEX checkpoints_session ON checkpoints (session_id, id)")


def m007_finding_sessions(db: Connection) -> None:
    # `name`: what the user called the session (`sessions rename`, `/rename`, `--name`), unique, for `-r NAME`.
    # `archived_at`: hidden from lists, pickers and `-c`, not deleted. `turns`: user prompts in the session.
    # `search_text`: the text of user prompts and model answers (never tool output), one row per part, and `search`
    # its FTS5 index on SQLite (external content: the text is stored once; the triggers keep the index in step). A
    # session whose `indexed` is 0 (every one stored before this migration) has not been read into it yet:
    # sessions/search.py indexes those lazily, one short transaction each, rather than here, which would lock a large
    # store for long.
    db.execute("ALTER TABLE sessions ADD COLUMN name TEXT")
    db.execute("ALTER TABLE sessions ADD COLUMN archived_at TEXT")
    db.execute("ALTER TABLE sessions ADD COLUMN turns INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE sessions ADD COLUMN indexed INTEGER NOT NULL DEFAULT 0")
    db.execute("CREATE UNIQUE INDEX sessions_name ON sessions (name) WHERE name IS NOT NULL")
    db.execute(
        """
        CREATE TABLE search_text (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            role TEXT NOT NULL,
            text TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX search_text_session ON search_text (session_id, id)")
    if is_postgres(db):
        # PostgreSQL's full-text index: a `tsvector` of each row, kept by the database itself, and its GIN index.
        db.execute(
            "ALTER TABLE search_text ADD COLUMN document tsvector "
            "GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED"
        )
        db.execute("CREATE INDEX search_text_document ON search_text USING GIN (document)")
        return
    db.execute(
        "CREATE VIRTUAL TABLE search USING fts5 (text, content = 'search_text', content_rowid = 'id', "
        "tokenize = 'unicode61')"
    )
    db.execute(
        """
        CREATE TRIGGER search_text_inserted AFTER INSERT ON search_text BEGIN
            INSERT INTO search (rowid, text) VALUES (new.id, new.text);
        END
        """
    )
    db.execute(
        """
        CREATE TRIGGER search_text_deleted AFTER DELETE ON search_text BEGIN
            INSERT INTO search (search, rowid, text) VALUES ('delete', old.id, old.text);
        END
        """
    )


def m008_session_sources(db: Connection) -> None:
    # The id an imported session has in the tool it came from (Claude Code's sessionId, Codex's session id), so that
    # `sessions show` and `-r` find it by that id too.
    db.execute(
        "CREATE TABLE session_sources (session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE, "
        "tool TEXT NOT NULL, source_id TEXT NOT NULL)"
    )
    db.execute("CREATE INDEX session_sources_source ON session_sources (source_id)")


def m009_cache_savings(db: Connection) -> None:
    # What prompt caching saved each request (sessions/costs.py `RequestCost.saved_usd`); NULL for older rows.
    db.execute("ALTER TABLE requests ADD COLUMN saved_usd REAL")


def m010_running_runs_host(db: Connection) -> None:
    # The machine (`runs.THIS_HOST`) of a running run: on a store shared by machines (`[storage] url`) a pid means
    # something only on its own host, and a run of another host is never taken for a dead one. NULL: this host.
    db.execute("ALTER TABLE running_runs ADD COLUMN host TEXT")


def m011_steer_kinds(db: Connection) -> None:
    # What a `steers` row asks of the running run: `steer` (its text into the next request) or `cancel` (the turn
    # stops as the front end's own cancel stops it: Ctrl-C, SIGINT, `session/cancel`). Older rows are steers.
    db.execute("ALTER TABLE steers ADD COLUMN kind TEXT NOT NULL DEFAULT 'steer'")


MIGRATIONS: list[Migration] = [
    m001_conversations,
    m002_sessions,
    m003_running_runs,
    m004_journal,
    m005_request_costs,
    m006_checkpoints,
    m007_finding_sessions,
    m008_session_sources,
    m009_cache_savings,
    m010_running_runs_host,
    m011_steer_kinds,
]
"""Applied in order; append new ones, never edit or reorder applied ones."""
