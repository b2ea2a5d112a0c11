"""The fleet's workers as their heartbeat says (`code_puppy_workers`, a table of the fleet's in DBOS's system
database, written by `fleet/heartbeat.py`), read here without SQLAlchemy or DBOS, as `runs.py` reads DBOS's tables:
the dashboard (a front end, below the fleet) lists them through this module."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

from code_puppy.durable.runs import system_tables
from code_puppy.durable.system import WORKER_STALE_SECONDS as STALE_SECONDS
from code_puppy.durable.system import WORKERS_TABLE as TABLE
from code_puppy.errors import ConfigError


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class WorkerBeat:
    """One worker as its last beat says."""

    executor_id: str
    worker: str
    host: str
    pid: int
    queue: str
    concurrency: int
    in_hand: int
    mode: str
    started_ms: int
    beat_ms: int

    def age(self, at_ms: int | None = None) -> float:
        """Seconds since its last beat."""
        return ((at_ms if at_ms is not None else now_ms()) - self.beat_ms) / 1000

    @property
    def alive(self) -> bool:
        return self.age() <= STALE_SECONDS


def list_workers() -> list[WorkerBeat]:
    """Every worker that beat and did not sign off, oldest start first (none when no worker ever started here)."""
    with system_tables() as db:
        if db is None:
            return []
        try:
            rows = db.db.execute(
                "SELECT executor_id, worker, host, pid, queue, concurrency, in_hand, mode, started_ms, beat_ms"
                f" FROM {TABLE} ORDER BY started_ms"
            ).fetchall()
        except sqlite3.OperationalError as exc:  # psycopg's errors too (sessions/postgres.py)
            if "no such table" in str(exc) or "does not exist" in str(exc):
                return []
            raise ConfigError(f"cannot read the fleet's workers in {db.where}: {exc}") from None
    return [WorkerBeat(*row) for row in rows]
