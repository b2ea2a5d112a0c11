"""The sessions database: one connection (a SQLite file, or PostgreSQL at `[storage] url`), and the migrations
applied when it opens."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, cast

from code_puppy.errors import StoreError, one_line

from .migrations import MIGRATIONS, Connection, Migration, is_postgres

if TYPE_CHECKING:
    from .postgres import PostgresConnection

__all__ = (
    "MIGRATIONS",
    "Connection",
    "Database",
    "Location",
    "Migration",
    "delete_conversation",
    "discard_journal",
    "is_postgres",
    "migrate",
    "timestamp",
)

Location = Path | str
"""Where a store is: its SQLite file, or a PostgreSQL url (`[storage] url`)."""
NO_LIMIT = 2**62
"""A `LIMIT` that is none, for both backends (PostgreSQL refuses SQLite's -1)."""


class NewerSchema(Exception):
    """The store has migrations this code-puppy does not know: a newer one wrote it."""


def migrate(db: Connection, migrations: Sequence[Migration] = MIGRATIONS) -> list[str]:
    """Apply the migrations `db` hasn't had yet, all in one transaction; return their names.

    Raises:
        NewerSchema: `db` has had migrations that are not in `migrations` (a newer code-puppy wrote it).
    """
    postgres = is_postgres(db)
    if not postgres:
        db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")

    def pending() -> list[Migration]:
        if postgres and db.execute("SELECT to_regclass('schema_migrations')").fetchone()[0] is None:
            return list(migrations)
        applied = {name for (name,) in db.execute("SELECT name FROM schema_migrations")}
        check_known(applied, migrations)
        return [migration for migration in migrations if migration.__name__ not in applied]

    if not pending():
        return []
    with _transaction(db):
        # Checked again under the write lock: another process may have migrated meanwhile.
        if postgres:
            db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
        todo = pending()
        for migration in todo:
            migration(db)
            db.execute(
                "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)",
                (migration.__name__, timestamp(datetime.now(UTC))),
            )
    return [migration.__name__ for migration in todo]


def check_known(applied: set[str], migrations: Sequence[Migration] = MIGRATIONS) -> None:
    """Raises `NewerSchema` when a store has had migrations this code does not know."""
    if unknown := applied - {migration.__name__ for migration in migrations}:
        raise NewerSchema(", ".join(sorted(unknown)))


def timestamp(moment: datetime) -> str:
    """`moment` in UTC, in a fixed-width ISO 8601 form that sorts as text."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@contextmanager
def _transaction(db: Connection, *, durable: bool = True) -> Generator[Connection]:
    if is_postgres(db):
        with cast("PostgresConnection", db).transaction(durable=durable):
            yield db
        return
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

    Writes run in `BEGIN IMMEDIATE` transactions (on PostgreSQL: under one advisory lock, sessions/postgres.py); a lock
    keeps threads of one process from interleaving them. A database that cannot be opened, or whose schema cannot be
    read or is newer than this code, is a `StoreError` naming it (a url without its password) and what to do; nothing
    is ever deleted or overwritten to get past it. `readonly` opens a SQLite file without creating, migrating or
    writing anything, even in a directory the user cannot write (the `sessions` commands that only read); a PostgreSQL
    store is always migrated when opened.
    """

    def __init__(self, location: Location, *, readonly: bool = False) -> None:
        self.location = location
        """The SQLite file, or the PostgreSQL url (with its password: never show it)."""
        self.path: Location = location
        """What messages name: the file, or the url without its password."""
        self._lock = threading.RLock()
        self._connection: Connection
        if isinstance(location, str):
            from .postgres import connect, redacted

            self.path = redacted(location)
            self._connection = connect(location)
            try:
                migrate(self._connection)
            except NewerSchema as exc:
                self._connection.close()  # type: ignore[attr-defined]
                raise StoreError(_newer(self.path, exc)) from None
            except sqlite3.Error as exc:
                self._connection.close()  # type: ignore[attr-defined]
                raise StoreError(f"cannot open the sessions store at {self.path}: {one_line(exc, limit=200)}") from None
        else:
            self._connection = _open(location, readonly=readonly)
        self._timings = os.environ.get(TIMINGS_VARIABLE) or None

    @property
    def postgres(self) -> bool:
        """Whether the store is on PostgreSQL."""
        return isinstance(self.location, str)

    @contextmanager
    def read(self) -> Generator[Connection]:
        """The connection, for statements that only read."""
        with self._lock:
            yield self._connection

    @contextmanager
    def write(self, *, durable: bool = True) -> Generator[Connection]:
        """The connection inside a write transaction, committed on exit and rolled back on an exception.

        `durable=False` commits without syncing the log to disk: the write survives a killed process but not a
        power cut, and costs no fsync (the journal's steps).
        """
        asked = time.perf_counter()
        sqlite = not self.postgres
        with self._lock:
            if sqlite and not durable:
                self._connection.execute("PRAGMA synchronous = NORMAL")
            try:
                with _transaction(self._connection, durable=durable) as db:
                    began = time.perf_counter()
                    yield db
            finally:
                if sqlite and not durable:
                    self._connection.execute("PRAGMA synchronous = FULL")
        if self._timings is not None:
            _log_timing(self._timings, asked, began, durable=durable)

    @contextmanager
    def exclusive(self, *, wait: bool) -> Generator[bool]:
        """One process at a time across every process of this store (the search index's catch-up); whether this one
        got it (always, with `wait`): a lock file beside a SQLite file, an advisory lock on PostgreSQL."""
        if self.postgres:
            from .postgres import INDEX_LOCK

            with cast("PostgresConnection", self._connection).advisory_lock(INDEX_LOCK, wait=wait) as alone:
                yield alone
            return
        path = Path(self.location)
        descriptor = os.open(path.with_name(f"{path.name}.index-lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(descriptor)  # releases the lock

    def close(self) -> None:
        with self._lock:
            self._connection.close()  # type: ignore[attr-defined]


def _newer(where: Location, exc: NewerSchema) -> str:
    return f"the sessions store at {where} was written by a newer code-puppy (migrations {exc}); upgrade code-puppy"


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
            check_known({name for (name,) in connection.execute("SELECT name FROM schema_migrations")})
        else:
            connection.execute("PRAGMA journal_mode = WAL")
            # FULL syncs the log at every commit, so a saved turn survives a power cut too, not only a killed process.
            connection.execute("PRAGMA synchronous = FULL")
            connection.execute("PRAGMA foreign_keys = ON")
            migrate(connection)
    except NewerSchema as exc:
        connection.close()
        raise StoreError(_newer(path, exc)) from None
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


def store_error(path: Location, exc: BaseException, *, writing: bool = False) -> StoreError:
    """The error a store that cannot be used, or a row of it that cannot be read, is reported with; `writing`: one
    that opened but cannot be written (a full disk)."""
    return StoreError(_describe(path, exc, writing=writing))


def _describe(path: Location, exc: BaseException | None, *, writing: bool = False) -> str:
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


def delete_conversation(db: Connection, conversation_id: str) -> bool:
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
        branches = (
            "jsonb_array_elements_text(conversations.record::jsonb -> 'branches') AS branch (value)"
            if is_postgres(db)
            else "json_each(conversations.record, '$.branches') AS branch"
        )
        db.execute(
            f"""
            WITH RECURSIVE live (id) AS (
                SELECT tip FROM (
                    SELECT head_id AS tip FROM conversations WHERE family = :family
                    UNION
                    SELECT branch.value FROM conversations, {branches}
                    WHERE conversations.family = :family
                ) AS tips WHERE tip IS NOT NULL
                UNION
                SELECT entries.parent_id FROM entries JOIN live ON entries.id = live.id
                WHERE entries.parent_id IS NOT NULL
            )
            DELETE FROM entries WHERE family = :family AND id NOT IN (SELECT id FROM live)
            """,
            {"family": row[0]},
        )
    return deleted


def discard_journal(db: Connection, session_id: str, *, writer: tuple[str, int] | None = None) -> None:
    """Delete the journals (sessions/journal.py) of a session that the process `writer` (host, pid) wrote, or every
    process, inside the transaction that saves or deletes the session."""
    if writer is None:
        db.execute("DELETE FROM journals WHERE session_id = ?", (session_id,))
    else:
        db.execute("DELETE FROM journals WHERE session_id = ? AND host = ? AND pid = ?", (session_id, *writer))
