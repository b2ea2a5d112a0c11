"""End to end: checkpoints taken by headless runs of the installed `code-puppy` against the fake server, and
`code-puppy rewind` / `code-puppy checkpoints` putting the agent's changes back (real git, real SQLite)."""

from __future__ import annotations

import asyncio
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


def user_prompts(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def test_rewind_branches_the_conversation_too(server: FakeLLMServer, files: Path) -> None:
    server.script(text("First answer."))
    assert run_cli("-p", "first question", cwd=files).returncode == 0
    agent_turn(server)
    assert run_cli("-c", "-p", "change things", *YOLO, cwd=files).returncode == 0

    assert run_cli("rewind", cwd=files).returncode == 0

    server.script(text("Again."))
    assert run_cli("-c", "-p", "next", cwd=files).returncode == 0
    assert user_prompts(server.requests[-1].body) == ["first question", "next"]


def test_a_conflicting_user_edit_refuses_then_force_keeps_it_recoverable(server: FakeLLMServer, files: Path) -> None:
    agent_turn(server)
    assert run_cli("-p", "change things", *YOLO, cwd=files).returncode == 0
    (files / "app.py").write_text("version = 2\nmine = True\n")  # the user edits a file the agent changed
    after_turn = state(files)

    refused = run_cli("rewind", cwd=files)

    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr == (
        "code-puppy: rewind refused, nothing was changed: you changed app.py since the agent did; --force restores "
        "anyway, after keeping your versions as a checkpoint (rewind that to get them back)\n"
    )
    assert state(files) == after_turn

    forced = run_cli("rewind", "--force", cwd=files)
    assert forced.returncode == 0, forced.stderr
    assert (files / "app.py").read_text() == "version = 1\n" and not (files / "new.py").exists()

    again = run_cli("rewind", "--only", "code", cwd=files)  # the forced rewind is a checkpoint of its own
    assert again.returncode == 0, again.stderr
    assert state(files) == after_turn


def test_only_conversation_leaves_files_and_keeps_the_old_branch(
    server: FakeLLMServer, files: Path, code_puppy_home: Path
) -> None:
    server.script(text("First answer."))
    assert run_cli("-p", "first question", cwd=files).returncode == 0
    agent_turn(server)
    assert run_cli("-c", "-p", "change things", *YOLO, cwd=files).returncode == 0
    changed = state(files)

    done = run_cli("rewind", "--only", "conversation", "--output-format", "json", cwd=files)

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["status"], report["checkpoints"], report["restored"], report["deleted"]) == ("ok", [], [], [])
    assert report["conversation"]["prompt"] == "change things"
    assert report["conversation"]["messages_after"] == 2
    assert state(files) == changed
    server.script(text("Again."))
    assert run_cli("-c", "-p", "next", cwd=files).returncode == 0
    assert user_prompts(server.requests[-1].body) == ["first question", "next"]
    with SqliteConversationStore(code_puppy_home / "sessions.db") as store:
        (session,) = store.sessions.recent(files)
        record = asyncio.run(store.read_record(session.id))
        assert record is not None and record.branches
        kept = [asyncio.run(store.read_history(head)) for head in record.branches]
        assert any("change things" in str(entry.message) for history in kept for entry in history)


def test_dry_run_changes_nothing_and_json_says_what_it_would(server: FakeLLMServer, files: Path) -> None:
    agent_turn(server)
    assert run_cli("-p", "change things", *YOLO, cwd=files).returncode == 0
    changed = state(files)

    dry = run_cli("rewind", "--dry-run", "--output-format", "json", cwd=files)

    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report["dry_run"] is True and report["status"] == "ok"
    assert (report["restored"], report["deleted"]) == (["app.py", "doomed.txt"], ["made.txt", "new.py"])
    assert state(files) == changed
    text_dry = run_cli("rewind", "--dry-run", cwd=files)
    assert text_dry.stdout.splitlines()[0].startswith("would rewind 1 checkpoint of session ")
    assert state(files) == changed


def test_checkpoints_lists_them_newest_first_in_text_and_json(server: FakeLLMServer, files: Path) -> None:
    agent_turn(server)
    assert run_cli("-p", "change things", *YOLO, cwd=files).returncode == 0
    server.script(text("Nothing to change."))
    assert run_cli("-c", "-p", "just talk", cwd=files).returncode == 0  # changes nothing: no checkpoint
    server.script(tool_calls(call("write_file", {"path": "second.txt", "content": "2\n"})), text("ok"))
    assert run_cli("-c", "-p", "second change", *YOLO, cwd=files).returncode == 0

    listed = run_cli("checkpoints", "--output-format", "json", cwd=files)

    assert listed.returncode == 0, listed.stderr
    found = json.loads(listed.stdout)["checkpoints"]
    assert [(item["prompt"], item["kind"], item["rewound"]) for item in found] == [
        ("second change", "turn", False),
        ("change things", "turn", False),
    ]
    assert found[0]["files"] == [{"path": "second.txt", "change": "added"}]
    assert [entry["path"] for entry in found[1]["files"]] == ["app.py", "doomed.txt", "made.txt", "new.py"]
    text_list = run_cli("checkpoints", cwd=files).stdout.splitlines()
    assert len(text_list) == 2 and "“second change”  1 file: second.txt" in text_list[0]
    shown = run_cli("sessions", "show", json.loads(listed.stdout)["session_id"], cwd=files)
    assert "checkpoints (newest first):" in shown.stdout and "“change things”  4 files" in shown.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("rewind", "--turns", "0"), "Invalid value for '--turns'"),
        (("rewind", "--only", "files"), "Invalid value for '--only'"),
        (("rewind", "--output-format", "yaml"), "Invalid value for '--output-format'"),
        (("checkpoints", "--output-format", "yaml"), "Invalid value for '--output-format'"),
    ],
)
def test_bad_flags_are_usage_errors(project: Path, args: tuple[str, ...], message: str) -> None:
    completed = run_cli(*args, cwd=project)
    assert completed.returncode == 2 and message in completed.stderr and "Traceback" not in completed.stderr


@pytest.mark.parametrize("command", ["rewind", "checkpoints"])
def test_an_unknown_session_or_none_at_all_is_one_line_exit_2(
    server: FakeLLMServer, project: Path, command: str
) -> None:
    none = run_cli(command, cwd=project)
    if command == "rewind":
        expected = (
            f"code-puppy: error: no session in {project} (--session ID names one; code-puppy sessions list --all)\n"
        )
        assert (none.returncode, none.stderr) == (2, expected)
    else:  # it only reads: it does not create the database
        assert none.returncode == 2 and "no sessions database here yet" in none.stderr
    server.script(text("hi"))
    assert run_cli("-p", "hello", cwd=project).returncode == 0
    unknown = run_cli(command, "--session", "zzzz", cwd=project)
    assert (unknown.returncode, unknown.stderr) == (
        2,
        "code-puppy: error: no session matches 'zzzz' (code-puppy sessions list --all shows them)\n",
    )


def test_nothing_to_rewind_is_exit_1(server: FakeLLMServer, project: Path) -> None:
    server.script(text("hi"))
    session_id = json.loads(run_cli("-p", "hello", "--output-format", "json", cwd=project).stdout)["session_id"]
    assert run_cli("rewind", "--only", "conversation", cwd=project).returncode == 0
    nothing = run_cli("rewind", "--session", session_id, cwd=project)
    assert (nothing.returncode, nothing.stderr) == (
        1,
        f"code-puppy: nothing to rewind in session {session_id[:8]}: no checkpoint left and no turn in its history\n",
    )


def git_state(repo: Path) -> tuple[str, bytes, bytes]:
    status = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True, check=True
    )
    return status.stdout, (repo / ".git" / "index").read_bytes(), (repo / ".git" / "HEAD").read_bytes()


def test_a_git_project_with_ignored_trees_keeps_its_git_state_and_its_dependencies(
    server: FakeLLMServer, repo: Path
) -> None:
    (repo / ".gitignore").write_text("node_modules/\n.env\n")
    (repo / "node_modules" / "pkg").mkdir(parents=True)
    (repo / "node_modules" / "pkg" / "index.js").write_text("module.exports = 1\n")
    (repo / ".env").write_text("TOKEN=local\n")
    subprocess.run(["git", "-C", str(repo), "add", ".gitignore"], check=True)
    project_git = git_state(repo)
    server.script(
        tool_calls(call("shell", {"command": "rm .env && echo 2 > node_modules/pkg/added.js && echo s > src.txt"})),
        text("Installed."),
    )
    assert run_cli("-p", "install", *YOLO, cwd=repo).returncode == 0
    assert not (repo / ".env").exists()

    listed = json.loads(run_cli("checkpoints", "--output-format", "json", cwd=repo).stdout)["checkpoints"]
    assert [entry["path"] for entry in listed[0]["files"]] == [".env", "src.txt"]  # node_modules/ is not snapshotted
    assert run_cli("rewind", cwd=repo).returncode == 0

    assert (repo / ".env").read_text() == "TOKEN=local\n" and not (repo / "src.txt").exists()
    assert (repo / "node_modules" / "pkg" / "added.js").exists()  # not the checkpoint's to undo
    assert git_state(repo) == project_git


def test_a_file_the_user_already_put_back_is_no_conflict(server: FakeLLMServer, files: Path) -> None:
    original = state(files)
    agent_turn(server)
    assert run_cli("-p", "change things", *YOLO, cwd=files).returncode == 0
    (files / "app.py").write_text("version = 1\n")  # the user undid that one by hand

    rewound = run_cli("rewind", "--output-format", "json", cwd=files)

    assert rewound.returncode == 0, rewound.stderr
    report = json.loads(rewound.stdout)
    assert (report["conflicts"], report["restored"]) == ([], ["doomed.txt"])
    assert state(files) == original


def test_what_a_plugin_hook_command_changes_is_part_of_the_turn(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    with (code_puppy_home / "config.toml").open("a") as config:
        config.write(
            "[[plugins.shell_hooks.PostToolUse]]\n"
            'matcher = "Read"\nhooks = [{ command = "echo formatted > fmt.txt" }]\n'
        )
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("Read it."))
    assert run_cli("-p", "read", *YOLO, cwd=project).returncode == 0
    assert (project / "fmt.txt").exists()

    listed = json.loads(run_cli("checkpoints", "--output-format", "json", cwd=project).stdout)["checkpoints"]
    assert listed[0]["files"] == [{"path": "fmt.txt", "change": "added"}]
    assert run_cli("rewind", cwd=project).returncode == 0
    assert not (project / "fmt.txt").exists()


def test_rewind_turns_2_over_two_turns_editing_one_file_goes_back_two(server: FakeLLMServer, files: Path) -> None:
    server.script(text("First answer."))
    assert run_cli("-p", "just talk", cwd=files).returncode == 0
    for old, new in (("version = 1", "version = 2"), ("version = 2", "version = 3")):
        server.script(tool_calls(call("edit_file", {"path": "app.py", "old_text": old, "new_text": new})), text("ok"))
        assert run_cli("-c", "-p", f"make it {new}", *YOLO, cwd=files).returncode == 0
    assert (files / "app.py").read_text() == "version = 3\n"

    rewound = run_cli("rewind", "--turns", "2", "--output-format", "json", cwd=files)

    assert rewound.returncode == 0, rewound.stderr
    report = json.loads(rewound.stdout)
    assert (report["restored"], report["deleted"], len(report["checkpoints"])) == (["app.py"], [], 2)
    assert report["conversation"] == {"prompt": "make it version = 2", "messages_before": 10, "messages_after": 2}
    assert (files / "app.py").read_text() == "version = 1\n"
    server.script(text("Again."))
    assert run_cli("-c", "-p", "next", cwd=files).returncode == 0
    assert user_prompts(server.requests[-1].body) == ["just talk", "next"]
    undone = run_cli("rewind", "--only", "code", cwd=files)  # the rewind of both is one checkpoint: one step undoes it
    assert undone.returncode == 0, undone.stderr
    assert (files / "app.py").read_text() == "version = 3\n"


def test_sessions_list_counts_the_turns_a_rewind_leaves_and_keeps_a_session_rewound_to_none(
    server: FakeLLMServer, files: Path
) -> None:
    server.script(text("First answer."))
    session_id = json.loads(run_cli("-p", "first question", "--output-format", "json", cwd=files).stdout)["session_id"]
    agent_turn(server)
    assert run_cli("-c", "-p", "change things", *YOLO, cwd=files).returncode == 0

    def listed() -> list[str]:
        (row,) = run_cli("sessions", "list", "--all", cwd=files).stdout.splitlines()[1:]
        return row.split()[:3]

    assert listed()[::2] == [session_id[:8], "2"]
    assert run_cli("rewind", cwd=files).returncode == 0
    assert listed()[::2] == [session_id[:8], "1"]
    assert run_cli("rewind", "--only", "conversation", cwd=files).returncode == 0
    assert listed()[::2] == [session_id[:8], "0"]  # still listed: `-r` goes on from it
