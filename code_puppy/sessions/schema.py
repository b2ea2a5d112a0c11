"""The sessions database: one SQLite connection, its pragmas, and the migrations applied when it opens."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from code_puppy.errors import StoreError, one_line

__all__ = ("MIGRATIONS", "Database", "Migration", "delete_conversation", "discard_journal", "migrate", "timestamp")

Migration = Callable[[sqlite3.Connection], None]
"""A schema change, recorded in `schema_migrations` under its function's name once applied."""


def m001_conversations(db: sqlite3.Connection) -> None:
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


def m002_sessions(db: sqlite3.Connection) -> None:
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


def m003_running_runs(db: sqlite3.Connection) -> None:
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


def m004_journal(db: sqlite3.Connection) -> None:
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


def m005_request_costs(db: sqlite3.Connection) -> None:
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


def m006_checkpoints(db: sqlite3.Connection) -> None:
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


def m007_finding_sessions(db: sqlite3.Connection) -> None:
    # `name`: what the user called the session (`sessions rename`, `/rename`, `--name`), unique, for `-r NAME`.
    # `archived_at`: hidden from lists, pickers and `-c`, not deleted. `turns`: user prompts in the session.
    # `search_text`: the text of user prompts and model answers (never tool output), one row per part, and `search`
    # its FTS5 index (external content: the text is stored once; the triggers keep the index in step). A session
    # whose `indexed` is 0 (every one stored before this migration) has not been read into it yet: sessions/search.py
    # indexes those lazily, one short transaction each, rather than here, which would lock a large store for long.
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


def m008_session_sources(db: sqlite3.Connection) -> None:
    # The id an imported session has in the tool it came from (Claude Code's sessionId, Codex's session id), so that
    # `sessions show` and `-r` find it by that id too.
    db.execute(
        "CREATE TABLE session_sources (session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE, "
        "tool TEXT NOT NULL, source_id TEXT NOT NULL)"
    )
    db.execute("CREATE INDEX session_sources_source ON session_sources (source_id)")


def m009_cache_savings(db: sqlite3.Connection) -> None:
    # What prompt caching saved each request (sessions/costs.py `RequestCost.saved_usd`); NULL for older rows.
    db.execute("ALTER TABLE requests ADD COLUMN saved_usd REAL")


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
]
"""Applied in order; append new ones, never edit or reorder applied ones."""


def migrate(db: sqlite3.Connection, migrations: Sequence[Migration] = MIGRATIONS) -> list[str]:
    """Apply the migrations `db` hasn't had yet, all in one transaction; return their names."""
    db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")

    def pending() -> list[Migration]:
        applied = {name for (name,) in db.execute("SELECT name FROM schema_migrations")}
        return [migration for migration in migrations if migration.__name__ not in applied]

    if not pending():
        return []
    with _transaction(db):
        # Checked again under the write lock: another process may have migrated meanwhile.
        todo = pending()
        for migration in todo:
            migration(db)
            db.execute(
                "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)",
                (migration.__name__, timestamp(datetime.now(UTC))),
            )
    return [migration.__name__ for migration in todo]


def timestamp(moment: datetime) -> str:
    """`moment` in UTC, in a fixed-width ISO 8601 form that sorts as text."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@contextmanager
def _transaction(db: sqlite3.Connection) -> Generator[sqlite3.Connection]:
    # IMMEDIATE takes the write lock up front, so a check made inside holds until the commit, across processes.
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


TIMINGS_VARIABLE = "CODE_PUPPY_STORE_TIMINGS"
"""When set, a file each committed write transaction appends one line to: `TOTAL_MS HELD_MS durable|fast`, the time
from asking to write to the commit (waiting for other processes included) and the time the write lock was held.
For benchmarks (benchmarks/parallel_runs.py); unset, it costs one attribute check per write."""


def _log_timing(file: str, asked: float, began: float, *, durable: bool) -> None:
    done = time.perf_counter()
    line = f"{(done - asked) * 1000:.3f} {(done - began) * 1000:.3f} {'durable' if durable else 'fast'}\n"
    with contextlib.suppress(OSError):  # a measurement never fails a write
        descriptor = os.open(file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(descriptor, line.encode())  # one short append: lines of concurrent processes never interleave
        finally:
            os.close(descriptor)


class Database:
    """A connection to a sessions database, migrated when opened, shared by the store and the session catalog.

    Writes run in `BEGIN IMMEDIATE` transactions; a lock keeps threads of one process from interleaving them.
    A database that cannot be opened, or whose schema cannot be read, is a `StoreError` naming the file and what to
    do; nothing is ever deleted or overwritten to get past it. `readonly` opens it without creating, migrating or
    writing anything, even in a directory the user cannot write (the `sessions` commands that only read).
    """

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._connection = _open(path, readonly=readonly)
        self._timings = os.environ.get(TIMINGS_VARIABLE) or None

    @contextmanager
    def read(self) -> Generator[sqlite3.Connection]:
        """The connection, for statements that only read."""
        with self._lock:
            yield self._connection

    @contextmanager
    def write(self, *, durable: bool = True) -> Generator[sqlite3.Connection]:
        """The connection inside a write transaction, committed on exit and rolled back on an exception.

        `durable=False` commits without syncing the log to disk: the write survives a killed process but not a
        power cut, and costs no fsync (the journal's steps).
        """
        asked = time.perf_counter()
        with self._lock:
            if not durable:
                self._connection.execute("PRAGMA synchronous = NORMAL")
            try:
                with _transaction(self._connection) as db:
                    began = time.perf_counter()
                    yield db
            finally:
                if not durable:
                    self._connection.execute("PRAGMA synchronous = FULL")
        if self._timings is not None:
            _log_timing(self._timings, asked, began, durable=durable)

    def close(self) -> None:
        with self._lock:
            self._connection.close()


def _open(path: Path, *, readonly: bool) -> sqlite3.Connection:
    if readonly and not path.is_file():
        raise StoreError(f"{path}: no sessions database here yet (code-puppy creates it with the first session)")
    if not readonly:
        if path.parent.exists() and not path.parent.is_dir():
            raise StoreError(f"the data directory {path.parent} is a file, not a directory ({_WHAT_TO_DO})")
        try:
            # Private to the user, like everything in it: conversations hold code and what tools printed.
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            reason = f"cannot create the data directory {path.parent}: {exc.strerror}"
            raise StoreError(f"{reason} ({_WHAT_TO_DO})") from None
        if not path.exists():
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # SQLite's -wal and -shm copy this mode
        else:
            _make_private(path)
    try:
        return _connect(path, readonly=readonly)
    except sqlite3.OperationalError:
        # Only a read-only open lets one through: a database in WAL mode in a directory the user cannot write gets
        # no shared-memory file there, so it is read as it is on disk.
        return _connect(path, readonly=True, immutable=True)


def _make_private(path: Path) -> None:
    """Close a database an older code-puppy (or a loose umask) left readable to others, with its -wal and -shm."""
    for file in (path, path.with_name(f"{path.name}-wal"), path.with_name(f"{path.name}-shm")):
        with contextlib.suppress(OSError):  # gone, or not the user's to change: SQLite still opens it as it is
            if file.stat().st_mode & 0o077:
                file.chmod(0o600)


def _connect(path: Path, *, readonly: bool, immutable: bool = False) -> sqlite3.Connection:
    uri = f"{path.absolute().as_uri()}?mode={'ro' if readonly else 'rwc'}{'&immutable=1' if immutable else ''}"
    try:
        connection = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreError(_describe(path, exc)) from None
    try:
        # How long a statement waits for another process's write transaction before failing as locked: long, since
        # transactions are short and many agents on a loaded machine can queue behind one another (a dead process's
        # lock goes with it).
        connection.execute("PRAGMA busy_timeout = 30000")
        if readonly:
            connection.execute("SELECT name FROM schema_migrations").fetchall()
        else:
            connection.execute("PRAGMA journal_mode = WAL")
            # FULL syncs the log at every commit, so a saved turn survives a power cut too, not only a killed process.
            connection.execute("PRAGMA synchronous = FULL")
            connection.execute("PRAGMA foreign_keys = ON")
            migrate(connection)
    except sqlite3.OperationalError:
        connection.close()
        if readonly and not immutable:
            raise  # may be the read-only directory: the caller tries once more
        raise StoreError(_describe(path, sys.exc_info()[1])) from None
    except sqlite3.DatabaseError as exc:
        connection.close()
        raise StoreError(_describe(path, exc)) from None
    except BaseException:
        connection.close()
        raise
    return connection


_WHAT_TO_DO = "set CODE_PUPPY_HOME to a writable directory, or fix this one"


def store_error(path: Path, exc: BaseException, *, writing: bool = False) -> StoreError:
    """The error a store that cannot be used, or a row of it that cannot be read, is reported with; `writing`: one
    that opened but cannot be written (a full disk)."""
    return StoreError(_describe(path, exc, writing=writing))


def _describe(path: Path, exc: BaseException | None, *, writing: bool = False) -> str:
    reason = one_line(exc, limit=200) if exc is not None else "unknown error"
    if not isinstance(exc, sqlite3.OperationalError):  # a page or a row that does not read back
        return (
            f"{path} is damaged ({reason}); it was left as it is. `code-puppy sessions repair` moves it aside and "
            "keeps what can still be read"
        )
    if "locked" in reason or "busy" in reason:
        return f"{path} is locked by another process ({reason}); try again"
    if writing:
        return f"cannot write to {path}: {reason} (free space on its disk, {_WHAT_TO_DO})"
    return f"cannot open {path}: {reason} ({_WHAT_TO_DO})"


def delete_conversation(db: sqlite3.Connection, conversation_id: str) -> bool:
    """Delete a conversation's record, its session row, and the entries no remaining record reaches.

    Call it inside a write transaction. Returns whether there was a record or a session row to delete.
    """
    discard_journal(db, conversation_id)
    db.execute("DELETE FROM checkpoints WHERE session_id = ?", (conversation_id,))
    db.execute("DELETE FROM search_text WHERE session_id = ?", (conversation_id,))
    row = db.execute("DELETE FROM conversations WHERE id = ? RETURNING family", (conversation_id,)).fetchone()
    deleted = row is not None
    deleted |= db.execute("DELETE FROM sessions WHERE id = ?", (conversation_id,)).rowcount > 0
    if row is not None:
        db.execute(
            """
            WITH RECURSIVE live (id) AS (
                SELECT tip FROM (
                    SELECT head_id AS tip FROM conversations WHERE family = :family
                    UNION
                    SELECT branch.value FROM conversations, json_each(conversations.record, '$.branches') AS branch
                    WHERE conversations.family = :family
                ) WHERE tip IS NOT NULL
                UNION
                SELECT entries.parent_id FROM entries JOIN live ON entries.id = live.id
                WHERE entries.parent_id IS NOT NULL
            )
            DELETE FROM entries WHERE family = :family AND id NOT IN live
            """,
            {"family": row[0]},
        )
    return deleted


def discard_journal(db: sqlite3.Connection, session_id: str, *, writer: tuple[str, int] | None = None) -> None:
    """Delete the journals (sessions/journal.py) of a session that the process `writer` (host, pid) wrote, or every
    process, inside the transaction that saves or deletes the session."""
    if writer is None:
        db.execute("DELETE FROM journals WHERE session_id = ?", (session_id,))
    else:
        db.execute("DELETE FROM journals WHERE session_id = ? AND host = ? AND pid = ?", (session_id, *writer))
