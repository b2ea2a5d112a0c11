"""The workers' heartbeat (DBOS's open-source edition has none): a row per worker in a table of ours in DBOS's system
database (`code_puppy_workers`), beaten every few seconds; `code-puppy workers list` reads it, and a worker whose beat
stopped is dead to the others. Through SQLAlchemy on `system_database_url`, so SQLite and PostgreSQL alike."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from code_puppy.durable.workers import STALE_SECONDS, TABLE, WorkerBeat, now_ms

__all__ = ["BEAT_SECONDS", "STALE_SECONDS", "TABLE", "Beating", "Heartbeats", "WorkerBeat"]

BEAT_SECONDS = 2.0
"""How often a worker beats."""
_CREATE = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (executor_id TEXT PRIMARY KEY, worker TEXT NOT NULL, host TEXT NOT NULL,"
    " pid INTEGER NOT NULL, queue TEXT NOT NULL, concurrency INTEGER NOT NULL, in_hand INTEGER NOT NULL,"
    " mode TEXT NOT NULL, started_ms BIGINT NOT NULL, beat_ms BIGINT NOT NULL)"
)


class Heartbeats:
    """The table, on DBOS's system database `url`."""

    def __init__(self, url: str) -> None:
        import sqlalchemy

        self._sa = sqlalchemy
        self.engine = sqlalchemy.create_engine(url)
        self._made = False

    def close(self) -> None:
        self.engine.dispose()

    def listed(self) -> list[WorkerBeat]:
        """Every worker that beat and did not sign off, oldest start first (none when the table was never made)."""
        from sqlalchemy.exc import DBAPIError

        sa = self._sa
        try:
            with self.engine.connect() as connection:
                rows = connection.execute(
                    sa.text(
                        "SELECT executor_id, worker, host, pid, queue, concurrency, in_hand, mode, started_ms, beat_ms"
                        f" FROM {TABLE} ORDER BY started_ms"
                    )
                ).all()
        except DBAPIError:
            return []  # no worker ever started here
        return [WorkerBeat(*row) for row in rows]

    def _make(self) -> None:
        """The table, once: two workers starting at once on PostgreSQL can both miss it and one `CREATE ... IF NOT
        EXISTS` then fails on the catalog's unique index; the table is there after it, made by the other."""
        from sqlalchemy.exc import DBAPIError

        for attempt in range(2):
            try:
                with self.engine.begin() as connection:
                    connection.execute(self._sa.text(_CREATE))
                break
            except DBAPIError:
                if attempt:
                    raise
        self._made = True

    def beat(self, beat: WorkerBeat) -> None:
        sa = self._sa
        if not self._made:
            self._make()
        with self.engine.begin() as connection:
            connection.execute(
                sa.text(
                    f"INSERT INTO {TABLE} (executor_id, worker, host, pid, queue, concurrency, in_hand, mode,"
                    " started_ms, beat_ms) VALUES (:executor_id, :worker, :host, :pid, :queue, :concurrency, :in_hand,"
                    " :mode, :started_ms, :beat_ms) ON CONFLICT (executor_id) DO UPDATE SET in_hand = :in_hand,"
                    " beat_ms = :beat_ms"
                ),
                vars(beat),
            )

    def claim_dead(self, queue: str) -> list[WorkerBeat]:
        """The workers of `queue` that stopped beating, each claimed by this worker alone: its row deleted if it is
        still the stale one read (another worker's claim, or a late beat, makes the delete miss)."""
        sa = self._sa
        claimed: list[WorkerBeat] = []
        for beat in self.listed():
            if beat.queue != queue or beat.alive:
                continue
            with self.engine.begin() as connection:
                deleted = connection.execute(
                    sa.text(f"DELETE FROM {TABLE} WHERE executor_id = :id AND beat_ms = :beat"),
                    {"id": beat.executor_id, "beat": beat.beat_ms},
                )
            if deleted.rowcount == 1:
                claimed.append(beat)
        return claimed

    def sign_off(self, executor_id: str) -> None:
        """The worker stopped cleanly: its row goes."""
        sa = self._sa
        with self.engine.begin() as connection:
            connection.execute(sa.text(f"DELETE FROM {TABLE} WHERE executor_id = :id"), {"id": executor_id})


class Beating:
    """A daemon thread beating for a worker: `make` gives its beat now; `after` runs after each beat."""

    def __init__(
        self, heartbeats: Heartbeats, make: Callable[[int], WorkerBeat], after: Callable[[], None] = lambda: None
    ) -> None:
        self.heartbeats = heartbeats
        self._make = make
        self._after = after
        self._stop = threading.Event()
        heartbeats.beat(make(now_ms()))  # before the worker takes a run: `workers list` shows it at once
        self._thread = threading.Thread(target=self._loop, name="code-puppy heartbeat", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(BEAT_SECONDS):
            try:
                self.heartbeats.beat(self._make(now_ms()))
                self._after()
            except Exception as exc:  # the store is away for a moment: the next beat tries again
                _note(exc)

    def stop(self, executor_id: str) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.heartbeats.sign_off(executor_id)


def _note(exc: Any) -> None:
    import sys

    from code_puppy.errors import one_line

    print(f"code-puppy: worker heartbeat failed: {one_line(exc, typed=True)}", file=sys.stderr, flush=True)
