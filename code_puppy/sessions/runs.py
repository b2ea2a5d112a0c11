"""Running runs and their steer inbox in sessions.db: how `code-puppy steer` reaches a run in another process.

A process running a turn registers its session in `running_runs` (pid, project, start, host) and reads `steers`
for pending rows every ~200 ms (on PostgreSQL: when `LISTEN/NOTIFY` says one came). `code-puppy steer` inserts a row
for a live registration, in the same transaction that checks it, then waits for the running process to mark it
delivered. A row's `kind` is `steer` (its text goes into the run) or `cancel` (the turn stops as its front end's own
cancel stops it: `code-puppy steer --cancel`, the dashboard's Cancel). A registration whose process died (kill -9, a
crash) is stale: its pid is gone or belongs to a newer process, and it is dropped when seen (by a process of its own
host only: `host`).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from .schema import Connection, Database, timestamp

SteerStatus = Literal["pending", "delivered", "rejected"]
SteerKind = Literal["steer", "cancel"]

STEERS_CHANNEL = "code_puppy_steers"
"""The PostgreSQL `NOTIFY` channel a steer is announced on; its payload is the session id."""


@dataclass(frozen=True)
class RunningRun:
    """A session some process is running a turn of."""

    session_id: str
    pid: int
    pid_started: str | None
    project_dir: str
    started_at: str
    host: str | None = None
    """The machine it runs on (`THIS_HOST`); None: this one (registered before hosts were recorded)."""

    @property
    def alive(self) -> bool:
        """Whether its process runs (a run of another host is taken to: only its own host can tell)."""
        return self.host not in (None, THIS_HOST) or process_alive(self.pid, self.pid_started)


def process_started(pid: int) -> str | None:
    """When process `pid` started (Linux clock ticks since boot), to tell it from a later process with its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count fields from the last ')'.
    return stat.rsplit(")", 1)[1].split()[19]


def this_host() -> str:
    """Which machine, and which PID namespace on it, this process runs in: a pid means something only there.

    A sessions.db can be shared by containers or machines (a mounted home); a process of another host is never taken
    for a dead one of ours.
    """
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        import platform

        return platform.node()
    return f"{boot}:{namespace}"


THIS_HOST = this_host()


def process_alive(pid: int, started: str | None) -> bool:
    """Whether process `pid` exists and, where knowable, is the one that started at `started`, not a later one."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process holds the pid now, or ours under another user: alive either way
    return started is None or process_started(pid) in (None, started)


class RunRegistry:
    """The `running_runs` and `steers` tables of one sessions database."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def register(self, session_id: str, project_dir: Path) -> None:
        """Mark `session_id` as running in this process (replacing a registration a dead process left)."""
        pid = os.getpid()
        row = (session_id, pid, process_started(pid), str(project_dir.resolve()), _now(), THIS_HOST)
        # Not synced: a registration a power cut loses names a process that died with it. Many agents start at once,
        # and each fsync here would hold the write lock they all wait for.
        with self._database.write(durable=False) as db:
            db.execute(
                """
                INSERT INTO running_runs (session_id, pid, pid_started, project_dir, started_at, host)
                VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT (session_id) DO UPDATE SET pid = excluded.pid, pid_started = excluded.pid_started,
                    project_dir = excluded.project_dir, started_at = excluded.started_at, host = excluded.host
                """,
                row,
            )

    def unregister(self, session_id: str) -> None:
        """This process stopped running `session_id`: drop its registration and reject steers nobody took."""
        with self._database.write(durable=False) as db:  # lost on a power cut, it is stale, and dropped when met
            db.execute("DELETE FROM running_runs WHERE session_id = ? AND pid = ?", (session_id, os.getpid()))
            _reject_pending(db, session_id)

    def running(self, *, project_dir: Path | None = None, session_prefix: str | None = None) -> list[RunningRun]:
        """Live registrations, newest first, of a project or of sessions whose id starts with a prefix.

        Stale registrations met on the way are deleted, and their pending steers rejected.
        """
        with self._database.read() as db:
            rows = db.execute(
                """
                SELECT session_id, pid, pid_started, project_dir, started_at, host FROM running_runs
                WHERE (:project IS NULL OR project_dir = :project)
                    AND (:prefix IS NULL OR substr(session_id, 1, length(:prefix)) = :prefix)
                ORDER BY started_at DESC
                """,
                {
                    "project": None if project_dir is None else str(project_dir.resolve()),
                    "prefix": session_prefix,
                },
            ).fetchall()
        runs = [RunningRun(*row) for row in rows]
        stale = [run for run in runs if not run.alive]
        if stale:
            with self._database.write() as db:
                for run in stale:
                    db.execute("DELETE FROM running_runs WHERE session_id = ? AND pid = ?", (run.session_id, run.pid))
                    _reject_pending(db, run.session_id)
        return [run for run in runs if run not in stale]

    def send(self, session_id: str, text: str, *, kind: SteerKind = "steer") -> int | None:
        """Queue `text` (or, `kind` `cancel`, a request to cancel the turn) for the running run of `session_id`; None
        when it is not registered (nothing is queued)."""
        with self._database.write() as db:
            if db.execute("SELECT 1 FROM running_runs WHERE session_id = ?", (session_id,)).fetchone() is None:
                return None
            row = db.execute(
                "INSERT INTO steers (session_id, text, created_at, kind) VALUES (?, ?, ?, ?) RETURNING id",
                (session_id, text, _now(), kind),
            ).fetchone()
            if self._database.postgres:  # wakes the running process up at the commit (`wake_ups`)
                db.execute("SELECT pg_notify(?, ?)", (STEERS_CHANNEL, session_id))
        return int(row[0])

    def status(self, steer_id: int) -> SteerStatus | None:
        with self._database.read() as db:
            row = db.execute("SELECT status FROM steers WHERE id = ?", (steer_id,)).fetchone()
        return None if row is None else row[0]

    def withdraw(self, steer_id: int) -> bool:
        """Take back a steer nobody claimed yet; False when the running process already settled it."""
        with self._database.write() as db:
            return db.execute("DELETE FROM steers WHERE id = ? AND status = 'pending'", (steer_id,)).rowcount > 0

    async def wake_ups(self, session_id: str, *, interval: float) -> AsyncGenerator[None]:
        """When to look for pending steers of `session_id` (`pending`): every `interval` seconds on SQLite; on
        PostgreSQL once listening, then as `send` announces one (`LISTEN/NOTIFY`), and every few seconds in case (every
        `interval` seconds again if the listening connection fails)."""
        if self._database.postgres:
            from .postgres import notifications

            try:
                async for payload in notifications(str(self._database.location), STEERS_CHANNEL, timeout=5.0):
                    if payload in (None, session_id):
                        yield
            except sqlite3.Error:
                pass  # the listening connection failed: polling still delivers every steer
        while True:
            await asyncio.sleep(interval)
            yield

    def pending(self, session_id: str) -> list[tuple[int, str, SteerKind]]:
        """(id, text, kind) of the rows waiting for `session_id`, oldest first: one cheap read, for polling."""
        with self._database.read() as db:
            rows = db.execute(
                "SELECT id, text, kind FROM steers WHERE session_id = ? AND status = 'pending' ORDER BY id",
                (session_id,),
            ).fetchall()
        return [(int(steer_id), str(text), "cancel" if kind == "cancel" else "steer") for steer_id, text, kind in rows]

    def settle(self, steer_id: int, status: SteerStatus) -> bool:
        """Mark a pending steer delivered or rejected; False when it was withdrawn or settled meanwhile."""
        with self._database.write() as db:
            return (
                db.execute(
                    "UPDATE steers SET status = ? WHERE id = ? AND status = 'pending'", (status, steer_id)
                ).rowcount
                > 0
            )


def _reject_pending(db: Connection, session_id: str) -> None:
    db.execute("UPDATE steers SET status = 'rejected' WHERE session_id = ? AND status = 'pending'", (session_id,))


def _now() -> str:
    return timestamp(datetime.now(UTC))


def steer(
    registry: RunRegistry,
    text: str,
    *,
    project_dir: Path,
    session_prefix: str | None = None,
    timeout: float = 5.0,
) -> tuple[bool, str]:
    """`code-puppy steer`: deliver `text` into the newest running run of a project or session; (ok, one line).

    Waits up to `timeout` seconds for the running process to take it; a steer it did not take is withdrawn, so
    nothing stays queued silently.
    """
    return _request(registry, text, "steer", project_dir=project_dir, session_prefix=session_prefix, timeout=timeout)


def cancel(
    registry: RunRegistry, *, project_dir: Path, session_prefix: str | None = None, timeout: float = 5.0
) -> tuple[bool, str]:
    """`code-puppy steer --cancel`: cancel the turn of the newest running run of a project or session, as its front
    end's own cancel does (finished work kept); (ok, one line). Waits as `steer` does."""
    return _request(registry, "", "cancel", project_dir=project_dir, session_prefix=session_prefix, timeout=timeout)


def _request(
    registry: RunRegistry,
    text: str,
    kind: SteerKind,
    *,
    project_dir: Path,
    session_prefix: str | None,
    timeout: float,
) -> tuple[bool, str]:
    import time

    nothing = "nothing was sent" if kind == "steer" else "nothing was cancelled"
    runs = (
        registry.running(session_prefix=session_prefix) if session_prefix else registry.running(project_dir=project_dir)
    )
    if not runs:
        where = f"of session {session_prefix}" if session_prefix else f"in {project_dir}"
        return False, f"no running code-puppy run {where}; {nothing}"
    if session_prefix and len({run.session_id for run in runs}) > 1:
        listed = ", ".join(run.session_id[:8] for run in runs)
        return False, f"'{session_prefix}' matches several running sessions ({listed}); give more of the id"
    run = runs[0]
    steer_id = registry.send(run.session_id, text, kind=kind)
    deadline = time.monotonic() + timeout
    while steer_id is not None:
        status = registry.status(steer_id)
        if status == "delivered":
            done = "steered" if kind == "steer" else "cancelled the turn of"
            return True, f"{done} session {run.session_id[:8]} (pid {run.pid})"
        if status != "pending" or (time.monotonic() > deadline and registry.withdraw(steer_id)):
            break
        time.sleep(0.05)
    return False, f"session {run.session_id[:8]} is no longer running a turn; {nothing}"
