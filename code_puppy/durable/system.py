"""Where DBOS keeps durable runs (its system database), and the one DBOS instance a process launches.

Nothing here imports DBOS at module level: `system_database_url` and the executor ids are read by commands that never
launch it (`code-puppy runs list`), and a plain run imports none of this.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from code_puppy.paths import data_dir, storage_url
from code_puppy.sessions.runs import THIS_HOST, process_alive, process_started

if TYPE_CHECKING:
    from dbos import DBOS

APP_NAME = "code-puppy"
"""DBOS's application name: part of every workflow's status row."""
APP_VERSION = "code-puppy-durable-1"
"""DBOS's application version, fixed: DBOS otherwise hashes the workflows' source, and a run started before an upgrade
could not be resumed after it. Bump it only when recorded steps of older runs can no longer be replayed."""
WORKFLOW_NAME = "code_puppy.headless_turn"
"""The workflow every durable run is; persisted with each run (compatibility data: never rename)."""
SYSTEM_DB = "durable.sqlite"
"""DBOS's system database file in the data directory, when no storage url is configured."""
SYSTEM_SCHEMA = "dbos"
"""DBOS's schema in the PostgreSQL database of `[storage] url` (DBOS 3.4's default, set explicitly: `runs list` reads
its tables there); the store's own tables stay in `public`."""
WORKERS_TABLE = "code_puppy_workers"
"""The fleet's heartbeat table (`fleet/heartbeat.py`), beside DBOS's tables (in `public` on PostgreSQL)."""
WORKER_STALE_SECONDS = 10.0
"""A fleet worker whose last beat is older is taken for dead, on any host: its runs are `interrupted`."""
POOL_SIZE = 4
"""DBOS's connection pool on PostgreSQL (its default is 20 per process): one durable run records one step at a time,
and a few for its queue, recovery and status threads; every concurrent run of a fleet counts against the server's
`max_connections`."""


def system_database_path() -> Path:
    """The SQLite file durable runs live in by default."""
    return data_dir() / SYSTEM_DB


def system_database_url() -> str:
    """DBOS's system database, the one place every durable run's caller gets it from: the PostgreSQL database of
    `[storage] url` (`paths.storage_url()`; DBOS keeps its tables in `SYSTEM_SCHEMA` there), else the SQLite file in
    the data directory, made private (0600) before DBOS first opens it.

    Raises:
        ConfigError: The user's config.toml cannot be read, or its url is not a PostgreSQL one.
    """
    if (url := storage_url()) is not None:
        return url
    path = system_database_path()
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        os.chmod(path, 0o600)  # whatever the umask
        import sqlite3

        # WAL (a setting the file keeps): a step's commit appends to the log instead of rewriting pages.
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute("PRAGMA journal_mode=WAL")
    return f"sqlite:///{path}"


def check_reachable(url: str) -> None:
    """Connect once to the PostgreSQL database of `url` before DBOS does: an unreachable or refused one is then the
    store's one line (`StoreError`, the url without its password, exit 2), not DBOS's retries and traceback."""
    from code_puppy.sessions.postgres import connect

    connect(url).close()


@dataclass(frozen=True)
class Executor:
    """The process a durable run belongs to, as its DBOS executor id says: every process has its own, so a process
    that launches DBOS never takes over another's runs (DBOS re-enqueues its own executor's pending runs at launch)."""

    host: str
    """The machine and PID namespace (`sessions/runs.py` `THIS_HOST`): what the pid means something in."""
    pid: int
    started: str | None
    hostname: str = ""

    @property
    def id(self) -> str:
        return f"{self.hostname}/{self.pid}/{self.started or '-'}/{self.host}"

    @classmethod
    def this(cls) -> Executor:
        return cls(THIS_HOST, os.getpid(), process_started(os.getpid()), socket.gethostname())

    @classmethod
    def parse(cls, executor_id: str | None) -> Executor | None:
        """The executor an id names; None for one no code-puppy process made."""
        parts = (executor_id or "").split("/", 3)
        if len(parts) != 4 or not parts[1].isdigit():
            return None
        return cls(parts[3], int(parts[1]), None if parts[2] == "-" else parts[2], parts[0])

    @property
    def local(self) -> bool:
        """Whether the process is (or was) on this host, in this PID namespace: only then can its pid be probed."""
        return self.host == THIS_HOST

    @property
    def alive(self) -> bool:
        """Whether the process may still run. One of another host (a shared PostgreSQL store) is never taken for dead:
        it shows `running` until its host sees it gone (the fleet's heartbeat will cover taking over from a dead
        host)."""
        return not self.local or process_alive(self.pid, self.started)

    @property
    def worker(self) -> str:
        """How `runs list` names the process: host name and pid."""
        return f"{self.hostname}:{self.pid}"


RESUME_QUEUE = "code-puppy-resume-"


def resume_queue(executor: Executor) -> str:
    """The queue only this process listens to: `runs resume` continues a run on it, in this process. It names the
    host too: on a shared store, `runs list` of another host must not probe this pid."""
    return f"{RESUME_QUEUE}{executor.pid}-{executor.started or '-'}@{executor.host}"


def resumer(queue: str) -> Executor | None:
    """The process whose resume queue `queue` is."""
    if not queue.startswith(RESUME_QUEUE):
        return None
    process, at, host = queue.removeprefix(RESUME_QUEUE).rpartition("@")
    pid, _, started = (process if at else host).partition("-")
    if not pid.isdigit():
        return None
    return Executor(host if at else THIS_HOST, int(pid), None if started == "-" else started)


def launch(*, debug: bool, queue: str | None = None, worker_concurrency: int | None = None) -> type[DBOS]:
    """Configure and launch DBOS in this process, with its own executor id and, if `queue`, listening only to it
    (with `worker_concurrency`: a fleet's queue, that limit stored with it). Workflows must be registered before
    (importing `code_puppy.headless.durable`).

    DBOS's logging (its banner, its migrations) stays off the terminal unless `debug`."""
    from dbos import DBOS, DBOSConfig

    from code_puppy.durable.serializer import JsonSerializer

    if not debug:  # its warnings (a cancelled step, with the step's whole arguments) are not for the terminal
        logging.getLogger("dbos").setLevel(logging.CRITICAL)
    url = system_database_url()
    postgres = not url.startswith("sqlite:")
    if postgres:
        check_reachable(url)
    config: DBOSConfig = {
        "name": APP_NAME,
        "system_database_url": url,
        "executor_id": Executor.this().id,
        "application_version": APP_VERSION,
        "serializer": JsonSerializer(),
        "log_level": "DEBUG" if debug else "CRITICAL",
        "notification_listener_polling_interval_sec": 0.1,
    }
    if postgres:
        config["dbos_system_schema"] = SYSTEM_SCHEMA
        config["sys_db_pool_size"] = POOL_SIZE
    else:
        # A step's commit survives a killed process without an fsync (WAL, synchronous=NORMAL), as the journal's do;
        # only a power cut can take the last steps, which then run again.
        config["db_engine_kwargs"] = {"creator": partial(_connect, system_database_path())}
    DBOS(config=config)
    DBOS.listen_queues([queue] if queue is not None else [])
    DBOS.launch()
    if queue is not None:
        DBOS.register_queue(
            queue, polling_interval_sec=0.1, worker_concurrency=worker_concurrency, on_conflict="always_update"
        )
    return DBOS


def _connect(path: Path) -> Any:
    import sqlite3

    connection = sqlite3.connect(path, check_same_thread=False)
    connection.execute("PRAGMA synchronous=NORMAL")
    return connection


class Launching:
    """DBOS imported and launched in a thread while the project starts: its import (~0.4 s) and its first migrations
    stay off the critical path. `register` registers the workflows first (DBOS needs them before its launch)."""

    def __init__(self, *, debug: bool, register: Callable[[], None]) -> None:
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._launch, args=(debug, register), name="code-puppy dbos", daemon=True
        )
        self._thread.start()

    def _launch(self, debug: bool, register: Callable[[], None]) -> None:
        try:
            register()
            launch(debug=debug)
        except BaseException as exc:  # reported where the run waits for it
            self._error = exc

    async def wait(self) -> None:
        await asyncio.to_thread(self._thread.join)
        if self._error is not None:
            from code_puppy.errors import ConfigError, one_line

            raise ConfigError(f"durable runs cannot start: {one_line(self._error, typed=True)}") from self._error


def dbos_client(*, migrate: bool = False) -> Any:
    """A `DBOSClient` on the system database: it enqueues, lists and cancels, and never takes over work. `migrate`:
    the database is made or brought up to date first (a client never migrates it; the first run may be a queued one)."""
    from dbos import DBOS, DBOSClient

    from code_puppy.durable.serializer import JsonSerializer

    if not logging.getLogger("dbos").isEnabledFor(logging.DEBUG):
        logging.getLogger("dbos").setLevel(logging.CRITICAL)
    url = system_database_url()
    postgres = not url.startswith("sqlite:")
    if postgres:
        check_reachable(url)
    if migrate:
        DBOS.migrate(url, schema=SYSTEM_SCHEMA)
    return DBOSClient(
        system_database_url=url,
        serializer=JsonSerializer(),
        application_name=APP_NAME,
        dbos_system_schema=SYSTEM_SCHEMA,
        system_database_pool_size=POOL_SIZE if postgres else None,
    )


def cancel_run(run_id: str) -> None:
    """Mark a durable run cancelled, without launching DBOS (a client never takes over work)."""
    client = dbos_client()
    try:
        client.cancel_workflow(run_id)
    finally:
        client.destroy()
