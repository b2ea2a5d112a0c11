"""Running runs and the steer inbox in sessions.db: registration, stale pids, delivery, withdrawal."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from code_puppy.run.steering import SteeringInbox, accepting_steers
from code_puppy.sessions.runs import RunRegistry, SteerKind, cancel, steer
from code_puppy.sessions.schema import Database, Location


@pytest.fixture
def opened(location: Location) -> Iterator[Callable[[], Database]]:
    """Opens the test's store, as often as asked (a connection per process); closed at the test's end."""
    databases: list[Database] = []

    def open_database() -> Database:
        databases.append(Database(location))
        return databases[-1]

    yield open_database
    for database in databases:
        database.close()


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_no_running_run_sends_nothing(tmp_path: Path, opened: Callable[[], Database]) -> None:
    runs = RunRegistry(opened())
    assert steer(runs, "hello", project_dir=tmp_path, timeout=0.1) == (
        False,
        f"no running code-puppy run in {tmp_path}; nothing was sent",
    )
    assert runs.send("some-session", "hello") is None


def test_a_crashed_process_leaves_no_running_session(tmp_path: Path, opened: Callable[[], Database]) -> None:
    database = opened()
    runs = RunRegistry(database)
    runs.register("crashed", tmp_path)
    with database.write() as db:  # as if the registering process had been killed with -9
        db.execute("UPDATE running_runs SET pid = ?", (dead_pid(),))
        db.execute("INSERT INTO steers (session_id, text, created_at) VALUES ('crashed', 'x', 'now')")
    assert runs.running(project_dir=tmp_path) == []
    with database.read() as db:
        assert db.execute("SELECT count(*) FROM running_runs").fetchone() == (0,)
        assert db.execute("SELECT status FROM steers").fetchall() == [("rejected",)]


def test_a_reused_pid_is_not_the_registered_process(tmp_path: Path, opened: Callable[[], Database]) -> None:
    database = opened()
    runs = RunRegistry(database)
    runs.register("old", tmp_path)
    with database.write() as db:  # our pid, but a different start time: a later process reusing the pid
        db.execute("UPDATE running_runs SET pid_started = '1'")
    assert runs.running(project_dir=tmp_path) == []


def test_newest_running_run_of_the_project_is_chosen(tmp_path: Path, opened: Callable[[], Database]) -> None:
    runs = RunRegistry(opened())
    runs.register("older", tmp_path)
    runs.register("newer", tmp_path)
    runs.register("elsewhere", tmp_path / "other")
    assert [run.session_id for run in runs.running(project_dir=tmp_path)] == ["newer", "older"]
    assert [run.session_id for run in runs.running(session_prefix="else")] == ["elsewhere"]
    assert runs.running()[0].pid == os.getpid()


async def test_a_steer_reaches_the_inbox_of_the_running_process(tmp_path: Path, opened: Callable[[], Database]) -> None:
    runs = RunRegistry(opened())
    inbox = SteeringInbox()
    async with accepting_steers(runs, "session-1", tmp_path, inbox, interval=0.02):
        ok, message = await asyncio.to_thread(steer, runs, "focus on the parser", project_dir=tmp_path, timeout=5)
        assert (ok, message) == (True, f"steered session session- (pid {os.getpid()})")
        assert inbox.take_undelivered() == ["focus on the parser"]  # held: no run was bound to the inbox
    assert runs.running(project_dir=tmp_path) == []
    assert steer(runs, "late", project_dir=tmp_path, timeout=0.1)[0] is False


async def test_a_cancel_request_from_another_process_calls_the_front_ends_cancel(
    tmp_path: Path, opened: Callable[[], Database]
) -> None:
    runs, sender = RunRegistry(opened()), RunRegistry(opened())  # the running process's connection, the sender's
    inbox, cancelled = SteeringInbox(), asyncio.Event()
    async with accepting_steers(runs, "session-1", tmp_path, inbox, cancel=cancelled.set, interval=0.02):
        ok, line = await asyncio.to_thread(cancel, sender, project_dir=tmp_path, session_prefix="sess", timeout=5)
        assert (ok, line) == (True, f"cancelled the turn of session session- (pid {os.getpid()})")
        await asyncio.wait_for(cancelled.wait(), 5)
        assert inbox.take_undelivered() == []  # a cancel is no text for the model
    assert cancel(sender, project_dir=tmp_path, timeout=0.1) == (
        False,
        f"no running code-puppy run in {tmp_path}; nothing was cancelled",
    )
    # A run whose front end takes no cancel refuses it at once; the sender is told, and nothing stays queued.
    async with accepting_steers(runs, "uncancellable", tmp_path, inbox, interval=0.02):
        ok, line = await asyncio.to_thread(cancel, sender, project_dir=tmp_path, timeout=5)
        assert (ok, line) == (False, "session uncancel is no longer running a turn; nothing was cancelled")
    assert runs.pending("uncancellable") == []


async def test_a_steer_nobody_takes_is_withdrawn(tmp_path: Path, opened: Callable[[], Database]) -> None:
    database = opened()
    runs = RunRegistry(database)
    runs.register("stuck", tmp_path)  # registered, but nothing polls
    ok, message = steer(runs, "hello?", project_dir=tmp_path, timeout=0.2)
    assert (ok, message) == (False, "session stuck is no longer running a turn; nothing was sent")
    with database.read() as db:
        assert db.execute("SELECT count(*) FROM steers").fetchone() == (0,)


async def test_leaving_rejects_pending_steers(tmp_path: Path, db_path: Path) -> None:
    # SQLite's polling only: on PostgreSQL the steer would wake the run at once (the test below).
    database = Database(db_path)
    runs = RunRegistry(database)
    async with accepting_steers(runs, "s", tmp_path, SteeringInbox(), interval=60):
        steer_id = runs.send("s", "never polled")
        assert steer_id is not None
    assert runs.status(steer_id) == "rejected"


class WithdrawnOnRead(RunRegistry):
    """The running process's registry, with `code-puppy steer` withdrawing each steer (on its own connection) just
    after the poll has read it: the moment between `pending()` and `settle()`."""

    def __init__(self, database: Database, sender: RunRegistry) -> None:
        super().__init__(database)
        self.sender = sender

    def pending(self, session_id: str) -> list[tuple[int, str, SteerKind]]:
        rows = super().pending(session_id)
        for steer_id, _, _ in rows:
            assert self.sender.withdraw(steer_id)
        return rows


async def test_a_steer_withdrawn_before_it_is_settled_is_neither_delivered_nor_waiting(
    tmp_path: Path, opened: Callable[[], Database]
) -> None:
    sender = RunRegistry(opened())
    runs = WithdrawnOnRead(opened(), sender)
    inbox = SteeringInbox()
    async with accepting_steers(runs, "s", tmp_path, inbox, interval=0.01):
        steer_id = sender.send("s", "too late")
        assert steer_id is not None
        for _ in range(500):  # the poll reads, the withdrawal lands, and the poll settles in one step
            if sender.status(steer_id) is None:
                break
            await asyncio.sleep(0.01)
        assert sender.status(steer_id) is None
        assert inbox.waiting == 0
        assert inbox.take_undelivered() == []


async def test_on_postgresql_a_steer_wakes_the_running_process_at_once(tmp_path: Path, postgres_url: str) -> None:
    running, sender = Database(postgres_url), Database(postgres_url)
    try:
        runs, inbox = RunRegistry(running), SteeringInbox()
        async with accepting_steers(runs, "s", tmp_path, inbox, interval=60):  # no poll within the test
            await asyncio.sleep(0.5)  # the listener is up
            ok, line = await asyncio.to_thread(steer, RunRegistry(sender), "now", project_dir=tmp_path, timeout=10)
            assert (ok, line) == (True, f"steered session s (pid {os.getpid()})")
            assert inbox.take_undelivered() == ["now"]
    finally:
        running.close()
        sender.close()


async def test_on_postgresql_a_cancel_wakes_the_running_process_at_once(tmp_path: Path, postgres_url: str) -> None:
    running, sender = Database(postgres_url), Database(postgres_url)
    try:
        cancelled = asyncio.Event()
        async with accepting_steers(
            RunRegistry(running), "s", tmp_path, SteeringInbox(), cancel=cancelled.set, interval=60
        ):
            await asyncio.sleep(0.5)  # the listener is up
            ok, line = await asyncio.to_thread(cancel, RunRegistry(sender), project_dir=tmp_path, timeout=10)
            assert (ok, line) == (True, f"cancelled the turn of session s (pid {os.getpid()})")
            assert cancelled.is_set()
    finally:
        running.close()
        sender.close()
