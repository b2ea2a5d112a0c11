"""`code-puppy runs`: durable runs (`--durable`), listed, shown, resumed and cancelled.

`list` and `show` read DBOS's system database without launching DBOS: a launched process takes over work, and these
must never continue a run. Only `resume` does, in the foreground, in a process of its own.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from code_puppy.cli.common import NAME, fail, guarded, leave

if TYPE_CHECKING:
    from code_puppy.durable.runs import DurableRun

JSON_OPTIONS = (
    click.option("--json", "as_json", is_flag=True, help="JSON instead of text."),
    click.option(
        "--output-format", type=click.Choice(["text", "json"]), default="text", help="`json` is --json.", hidden=False
    ),
)


def _json_options(command: Any) -> Any:
    for option in reversed(JSON_OPTIONS):
        command = option(command)
    return command


@click.group()
def runs() -> None:
    """Durable runs (`code-puppy -p ... --durable`): list, show, resume, cancel."""


@runs.command("list")
@_json_options
def list_runs(*, as_json: bool, output_format: str) -> None:
    """The durable runs, newest first: id, session, status, process, finished steps, cost."""

    def run() -> int:
        from code_puppy.durable.runs import list_runs

        listed = [found.listed(_cost(found.id)) for found in list_runs()]
        if as_json or output_format == "json":
            import json

            click.echo(json.dumps(listed, indent=1))
            return 0
        if not listed:
            click.echo("no durable runs (start one with code-puppy -p PROMPT --durable)")
        for entry in listed:
            cost = "" if entry["cost_usd"] is None else f"  ${entry['cost_usd']:.4f}"
            click.echo(
                f"{entry['id']}  {entry['status']:<11}  session {(entry['session_id'] or '-')[:8]}  "
                f"{entry['steps']} steps  {entry['worker'] or '-'}{cost}"
            )
        return 0

    sys.exit(guarded(run))


@runs.command("show")
@click.argument("run_id", type=NAME, metavar="ID")
@_json_options
@click.option(
    "--follow",
    is_flag=True,
    help="Stream the run's events as JSON lines in -p --output-format stream-json's shapes (a message at a time: "
    "text, thinking, requests, tool calls, results, the result) until it ends; exit with its exit code.",
)
def show(*, run_id: str, as_json: bool, output_format: str, follow: bool) -> None:
    """One durable run: its status, output, cost, session, finished steps and error."""

    def run() -> int:
        from code_puppy.durable.runs import find_run

        if follow:
            from code_puppy.durable.follow import follow as follow_run

            return follow_run(run_id, sys.stdout)
        found = find_run(run_id)
        shown = {
            "id": found.id,
            "status": found.status,
            "output": found.output,
            "cost_usd": _cost(found.id) if found.result.get("cost_usd") is None else found.result["cost_usd"],
            "session_id": found.session_id or _journaling_session(found),
            "steps": found.steps,
            "error": found.error,
            "exit_code": found.result.get("exit_code"),
            "branch": found.result.get("branch") or found.branch,
            "diff_stat": found.result.get("diff_stat"),
            "clone": found.result.get("clone"),
            "worker": found.result.get("worker") or (found.executor.worker if found.executor is not None else None),
        }
        if as_json or output_format == "json":
            import json

            click.echo(json.dumps(shown, indent=1))
            return 0
        for key, value in shown.items():
            if key != "output" and value is not None:
                click.echo(f"{key}: {value}")
        if found.output is not None:
            click.echo(f"output:\n{found.output}")
        return 0

    sys.exit(guarded(run))


def _journaling_session(found: DurableRun) -> str | None:
    """The session a run that has not ended journals its turn in (a fleet run's is made by its worker: `steer
    --session` it)."""
    if found.status in ("succeeded", "failed", "cancelled"):
        return None
    from code_puppy.durable.follow import journaling_session

    return journaling_session(found.id)


@runs.command()
@click.argument("run_id", type=NAME, metavar="ID")
def resume(*, run_id: str) -> None:
    """Continue an interrupted durable run at its last finished step, in the foreground, with the options it started
    with; its output and exit code are a headless run's."""

    def run() -> int:
        from code_puppy.cli.common import debug_requested
        from code_puppy.durable.runs import find_run, last_step

        found = find_run(run_id)
        if found.inputs.get("kind") == "fleet":
            fail(f"run {found.id} is a queued run: a worker continues it (start `code-puppy worker`)")
        found = _interrupted(found, "resume")
        _claim_journals(found)
        from code_puppy.headless.durable import exit_now, resume

        code = resume(found, debug=debug_requested(), recorded=last_step(found.id))
        exit_now(code)  # DBOS's teardown would only wait for its threads
        return code

    leave(guarded(run))


@runs.command()
@click.argument("run_id", type=NAME, metavar="ID")
def cancel(*, run_id: str) -> None:
    """Drop a queued run (it never starts) or an interrupted durable run: it never continues, and the steps it finished
    join its session as a turn interrupted by a crash does."""

    def run() -> int:
        import asyncio

        from code_puppy.durable.runs import cancel_waiting, find_run
        from code_puppy.durable.system import cancel_run

        found = find_run(run_id)
        if (line := cancel_waiting(found)) is not None:  # a queued run: it never starts, or stops at its next step
            click.echo(line)
            return 0
        found = _interrupted(found, "cancel")
        cancel_run(found.id)
        note = asyncio.run(_recover(found)) if found.session_id is not None else None
        click.echo(f"cancelled durable run {found.id}" + (f"; {note}" if note else ""))
        return 0

    sys.exit(guarded(run))


def _interrupted(found: DurableRun, verb: str) -> DurableRun:
    """`found`, if its process is gone and it did not finish; else one line and exit 2. A run of another host (a
    shared PostgreSQL store) is never taken for dead: its pid means nothing here, so only that host can resume or
    cancel it."""
    executor = found.executor
    if found.status == "running" and executor is not None and not executor.local:
        fail(
            f"durable run {found.id} belongs to a process on host {executor.hostname} (pid {executor.pid}), which "
            f"this host cannot check; {verb} it on {executor.hostname}"
        )
    if found.status == "running":
        where = f" (pid {executor.pid})" if executor is not None else ""
        fail(f"durable run {found.id} is running{where}; only an interrupted run can {verb}")
    if found.status != "interrupted":
        fail(f"durable run {found.id} {found.status}; only an interrupted run can {verb}")
    from code_puppy.paths import find_project_root

    recorded = found.inputs.get("project_root")
    if verb == "resume" and recorded != str(find_project_root(Path.cwd())):
        fail(f"durable run {found.id} belongs to the project {recorded}: resume it there")
    return found


def _cost(run_id: str) -> float | None:
    """What a durable run's model requests cost (its requests' `run_id`s start with its id), from the costs book (the
    SQLite file or the PostgreSQL store)."""
    from code_puppy.paths import store_exists, store_location

    if not store_exists():
        return None
    import sqlite3

    from code_puppy.errors import ConfigError
    from code_puppy.sessions.schema import Database

    try:
        database = Database(store_location(), readonly=True)
        try:
            with database.read() as db:
                (total,) = db.execute(
                    "SELECT sum(cost_usd) FROM requests WHERE substr(run_id, 1, ?) = ?",
                    (len(run_id) + 1, run_id + ":"),
                ).fetchone()
        finally:
            database.close()
    except (ConfigError, sqlite3.OperationalError) as exc:
        if "no such table" in str(exc):
            return None  # a worker is making the store this moment: nothing was priced in it yet
        raise
    return total


def _claim_journals(found: DurableRun) -> None:
    """The journals the run's dead process left become this process's: the resumed run replays their steps, and its
    save deletes them (a later `-c` must not recover them again)."""
    if found.session_id is None:
        return
    from code_puppy.paths import store_location
    from code_puppy.sessions.journal import Journal
    from code_puppy.sessions.schema import Database

    database = Database(store_location())
    try:
        journal = Journal(database)
        for turn in journal.read(found.session_id):
            executor = found.executor
            if turn.orphaned and (executor is None or turn.pid == executor.pid):
                journal.claim(turn, into=found.session_id)
    finally:
        database.close()


async def _recover(found: DurableRun) -> str | None:
    """Its session with the run's journaled steps recovered, as a crashed turn's are."""
    from code_puppy.run.history_persistence import recover_interrupted_turn
    from code_puppy.sessions.session import Session, find_session
    from code_puppy.sessions.store import open_store

    assert found.session_id is not None
    with open_store() as store:
        session = await Session.resume(store, find_session(store, found.session_id), model=None)
        return await recover_interrupted_turn(session)
