"""What must not break: a rewind killed mid-way is finished by the next start; no git means no checkpoints, not a
broken run; a sessions database made before checkpoints existed gains them without losing anything."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from code_puppy.sessions.schema import MIGRATIONS, migrate
from code_puppy.sessions.store import SqliteConversationStore
from tests.checkpoints.test_rewind_cli import YOLO, agent_turn, files, state
from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, text

__all__ = ("files",)


KILLED_AT = """
import os, signal, sys, threading

module, name = sys.argv[1].split(":")


def kill(frame, event, arg):
    if event == "return" and frame.f_code.co_qualname == name and frame.f_globals.get("__name__") == module:
        os.kill(os.getpid(), signal.SIGKILL)


sys.setprofile(kill)
threading.setprofile(kill)
from code_puppy.cli import cli

cli(sys.argv[2:], prog_name="code-puppy")
"""
"""The installed package's command line (`code_puppy.cli:cli`, what the console script runs), killed with SIGKILL the
moment the function `module:qualified.name` returns for the first time: a real process killed at an exact point of
the real code, with nothing in that code to stop it there."""


def killed_at(function: str, *args: str, cwd: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", KILLED_AT, function, *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == -signal.SIGKILL, done.stderr


def checkpoints_of(session_id: str, cwd: Path) -> list[dict[str, Any]]:
    listed = run_cli("checkpoints", "--session", session_id, "--output-format", "json", cwd=cwd)
    return json.loads(listed.stdout)["checkpoints"]


def checkpoint_kinds(session_id: str, cwd: Path) -> list[tuple[str, bool]]:
    return [(item["kind"], item["rewound"]) for item in checkpoints_of(session_id, cwd)]


def stored_messages(home: Path, session_id: str) -> int:
    with SqliteConversationStore(home / "sessions.db") as store:
        conversation = asyncio.run(store.load(session_id))
    assert conversation is not None
    return len(conversation.messages)


def test_kill_9_during_a_rewind_then_the_next_start_finishes_it(
    server: FakeLLMServer, files: Path, code_puppy_home: Path
) -> None:
    original = state(files)
    agent_turn(server)
    turn = run_cli("-p", "change things", *YOLO, "--output-format", "json", cwd=files)
    session_id = json.loads(turn.stdout)["session_id"]
    (record,) = (code_puppy_home / "checkpoints").glob("*/")
    killed_at("code_puppy.checkpoints.rewind:write_file", "rewind", cwd=files)  # after the first of four files
    assert (files / "app.py").read_text() == "version = 1\n"
    assert (record / "rewind.json").is_file()
    assert (files / "new.py").exists()  # half done

    server.script(text("Hello again."))
    started = run_cli("-p", "hello", cwd=files)

    assert started.returncode == 0, started.stderr
    assert "code-puppy: note: finished a rewind that was interrupted: 4 files restored" in started.stderr
    assert state(files) == original
    assert not (record / "rewind.json").exists()
    assert checkpoint_kinds(session_id, files) == [("rewind", False), ("turn", True)]
    assert stored_messages(code_puppy_home, session_id) == 0  # the conversation part was finished too


def test_rewind_after_a_rewind_killed_between_its_log_and_its_end_only_finishes_it_and_records_it_once(
    server: FakeLLMServer, files: Path, code_puppy_home: Path
) -> None:
    original = state(files)
    agent_turn(server)
    turn = run_cli("-p", "change things", *YOLO, "--output-format", "json", cwd=files)
    session_id = json.loads(turn.stdout)["session_id"]
    (record,) = (code_puppy_home / "checkpoints").glob("*/")
    # Every file written and the rewind recorded, then killed: its record is left, and the conversation not cut yet.
    killed_at("code_puppy.sessions.checkpoints:CheckpointLog.add", "rewind", cwd=files)
    assert (record / "rewind.json").is_file()
    assert state(files) == original
    assert checkpoint_kinds(session_id, files) == [("rewind", False), ("turn", True)]
    assert stored_messages(code_puppy_home, session_id) == 8

    dry = run_cli("rewind", "--dry-run", cwd=files)
    assert (dry.returncode, dry.stderr) == (0, "")
    assert dry.stdout == (
        "would finish a rewind that was interrupted: 4 files to restore, and nothing more (rewind again to go further "
        "back)\n"
    )
    assert (record / "rewind.json").is_file() and stored_messages(code_puppy_home, session_id) == 8

    finished = run_cli("rewind", cwd=files)

    assert (finished.returncode, finished.stderr) == (0, "")
    assert finished.stdout == (
        "finished a rewind that was interrupted: 4 files restored, and nothing more (rewind again to go further back)\n"
    )
    assert state(files) == original  # not rewound again: the agent's changes stay undone
    assert not (record / "rewind.json").exists()
    assert checkpoint_kinds(session_id, files) == [("rewind", False), ("turn", True)]  # recorded once
    assert stored_messages(code_puppy_home, session_id) == 0

    again = run_cli("rewind", "--output-format", "json", cwd=files)  # a rewind as usual now: it undoes that one
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["status"] == "ok"
    assert (files / "app.py").read_text() == "version = 2\n" and (files / "new.py").exists()
    assert checkpoint_kinds(session_id, files) == [("rewind", False), ("rewind", True), ("turn", True)]


def test_a_killed_rewind_finished_by_rewind_in_json(server: FakeLLMServer, files: Path, code_puppy_home: Path) -> None:
    agent_turn(server)
    turn = run_cli("-p", "change things", *YOLO, "--output-format", "json", cwd=files)
    session_id = json.loads(turn.stdout)["session_id"]
    killed_at("code_puppy.checkpoints.rewind:write_file", "rewind", cwd=files)
    (turn_checkpoint,) = [item["id"] for item in checkpoints_of(session_id, files)]

    finished = run_cli("rewind", "--output-format", "json", cwd=files)

    assert (finished.returncode, finished.stderr) == (0, "")
    report = json.loads(finished.stdout)
    (rewind_checkpoint, _) = [item["id"] for item in checkpoints_of(session_id, files)]
    assert report == {
        "session_id": session_id,
        "status": "finished",
        "dry_run": False,
        "checkpoints": [turn_checkpoint],
        "restored": ["app.py", "doomed.txt"],
        "deleted": ["made.txt", "new.py"],
        "conflicts": [],
        "unrestorable": [],
        "conversation": {"prompt": "change things", "messages_before": 8, "messages_after": 0},
        "rewind_checkpoint": rewind_checkpoint,
    }


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
