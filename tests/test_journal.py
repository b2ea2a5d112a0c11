"""A turn is journaled step by step, so kill -9 mid-turn loses none of it (issue 10.2), end to end."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

from tests.conftest import run_cli, start_cli, wait_for
from tests.fake_llm import FakeLLMServer, call, hang, text, tool_calls
from tests.pty_chat import PtyChat


def wire(server: FakeLLMServer, index: int) -> list[tuple[str, str]]:
    """The messages of request `index` as (role, what): text, a tool call's name, or a tool result's first line."""
    shown: list[tuple[str, str]] = []
    for message in server.requests[index].body["messages"]:
        if message["role"] == "system":
            continue
        if message.get("tool_calls"):
            shown += [("assistant", f"call {c['function']['name']}") for c in message["tool_calls"]]
        elif message["role"] == "tool":
            shown.append(("tool", message["content"].splitlines()[0]))
        else:
            content = message["content"]
            shown.append((message["role"], content if isinstance(content, str) else json.dumps(content)))
    return shown


def session_row(home: Path) -> tuple[str, str, int]:
    with sqlite3.connect(home / "sessions.db") as db:
        (row,) = db.execute("SELECT id, title, message_count FROM sessions").fetchall()
    return row


def test_kill_9_mid_turn_then_continue_recovers_every_finished_step(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    server.script(
        tool_calls(call("write_file", {"path": "notes.txt", "content": "hello"})),
        tool_calls(call("read_file", {"path": "notes.txt"})),
        hang(),
    )
    process = start_cli("-p", "make notes", "--permission-mode", "accept-edits", cwd=project)
    wait_for(lambda: len(server.requests) == 3, what="the third model request")
    process.kill()
    process.communicate(timeout=10)
    assert (project / "notes.txt").read_text() == "hello"  # the tool changed the disk before the process died

    listed = run_cli("sessions", "list", cwd=project)
    session_id, title, stored = session_row(code_puppy_home)
    assert (title, stored) == ("make notes", 0)
    assert session_id[:8] in listed.stdout and "make notes" in listed.stdout

    shown = run_cli("sessions", "show", session_id[:8], cwd=project)
    assert shown.returncode == 0, shown.stderr
    assert "a turn that did not finish" in shown.stdout
    assert "⚙ write_file" in shown.stdout and "⚙ read_file" in shown.stdout
    assert session_row(code_puppy_home)[2] == 0  # showing never writes

    server.script(text("continued"))
    completed = run_cli("-c", "-p", "go on", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "continued\n"), completed.stderr
    assert "code-puppy: note: recovered an interrupted turn: 5 steps" in completed.stderr
    assert wire(server, 3) == [
        ("user", "make notes"),
        ("assistant", "call write_file"),
        ("tool", wire(server, 1)[-1][1]),
        ("assistant", "call read_file"),
        ("tool", "[notes.txt | 1 lines]"),
        ("user", "go on"),
    ]
    again = run_cli("sessions", "show", session_id[:8], cwd=project)
    assert "a turn that did not finish" not in again.stdout  # recovered once, then part of the history


def test_a_turn_killed_before_any_answer_keeps_its_prompt(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    server.script(hang())
    process = start_cli("-p", "first question", cwd=project)
    wait_for(lambda: len(server.requests) == 1, what="the first model request")
    process.kill()
    process.communicate(timeout=10)
    server.script(text("answer"))
    completed = run_cli("-c", "-p", "second question", cwd=project)
    assert completed.returncode == 0, completed.stderr
    assert "recovered an interrupted turn: 1 step\n" in completed.stderr
    assert [what for role, what in wire(server, 1) if role == "user"] == ["first question", "second question"]


def test_a_turn_still_running_elsewhere_is_listed_and_never_taken(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    server.script(tool_calls(call("read_file", {"path": "README.md"})), hang())
    running = start_cli("-p", "long task", cwd=project)
    try:
        wait_for(lambda: len(server.requests) == 2, what="the second model request")
        assert "long task" in run_cli("sessions", "list", cwd=project).stdout
        server.script(text("meanwhile"))
        other = run_cli("-c", "-p", "quick question", cwd=project)
        assert other.returncode == 0, other.stderr
        assert "recovered" not in other.stderr
        assert [what for role, what in wire(server, 2) if role != "system"] == ["quick question"]
    finally:
        running.send_signal(signal.SIGTERM)
        running.communicate(timeout=20)
    # The first process saved its own turn when it was stopped, as a new session: neither overwrote the other.
    with sqlite3.connect(code_puppy_home / "sessions.db") as db:
        ids = [row[0] for row in db.execute("SELECT id FROM sessions ORDER BY created_at")]
    assert len(ids) == 2
    transcripts = [run_cli("sessions", "show", session_id, cwd=project).stdout for session_id in ids]
    assert "› quick question" in transcripts[0] and "long task" not in transcripts[0].split("\n", 1)[1]
    assert "› long task" in transcripts[1] and "quick question" not in transcripts[1]


def test_the_journal_is_gone_once_a_turn_is_saved(server: Any, project: Path, code_puppy_home: Path) -> None:
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("done"))
    completed = run_cli("-p", "read it", cwd=project)
    assert completed.returncode == 0, completed.stderr
    with sqlite3.connect(code_puppy_home / "sessions.db") as db:
        assert db.execute("SELECT count(*) FROM journals").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM journal_entries").fetchone() == (0,)


def test_a_killed_turn_of_a_session_that_went_on_elsewhere_becomes_a_new_session(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    server.script(text("first answer"))
    assert run_cli("-p", "first question", cwd=project).returncode == 0
    server.script(tool_calls(call("read_file", {"path": "README.md"})), hang())
    killed = start_cli("-c", "-p", "killed turn", cwd=project)
    wait_for(lambda: len(server.requests) == 3, what="the killed turn's second request")
    server.script(text("meanwhile"))
    assert run_cli("-c", "-p", "meanwhile here", cwd=project).returncode == 0
    killed.kill()
    killed.communicate(timeout=10)

    server.script(text("after"))
    completed = run_cli("-c", "-p", "after", cwd=project)
    assert completed.returncode == 0, completed.stderr
    note = completed.stderr.splitlines()[0]
    assert "went on in another process after a turn of it was interrupted" in note
    assert [what for role, what in wire(server, 4) if role == "user"] == ["first question", "meanwhile here", "after"]
    recovered = note.rsplit("recovered as session ", 1)[1]
    shown = run_cli("sessions", "show", recovered, cwd=project).stdout
    assert shown.index("› first question") < shown.index("› killed turn") < shown.index("⚙ read_file")
    assert "meanwhile" not in shown


KEEP_LAST = """
from code_puppy.history import HistoryProcessorContext


def keep_last_cycle(ctx: HistoryProcessorContext):
    return ctx.keep_recent_groups(1)
"""


def test_a_history_rewritten_mid_turn_is_recovered_as_rewritten(
    server: FakeLLMServer, project: Path, code_puppy_home: Path, tmp_path: Path
) -> None:
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "keep_last.py").write_text(KEEP_LAST)
    config = code_puppy_home / "config.toml"
    plain = config.read_text()
    for flags in (("-p", "one"), ("-c", "-p", "two")):
        server.script(text("answer"))
        assert run_cli(*flags, cwd=project).returncode == 0
    config.write_text(plain + '[history]\nprocessors = ["keep_last:keep_last_cycle"]\n')
    server.script(tool_calls(call("read_file", {"path": "README.md"})), hang())
    killed = start_cli("-c", "-p", "three", cwd=project, env={"PYTHONPATH": str(modules)})
    wait_for(lambda: len(server.requests) == 4, what="the killed turn's second request")
    killed.kill()
    killed.communicate(timeout=10)
    with sqlite3.connect(code_puppy_home / "sessions.db") as db:
        assert db.execute("SELECT snapshot FROM journals").fetchall() == [(1,)]

    config.write_text(plain)  # no processor: the next request shows the recovered history as it is
    server.script(text("four"))
    completed = run_cli("-c", "-p", "four", cwd=project)
    assert "recovered an interrupted turn: 3 steps" in completed.stderr
    assert [what for role, what in wire(server, 4) if role == "user"] == ["two", "three", "four"]


def test_a_journal_step_that_does_not_parse_is_found_by_check_and_set_aside_by_repair(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    server.script(
        tool_calls(call("write_file", {"path": "notes.txt", "content": "hello"})),
        tool_calls(call("read_file", {"path": "notes.txt"})),
        hang(),
    )
    process = start_cli("-p", "make notes", "--permission-mode", "accept-edits", cwd=project)
    wait_for(lambda: len(server.requests) == 3, timeout=60, what="the third model request")
    process.kill()
    process.communicate(timeout=10)
    database = code_puppy_home / "sessions.db"
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT id, message FROM journal_entries ORDER BY pending, id").fetchall()
        (bad, message) = next(row for row in rows if '"read_file"' in row[1])  # the model's call of read_file
        db.execute("UPDATE journal_entries SET message = ? WHERE id = ?", (message[:40], bad))
        session_id = db.execute("SELECT session_id FROM journals").fetchone()[0]

    locked = run_cli("-c", "-p", "go on", cwd=project)
    assert locked.returncode == 2 and "`code-puppy sessions repair`" in locked.stderr, locked.stderr

    checked = run_cli("sessions", "check", cwd=project)
    assert checked.returncode == 1, checked.stdout
    assert checked.stdout.startswith(
        f"{database} is damaged:\n  journal_entries row {bad} (a step of an interrupted turn of session "
        f"{session_id[:8]}) does not parse: "
    )
    assert checked.stdout.endswith("`code-puppy sessions repair` moves it aside and keeps what can still be read\n")

    repaired = run_cli("sessions", "repair", cwd=project)
    assert repaired.returncode == 0, repaired.stderr
    moved, rebuilt = repaired.stdout.splitlines()
    aside = Path(moved.removeprefix("moved the damaged database to "))
    assert rebuilt == (
        f"rebuilt {database}: kept 1 sessions and 0 messages; "
        f"1 message that did not parse was set aside in {aside.name}"
    )
    with sqlite3.connect(aside) as db:  # the bad row is still there, as it was
        assert db.execute("SELECT message FROM journal_entries WHERE id = ?", (bad,)).fetchone() == (message[:40],)
    assert run_cli("sessions", "check", cwd=project).stdout == f"{database}: ok\n"

    server.script(text("continued"))
    completed = run_cli("-c", "-p", "go on", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "continued\n"), completed.stderr
    assert "code-puppy: note: recovered an interrupted turn: 4 steps" in completed.stderr
    assert wire(server, 3) == [
        ("user", "make notes"),
        ("assistant", "call write_file"),
        ("tool", wire(server, 1)[-1][1]),
        ("user", "go on"),
    ]


def test_a_chat_turn_begun_on_a_stale_history_is_recovered_with_the_earlier_turns(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    server.script(text("first answer"))
    assert run_cli("-p", "first question", cwd=project).returncode == 0
    chat = PtyChat(project, "-c")
    try:
        chat.wait_for("session ", timeout=60)  # the toolbar names the session once the chat has loaded its history
        server.script(text("meanwhile answer"))
        assert run_cli("-c", "-p", "meanwhile here", cwd=project).returncode == 0  # the chat's history is stale now
        server.script(tool_calls(call("read_file", {"path": "README.md"})), hang())
        chat.type("killed turn\r")
        wait_for(lambda: len(server.requests) == 4, timeout=60, what="the chat turn's second request")
        chat.child.kill(signal.SIGKILL)
    finally:
        chat.close()
    with sqlite3.connect(code_puppy_home / "sessions.db") as db:
        assert db.execute("SELECT snapshot FROM journals").fetchall() == [(1,)]  # begun on a stale history

    server.script(text("after"))
    completed = run_cli("-c", "-p", "after", cwd=project)

    assert completed.returncode == 0, completed.stderr
    note = completed.stderr.splitlines()[0]
    assert "went on in another process after a turn of it was interrupted" in note
    assert [what for role, what in wire(server, 4) if role == "user"] == ["first question", "meanwhile here", "after"]
    recovered = run_cli("sessions", "show", note.rsplit("recovered as session ", 1)[1], cwd=project).stdout
    # The chat's whole history, the earlier turn included, and not what was saved elsewhere meanwhile.
    assert "› first question" in recovered and "› killed turn" in recovered, recovered
    assert recovered.index("› first question") < recovered.index("first answer") < recovered.index("› killed turn")
    assert recovered.index("› killed turn") < recovered.index("⚙ read_file")
    assert "meanwhile" not in recovered
