"""The durable runs and the fleet's queued runs on the sessions page, with the fleet's workers: read through
`durable/` alone (DBOS's tables and the workers' heartbeat table, DBOS never launched in this server), streamed to the
page when they change, and a queued run cancelled as `code-puppy runs cancel` cancels it (`cancel_waiting`)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncGenerator, Callable
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from code_puppy.core.session_text import age
from code_puppy.durable.runs import DurableRun, cancel_waiting, find_run, list_runs
from code_puppy.durable.workers import list_workers
from code_puppy.errors import ConfigError
from code_puppy.sessions.schema import Database

RUNS_POLL = 2.0
"""Seconds between two reads of DBOS's tables for the runs list (one read is a few milliseconds: benchmarks/web.py)."""
STOP_POLL = 0.25
"""Seconds between two looks, while the stream waits, at whether the server is shutting down."""
PROMPT_WIDTH = 80


class RunsFailure(Exception):
    """A runs request that cannot be served (the app's `Failure` by another name: this module cannot import it)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def entry(run: DurableRun, cost: float | None, now: datetime) -> dict[str, Any]:
    """A run as the page lists it."""
    kind = "fleet" if run.inputs.get("kind") == "fleet" else "durable"
    prompt = " ".join(str(run.inputs.get("prompt") or "").split())
    recorded_cost = run.result.get("cost_usd")
    return {
        "id": run.id,
        "kind": kind,
        "status": run.status,
        "prompt": prompt if len(prompt) <= PROMPT_WIDTH else prompt[: PROMPT_WIDTH - 1] + "…",
        "worker": run.result.get("worker") or (run.executor.worker if run.executor is not None else None),
        "branch": run.result.get("branch"),
        "cost_usd": recorded_cost if isinstance(recorded_cost, (int, float)) else cost,
        "age": age(datetime.fromtimestamp(run.created_ms / 1000, UTC), now),
        "session_id": run.session_id,
        "cancellable": run.status == "queued" or (run.status == "running" and kind == "fleet"),
    }


def _cost(database: Database, run_id: str) -> float | None:
    """What a run's model requests cost (their `run_id`s start with its id and a colon), as `runs list` adds it up."""
    with database.read() as db:
        (total,) = db.execute(
            "SELECT sum(cost_usd) FROM requests WHERE substr(run_id, 1, ?) = ?", (len(run_id) + 1, run_id + ":")
        ).fetchone()
    return total


def snapshot(database: Database) -> dict[str, Any]:
    """The runs, newest first, and the workers that beat: what the page shows (blocking: run it in a thread)."""
    now = datetime.now(UTC)
    runs = [
        # A queued run made no request yet, a finished fleet run recorded its cost: the costs book for the others.
        entry(run, None if run.status == "queued" or "cost_usd" in run.result else _cost(database, run.id), now)
        for run in list_runs()
    ]
    workers = [
        {
            "worker": beat.worker,
            "host": beat.host,
            "pid": beat.pid,
            "concurrency": beat.concurrency,
            "in_hand": beat.in_hand,
            "last_beat": f"{beat.age():.0f}s ago",
            "alive": beat.alive,
        }
        for beat in list_workers()
    ]
    return {"runs": runs, "workers": workers}


class RunsView:
    """The routes of the runs list: a JSON read, an event stream, the cancel of a queued run."""

    def __init__(self, database: Database, stopping: Callable[[], bool]) -> None:
        self.database = database
        self.stopping = stopping

    async def read(self) -> dict[str, Any]:
        try:
            return await asyncio.to_thread(snapshot, self.database)
        except ConfigError as exc:  # the store's StoreError too: its one line, on the page
            return {"runs": [], "workers": [], "error": str(exc)}
        except sqlite3.Error as exc:  # the costs book mid-migration or locked past its timeout
            return {"runs": [], "workers": [], "error": f"cannot read the runs' costs: {exc}"}

    async def listed(self, request: Request) -> Response:
        return JSONResponse(await self.read())

    async def stream(self, request: Request) -> Response:
        async def events() -> AsyncGenerator[str]:
            last = None
            while not self.stopping():
                found = await self.read()
                shown = {**found, "runs": [{**run, "age": None} for run in found["runs"]]}  # ages alone: no event
                if shown != last:
                    last = shown
                    yield f"data: {json.dumps(found)}\n\n"
                for _ in range(int(RUNS_POLL / STOP_POLL)):  # a server shutting down is not kept waiting
                    if self.stopping():
                        return
                    await asyncio.sleep(STOP_POLL)

        return StreamingResponse(events(), media_type="text/event-stream", headers={"cache-control": "no-store"})

    async def cancel(self, request: Request) -> Response:
        """`code-puppy runs cancel ID` of a queued run: one no worker took never starts; one a worker runs stops at
        its next step. Any other run is refused (409): an interrupted one is `runs cancel`'s to recover."""

        def cancel() -> str:
            found = find_run(request.path_params["run_id"])
            line = cancel_waiting(found)
            if line is None:
                raise RunsFailure(409, f"run {found.id} is {found.status}: only a queued run is cancelled here")
            return line

        try:
            line = await asyncio.to_thread(cancel)
        except ConfigError as exc:
            raise RunsFailure(404 if "no durable run" in str(exc) else 400, str(exc)) from None
        return JSONResponse({"cancelled": True, "message": line})
