"""Durable runs as `code-puppy runs` shows them, read from DBOS's system database without launching DBOS (a process
that launches it would take over work), and what a new `-c`/`-r` of a session must know of them.

DBOS's own tables are the record: `workflow_status` (a run's status, its inputs, its result, its executor: the
process) and `operation_outputs` (its finished steps), in the SQLite file (read with `sqlite3`) or in the `dbos` schema
of the PostgreSQL store (read with the store's psycopg connection, `sessions/postgres.py`: no DBOS import, ~0.4 s).
The costs come from the sessions store (`requests`, by the
`run_id`s pydantic-ai gives a durable run's requests: the run's id, a colon, a step number).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Generator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from code_puppy.durable.system import (
    RESUME_QUEUE,
    SYSTEM_SCHEMA,
    WORKER_STALE_SECONDS,
    WORKERS_TABLE,
    WORKFLOW_NAME,
    Executor,
    resumer,
    system_database_path,
)
from code_puppy.errors import ConfigError
from code_puppy.paths import storage_url

RunStatus = Literal["queued", "running", "interrupted", "succeeded", "failed", "cancelled"]
RESULT_STATUS: dict[str, RunStatus] = {
    "success": "succeeded",
    "error": "failed",
    "limit": "failed",
    "interrupted": "cancelled",
    "terminated": "cancelled",
}
"""A finished run's status by how its turn ended (`core/events.py` `Status`): a signal that stopped it cancelled it."""


@dataclass(frozen=True)
class DurableRun:
    """One durable run (a DBOS workflow of `WORKFLOW_NAME`)."""

    id: str
    session_id: str | None
    status: RunStatus
    executor: Executor | None
    steps: int
    """Finished steps: model requests and tool calls recorded."""
    inputs: dict[str, Any]
    """What it was started with (`headless/durable.py` `inputs_of`)."""
    output: str | None
    error: str | None
    created_ms: int
    result: dict[str, Any] = field(default_factory=lambda: {})
    """What its workflow returned (a queued run's also has `branch`, `diff_stat`, `worker`, `worktree`)."""
    duration_ms: int = 0
    """From its start (a queued run's: when a worker took it) to its status's last change: an ended run's length."""

    @property
    def branch(self) -> str | None:
        """A queued run's branch (`code-puppy/RUN-ID`), from its queueing on; None for a durable `-p` run."""
        return f"code-puppy/{self.id}" if self.inputs.get("kind") == "fleet" else None

    def listed(self, cost_usd: float | None) -> dict[str, Any]:
        """Its `runs list` entry."""
        executor = self.executor
        return {
            "id": self.id,
            "session_id": self.session_id,
            "status": self.status,
            "host": executor.hostname if executor is not None else None,
            "pid": executor.pid if executor is not None else None,
            "worker": executor.worker if executor is not None else None,
            "branch": self.branch,
            "steps": self.steps,
            "cost_usd": cost_usd,
        }


@dataclass(frozen=True)
class _Tables:
    """A read connection to DBOS's tables (`sqlite3`'s, or the store's PostgreSQL one with its `?` parameters), and
    what names them there."""

    db: Any
    prefix: str
    where: str

    def execute(self, sql: str, arguments: Any = ()) -> Any:
        return self.db.execute(sql.replace("{t}", self.prefix), arguments)


@contextmanager
def system_tables() -> Generator[_Tables | None]:
    """DBOS's tables, read-only; None when no durable run was ever started here (no file, no schema yet).

    Raises:
        StoreError: The PostgreSQL store cannot be reached (one line, its url without its password).
    """
    if (url := storage_url()) is not None:
        from code_puppy.sessions.postgres import connect, redacted

        connection = connect(url)
        try:
            (found,) = connection.execute(
                "SELECT to_regclass(?)", (f"{SYSTEM_SCHEMA}.workflow_status",)
            ).fetchone() or (None,)
            yield None if found is None else _Tables(connection, f"{SYSTEM_SCHEMA}.", redacted(url))
        finally:
            connection.close()
        return
    path = system_database_path()
    if not path.exists():
        yield None
        return
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error as exc:
        raise ConfigError(f"cannot read the durable runs database {path}: {exc}") from None
    with closing(connection):
        yield _Tables(connection, "", str(path))


def list_runs(*, run_id: str | None = None, session_id: str | None = None) -> list[DurableRun]:
    """The durable runs, newest first: all, the one `run_id` names (its id or a unique prefix), or a session's."""
    with system_tables() as db:
        if db is None:
            return []
        try:
            return _read(db, run_id, session_id)
        except sqlite3.OperationalError as exc:  # psycopg's errors too (sessions/postgres.py)
            if "no such table" in str(exc):
                return []  # DBOS made the file but never migrated it (killed while launching)
            raise ConfigError(f"cannot read the durable runs database {db.where}: {exc}") from None


def _read(db: _Tables, run_id: str | None, session_id: str | None) -> list[DurableRun]:
    query = (
        # DBOS 3.4 keeps inputs and outputs in tables of their own (older rows: in the status row).
        "SELECT w.workflow_uuid, w.status, w.executor_id, w.queue_name, coalesce(i.inputs, w.inputs),"
        " coalesce(o.output, w.output), coalesce(o.error, w.error), w.created_at,"
        " w.updated_at - coalesce(w.started_at_epoch_ms, w.created_at),"
        " (SELECT count(*) FROM {t}operation_outputs s WHERE s.workflow_uuid = w.workflow_uuid"
        "  AND s.completed_at_epoch_ms IS NOT NULL)"
        " FROM {t}workflow_status w LEFT JOIN {t}workflow_input i ON i.workflow_uuid = w.workflow_uuid"
        " LEFT JOIN {t}workflow_output o ON o.workflow_uuid = w.workflow_uuid WHERE w.name = ?"
    )
    arguments: list[Any] = [WORKFLOW_NAME]
    if run_id is not None:
        query += " AND w.workflow_uuid LIKE ? ESCAPE '\\'"
        arguments.append(run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
    runs: list[DurableRun] = []
    beats = _Beats(db)
    for wid, status, executor_id, queue, inputs, output, error, created, duration, steps in db.execute(
        query + " ORDER BY w.created_at DESC", arguments
    ):
        recorded = _inputs(inputs)
        if session_id is not None and recorded.get("session_id") != session_id:
            continue
        executor = Executor.parse(executor_id)
        decoded: Any = _json(output) if output else None
        result = cast(dict[str, Any], decoded) if isinstance(decoded, dict) else {}
        runs.append(
            DurableRun(
                id=wid,
                session_id=recorded.get("session_id") or result.get("session_id"),
                status=_status(status, executor, queue, result, beats if recorded.get("kind") == "fleet" else None),
                executor=executor,
                steps=steps,
                inputs=recorded,
                output=result.get("output"),
                error=result.get("error") or (_error(error) if error else None),
                created_ms=created,
                result=result,
                duration_ms=duration,
            )
        )
    return runs


class _Beats:
    """The fleet workers' last beats (`fleet/heartbeat.py`), read once when a fleet run needs them: a fleet run belongs
    to a live worker only while its worker beats, on whatever host (its pid means nothing on another one)."""

    def __init__(self, db: _Tables) -> None:
        self._db = db
        self._beats: dict[str, int] | None = None

    def beating(self, executor: Executor) -> bool:
        if self._beats is None:
            self._beats = self._read()
        beat = self._beats.get(executor.id)
        return beat is not None and time.time() * 1000 - beat <= WORKER_STALE_SECONDS * 1000

    def _read(self) -> dict[str, int]:
        if self._db.prefix:  # PostgreSQL: the table is in `public`, beside the store's
            (found,) = self._db.execute("SELECT to_regclass(?)", (WORKERS_TABLE,)).fetchone() or (None,)
        else:
            found = self._db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?", (WORKERS_TABLE,)
            ).fetchone()
        if found is None:
            return {}
        return dict(self._db.execute(f"SELECT executor_id, beat_ms FROM {WORKERS_TABLE}").fetchall())


def _status(
    status: str, executor: Executor | None, queue: str | None, result: dict[str, Any], beats: _Beats | None = None
) -> RunStatus:
    if status == "SUCCESS":
        return RESULT_STATUS.get(str(result.get("status")), "failed")
    if status == "CANCELLED":
        return "cancelled"
    if status in ("PENDING", "ENQUEUED"):
        if status == "ENQUEUED" and queue is not None:
            if resumer(queue) is None and not queue.startswith(RESUME_QUEUE):
                return "queued"  # on a fleet's queue, for a worker (`code-puppy queue add`)
            executor = resumer(queue) or executor  # handed to a `runs resume` that has not picked it up yet
        if executor is None or not executor.alive:
            return "interrupted"
        if beats is not None and status == "PENDING" and not beats.beating(executor):
            return "interrupted"  # a fleet run whose worker stopped beating: another worker takes it over
        return "running"
    return "failed"


def _inputs(text: str | None) -> dict[str, Any]:
    """A run's recorded inputs: the one dict the workflow takes (JSON as `JsonSerializer` wrote it)."""
    decoded: Any = _json(text) if text else None
    try:
        found: Any = decoded["args"][0]
    except (KeyError, IndexError, TypeError):
        return {}
    return cast(dict[str, Any], found) if isinstance(found, dict) else {}


def _plain(stored: Any) -> Any:
    """JSON as `JsonSerializer` wrote it, its dicts and tuples untagged (tagged objects stay as stored)."""
    if isinstance(stored, list):
        return [_plain(item) for item in cast(list[Any], stored)]
    if not isinstance(stored, dict):
        return stored
    value = cast(dict[str, Any], stored)
    if "$dict" in value:
        return {key: _plain(item) for key, item in cast(dict[str, Any], value["$dict"]).items()}
    if "$tuple" in value:
        return [_plain(item) for item in cast(list[Any], value["$tuple"])]
    return value


def _json(text: str) -> Any:
    try:
        return _plain(json.loads(text))
    except ValueError:
        return None  # a row another serializer wrote (a pickle): never unpickled here


def _error(text: str) -> str:
    decoded: Any = _json(text)
    if isinstance(decoded, dict) and "$error" in decoded:
        error = cast(dict[str, Any], decoded)
        return f"{error['$error']}: {error.get('message', '')}"
    return "the run failed (its error was stored in a form code-puppy does not read)"


def find_run(reference: str) -> DurableRun:
    """The one run `reference` names (its id or a unique prefix); `ConfigError` (exit 2) when none or several."""
    found = list_runs(run_id=reference)
    exact = [run for run in found if run.id == reference]
    if exact:
        return exact[0]
    if not found:
        raise ConfigError(f"no durable run {reference} (code-puppy runs list shows them)")
    if len(found) > 1:
        raise ConfigError(f"{reference} names {len(found)} durable runs; give more of the id")
    return found[0]


def cancel_waiting(found: DurableRun) -> str | None:
    """Cancel `found` if it is a queued run no worker took (it never starts) or a queued run a worker runs (it stops
    at its next step, its worktree kept): what `code-puppy runs cancel` says then; None for any other run (an
    interrupted one is the caller's to recover, a finished one cannot be cancelled)."""
    from code_puppy.durable.system import cancel_run

    if found.status == "queued":
        cancel_run(found.id)
        return f"cancelled queued run {found.id}"
    if found.status == "running" and found.inputs.get("kind") == "fleet":
        cancel_run(found.id)
        return f"cancelled run {found.id}: it stops at its next step; its worktree is kept"
    return None


def interrupted_run_of(session_id: str) -> DurableRun | None:
    """The session's interrupted durable run, if it has one: its turn is the run's to finish (`runs resume`) or to
    drop (`runs cancel`), never a new turn's to recover."""
    return next((run for run in list_runs(session_id=session_id) if run.status == "interrupted"), None)


def last_step(run_id: str) -> int:
    """The last step `run_id` recorded: a process resuming it replays every step up to it."""
    with system_tables() as db:
        if db is None:
            return 0
        (last,) = db.execute(
            "SELECT max(function_id) FROM {t}operation_outputs WHERE workflow_uuid = ?", (run_id,)
        ).fetchone()
    return last or 0


def refuse_interrupted_durable_run(session_id: str) -> None:
    """A session whose durable run was interrupted goes on with that run, not with a new turn: a journal recovery now
    would add the run's steps, and `runs resume` would add them again.

    Raises:
        ConfigError: The session has an interrupted durable run (exit 2, naming what to do).
    """
    if (run := interrupted_run_of(session_id)) is not None:
        raise ConfigError(
            f"session {session_id[:8]} has an interrupted durable run: continue it with `code-puppy runs resume "
            f"{run.id}`, or drop it with `code-puppy runs cancel {run.id}`"
        )
