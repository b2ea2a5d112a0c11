"""End to end: checkpoints taken by headless runs of the installed `code-puppy` against the fake server, and
`code-puppy rewind` / `code-puppy checkpoints` putting the agent's changes back (real git, real SQLite)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from code_puppy.sessions.store import SqliteConversationStore
from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, call, text, tool_calls

YOLO = ("--permission-mode", "yolo")


def agent_turn(server: FakeLLMServer) -> None:
    """The scripted model writes a new file, edits an existing one, and runs a command that creates one file and
    deletes another."""
    server.script(
        tool_calls(call("write_file", {"path": "new.py", "content": "print('new')\n"})),
        tool_calls(call("edit_file", {"path": "app.py", "old_text": "version = 1", "new_text": "version = 2"})),
        tool_calls(call("shell", {"command": "echo made > made.txt && rm doomed.txt"})),
        text("Done."),
    )


@pytest.fixture
def files(project: Path) -> Path:
    (project / "app.py").write_text("version = 1\n")
    (project / "doomed.txt").write_text("keep me\n")
    (project / "notes.md").write_text("my notes\n")
    return project


def state(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): path.read_text()
        for path in sorted(root.rglob("*"))
        if path.is_file() and ".git" not in path.parts
    }


def test_rewind_restores_all_four_agent_changes_and_keeps_the_users_edit(server: FakeLLMServer, files: Path) -> None:
    original = state(files)
    agent_turn(server)
    assert run_cli("-p", "change things", *YOLO, cwd=files).returncode == 0
    assert (files / "new.py").exists() and (files / "made.txt").exists() and not (files / "doomed.txt").exists()
    assert (files / "app.py").read_text() == "version = 2\n"
    (files / "notes.md").write_text("my notes, edited by me\n")  # the user, after the turn

    rewound = run_cli("rewind", cwd=files)

    assert (rewound.returncode, rewound.stderr) == (0, "")
    assert state(files) == {**original, "notes.md": "my notes, edited by me\n"}
    assert rewound.stdout.splitlines()[0].startswith("rewound 1 checkpoint of session ")
    assert "4 files: app.py, doomed.txt (restored), made.txt (deleted), new.py (deleted)" in rewound.stdout
