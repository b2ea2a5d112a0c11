"""What must not break: a rewind killed mid-way is finished by the next start; no git means no checkpoints, not a
broken run; a sessions database made before checkpoints existed gains them without losing anything."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
from pathlib import Path

from code_puppy.sessions.schema import MIGRATIONS, migrate
from code_puppy.sessions.store import SqliteConversationStore
from tests.checkpoints.test_rewind_cli import YOLO, agent_turn, files, state
from tests.conftest import run_cli, start_cli, wait_for
from tests.fake_llm import FakeLLMServer, text

__all__ = ("files",)


def test_kill_9_during_a_rewind_then_the_next_start_finishes_it(
    server: FakeLLMServer, files: Path, code_puppy_home: Path
) -> None:
    original = state(files)
    agent_turn(server)
    turn = run_cli("-p", "change things", *YOLO, "--output-format", "json", cwd=files)
    session_id = json.loads(turn.stdout)["session_id"]
    (record,) = (code_puppy_home / "checkpoints").glob("*/")
    # Each file written waits 3 s (a test-only knob), so the process can be killed after the first of four.
    rewinding = start_cli("rewind", cwd=files, env={"CODE_PUPPY_TEST_REWIND_DELAY": "3"})
    wait_for(lambda: (files / "app.py").read_text() == "version = 1\n", what="the first file restored")
    os.kill(rewinding.pid, signal.SIGKILL)
    rewinding.communicate()
    assert (record / "rewind.json").is_file()
    assert (files / "new.py").exists()  # half done

    server.script(text("Hello again."))
    started = run_cli("-p", "hello", cwd=files)

    assert started.returncode == 0, started.stderr
    assert "code-puppy: note: finished a rewind that was interrupted: 4 files restored" in started.stderr
    assert state(files) == original
    assert not (record / "rewind.json").exists()
    listed = run_cli("checkpoints", "--session", session_id, "--output-format", "json", cwd=files)
    listed = json.loads(listed.stdout)["checkpoints"]
    assert [(item["kind"], item["rewound"]) for item in listed] == [("rewind", False), ("turn", True)]
    with SqliteConversationStore(code_puppy_home / "sessions.db") as store:
        conversation = asyncio.run(store.load(session_id))
        assert conversation is not None and conversation.messages == []  # the conversation part was finished too


def test_without_git_a_run_works_and_says_checkpoints_are_off(
    server: FakeLLMServer, project: Path, tmp_path: Path
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    server.script(text("Still fine."))

    completed = run_cli("-p", "hello", cwd=project, env={"PATH": str(empty)})

    assert (completed.returncode, completed.stdout) == (0, "Still fine.\n")
    assert completed.stderr.count("checkpoints are off") == 1
    assert "code-puppy: note: checkpoints are off: git is not installed\n" in completed.stderr


def test_checkpoints_can_be_switched_off(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    config = code_puppy_home / "config.toml"
    config.write_text(config.read_text() + "[checkpoints]\nenabled = false\n")
    agent_turn(server)
    (project / "app.py").write_text("version = 1\n")
    (project / "doomed.txt").write_text("x\n")

    assert run_cli("-p", "change things", *YOLO, cwd=project).returncode == 0

    assert not (code_puppy_home / "checkpoints").exists()
    assert json.loads(run_cli("checkpoints", "--output-format", "json", cwd=project).stdout)["checkpoints"] == []


def test_a_bad_checkpoints_config_is_exit_2(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    config = code_puppy_home / "config.toml"
    config.write_text(config.read_text() + "[checkpoints]\nmax_file_mb = 0\n")
    for args in (("-p", "hi"), ("rewind",)):
        completed = run_cli(*args, cwd=project)
        assert completed.returncode == 2 and "max_file_mb" in completed.stderr and "Traceback" not in completed.stderr


def test_a_database_of_the_previous_schema_gains_checkpoints_and_keeps_its_sessions(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    path = code_puppy_home / "sessions.db"
    db = sqlite3.connect(path, isolation_level=None)
    migrate(db, MIGRATIONS[:4])  # the schema as it was before checkpoints
    db.close()
    server.script(text("Answer one."))
    session_id = json.loads(run_cli("-p", "before", "--output-format", "json", cwd=project).stdout)["session_id"]
    # That run already used the new code: roll the database back to the old schema with its session in it.
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("DROP TABLE checkpoints")
    db.execute("DELETE FROM schema_migrations WHERE name = 'm006_checkpoints'")
    db.close()

    agent_turn(server)
    (project / "app.py").write_text("version = 1\n")
    (project / "doomed.txt").write_text("x\n")
    assert run_cli("-c", "-p", "change things", *YOLO, cwd=project).returncode == 0

    with SqliteConversationStore(path) as store:
        conversation = asyncio.run(store.load(session_id))
        assert conversation is not None and len(conversation.messages) == 10  # 2 from before, 8 of the turn
        assert "before" in str(conversation.messages[0])
        applied = {name for (name,) in store.database.read().__enter__().execute("SELECT name FROM schema_migrations")}
    assert "m006_checkpoints" in applied
    listed = json.loads(run_cli("checkpoints", "--output-format", "json", cwd=project).stdout)
    assert listed["session_id"] == session_id and len(listed["checkpoints"]) == 1
