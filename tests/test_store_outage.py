"""A PostgreSQL store that goes away for a while (a restart, a failover): the connection it dropped is made again once
it answers, and a fleet run in progress when it went away still succeeds, its finished steps not repeated. On a server
of the module's own, stopped (`-m immediate`, its connections dropped as in a crash) and started again."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CODE_PUPPY, run_cli, wait_for
from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.postgres import PostgresServer, start_server


@pytest.fixture(scope="module")
def own_server() -> Iterator[PostgresServer]:
    """A server this module alone stops and starts (the session's is shared by other tests)."""
    import shutil

    # Its commits reach the disk before they return (the shared server's do not, for speed): an immediate stop is a
    # crash that loses nothing committed, as on a production server.
    server, stop = start_server(crash_safe=True)
    try:
        yield server
    finally:
        subprocess.run(stop, capture_output=True, timeout=60)
        shutil.rmtree(server.directory, ignore_errors=True)


def back_in(server: PostgresServer, seconds: float) -> threading.Thread:
    """Start `server` again after `seconds`, in a thread."""
    thread = threading.Thread(target=lambda: (time.sleep(seconds), server.start()))
    thread.start()
    return thread


def test_a_dropped_connection_is_made_again_once_the_store_answers(
    own_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from code_puppy.sessions import postgres

    url = own_server.create_database()
    connection = postgres.connect(url)
    try:
        with connection.transaction():
            connection.execute("CREATE TABLE notes (text TEXT)")
        own_server.stop()
        restarted = back_in(own_server, 1.5)
        began = time.monotonic()
        with connection.transaction():  # BEGIN on the dead connection: reconnects, waiting for the server
            connection.execute("INSERT INTO notes VALUES (?)", ("after the restart",))
        restarted.join()
        assert time.monotonic() - began >= 1.0
        assert connection.execute("SELECT text FROM notes").fetchall() == [("after the restart",)]

        with pytest.raises(sqlite3.OperationalError), connection.transaction():  # broken in the middle: it fails
            connection.execute("INSERT INTO notes VALUES (?)", ("lost",))
            own_server.stop()
            connection.execute("INSERT INTO notes VALUES (?)", ("lost too",))
        own_server.start()
        assert connection.execute("SELECT text FROM notes").fetchall() == [("after the restart",)]  # nothing half-done

        own_server.stop()
        monkeypatch.setattr(postgres, "RECONNECT_SECONDS", 1.0)
        with pytest.raises(sqlite3.OperationalError) as raised:
            connection.execute("SELECT 1")
        assert str(raised.value).startswith(f"the store at {postgres.redacted(url)} did not answer for 1 s: ")
        assert "\n" not in str(raised.value)
    finally:
        if not _answers(own_server):
            own_server.start()
        connection.close()


def _answers(server: PostgresServer) -> bool:
    import psycopg

    try:
        psycopg.connect(server.url("postgres"), connect_timeout=2).close()
    except psycopg.Error:
        return False
    return True


def test_a_fleet_run_outlives_a_store_that_went_away_for_a_while(
    own_server: PostgresServer, server: FakeLLMServer, code_puppy_home: Path, tmp_path: Path
) -> None:
    url = own_server.create_database()
    env = {**os.environ, "CODE_PUPPY_STORAGE_URL": url}
    repository = tmp_path / "repository"
    repository.mkdir()
    (repository / "README.md").write_text("# demo\n")
    for command in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@e.invalid", "commit", "-qm", "s"],
    ):
        subprocess.run(["git", *command], cwd=repository, check=True, capture_output=True)
    started = tmp_path / "started"
    server.per_conversation = True
    server.script(
        tool_calls(call("shell", {"command": f"touch {started}; sleep 2; echo done > change.txt"})), text("ok")
    )
    worker = subprocess.Popen(
        [str(CODE_PUPPY), "worker", "--permission-mode", "yolo"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        added = run_cli("queue", "add", "-p", "survive", "--project", str(repository), cwd=tmp_path, env=env)
        assert added.returncode == 0, added.stderr
        run_id = added.stdout.splitlines()[-1]
        wait_for(started.exists, what="the tool call")
        own_server.stop()  # while the tool runs: its result, the next request's record, the journal all wait
        time.sleep(5)
        assert worker.poll() is None
        own_server.start()

        record: dict[str, object] = {}

        def ended() -> bool:
            shown = run_cli("runs", "show", run_id, "--json", cwd=tmp_path, env=env)
            record.update(json.loads(shown.stdout) if shown.returncode == 0 else {})
            return record.get("status") in ("succeeded", "failed", "cancelled")

        wait_for(ended, what="the run's end", timeout=90)
        assert (record["status"], record["output"], record["error"], record["diff_stat"]) == (
            "succeeded",
            "ok",
            None,
            "1 file changed, 1 insertion(+)",
        )
        assert len(server.requests) == 2  # nothing sent again
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=60)
    assert worker.returncode == 0, stderr
    assert "code-puppy: worker heartbeat failed: " in stderr  # said while the store was away, and no traceback
    assert "Traceback" not in stderr
