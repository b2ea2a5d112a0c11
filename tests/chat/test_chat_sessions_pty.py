"""Sessions in the interactive chat, in a real pseudo-terminal: the title written after the first turn, `/rename`,
`/fork`; and headless runs, which never ask for a title."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.conftest import run_cli, wait_for
from tests.fake_llm import FakeLLMServer, text
from tests.pty_chat import PtyChat


def auto_title(code_puppy_home: Path) -> None:
    config = code_puppy_home / "config.toml"
    config.write_text(config.read_text().replace("auto_title = false", "auto_title = true"))


def request_kinds(code_puppy_home: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(code_puppy_home / "sessions.db") as db:
        return db.execute("SELECT session_id, kind FROM requests ORDER BY id").fetchall()


def sent_texts(server: FakeLLMServer, index: int) -> list[str]:
    return [m["content"] for m in server.requests[index].body["messages"] if m["role"] in ("user", "assistant")]


def test_title_rename_and_fork_in_the_chat(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    auto_title(code_puppy_home)
    server.script(text("Sure, looking at the login form."), text('"Fixing the login form."'), text("Second answer."))
    chat = PtyChat(project)
    try:
        chat.wait_for("session ")
        chat.type("the login form is broken\r")
        chat.wait_turn("Sure, looking at the login form.")

        def listed() -> str:
            return run_cli("sessions", "list", cwd=project).stdout

        wait_for(lambda: "Fixing the login form" in listed(), what="the title in `sessions list`")
        (line,) = listed().splitlines()[1:]
        original = line.split()[0]
        assert line.endswith("  Fixing the login form")
        title_request = server.requests[1].body["messages"]
        assert title_request[0]["role"] == "system" and "Reply with the title only" in title_request[0]["content"]
        assert "the login form is broken" in title_request[1]["content"]
        assert [kind for _, kind in request_kinds(code_puppy_home)] == ["main", "title"]
        assert {session[:8] for session, _ in request_kinds(code_puppy_home)} == {original}

        chat.type("/rename login fix\r")
        chat.wait_for(f"session {original} is now called 'login fix'")
        chat.type("/fork\r")
        screen = chat.wait_for("you are now in the fork")
        fork = screen.split(f"forked session {original} → ")[1][:8]
        chat.type("and the second question\r")
        chat.wait_turn("Second answer.")
        assert sent_texts(server, 2) == [
            "the login form is broken",
            "Sure, looking at the login form.",
            "and the second question",
        ]
        chat.type("/exit\r")
        assert chat.wait_exit() == 0
    finally:
        chat.close()
    assert len(server.requests) == 3  # the fork's turn was its second: no title for it
    exported = json.loads(run_cli("sessions", "export", "login fix", cwd=project).stdout)
    assert exported["session"]["id"].startswith(original) and len(exported["messages"]) == 2  # unchanged
    shown = run_cli("sessions", "show", fork, cwd=project).stdout
    assert f"forked from {exported['session']['id']} (login fix)" in shown
    assert "and the second question" in shown

    again = PtyChat(project, "-r", "login fix", "--fork")
    try:
        screen = again.wait_for("2 messages")
        assert "forked into session " in screen and f"session {original}" not in screen
        again.type("/exit\r")
        assert again.wait_exit() == 0
    finally:
        again.close()
    assert json.loads(run_cli("sessions", "export", "login fix", cwd=project).stdout) == exported


def test_headless_runs_never_ask_for_a_title(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    auto_title(code_puppy_home)
    server.script(text("Done."))
    done = run_cli("-p", "name nothing", cwd=project)
    assert done.returncode == 0, done.stderr
    assert len(server.requests) == 1
    assert [kind for _, kind in request_kinds(code_puppy_home)] == ["main"]
    assert run_cli("sessions", "list", cwd=project).stdout.splitlines()[1].endswith("  name nothing")


def test_shell_output_and_attached_files_are_never_indexed(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    """A `!cat .env` and an `@file` go to the model, but only what the user typed and the answers are searchable."""
    (project / ".env").write_text("API_TOKEN=SHELLSECRET42\n")
    (project / "notes.txt").write_text("the FILESECRET77 is here\n")
    server.script(text("Read them."))
    chat = PtyChat(project)
    try:
        chat.wait_for("session ")
        chat.type("!cat .env\r")
        chat.wait_for("exit 0")
        chat.type("look at @notes.txt please\r")
        chat.wait_turn("Read them.")
        chat.type("/exit\r")
        assert chat.wait_exit() == 0
    finally:
        chat.close()
    sent = json.dumps(server.requests[0].body["messages"])
    assert "SHELLSECRET42" in sent and "FILESECRET77" in sent  # the model still sees both
    for secret in ("SHELLSECRET42", "FILESECRET77", "API_TOKEN"):
        found = run_cli("sessions", "search", secret, "--all", cwd=project)
        assert (found.returncode, found.stdout) == (1, ""), secret
    typed = run_cli("sessions", "search", "please", cwd=project)
    assert typed.returncode == 0 and "› look at @notes.txt [please]" in typed.stdout
    with sqlite3.connect(code_puppy_home / "sessions.db") as db:
        texts = [row[0] for row in db.execute("SELECT text FROM search_text ORDER BY id")]
    assert texts == ["look at @notes.txt please", "Read them."]
    shown = run_cli("sessions", "show", typed.stdout.split()[0], cwd=project).stdout
    assert "› look at @notes.txt please\n  (attached: <shell-command" in shown


def test_rename_before_the_first_turn_is_refused(server: FakeLLMServer, project: Path) -> None:
    server.script(text("Hello."))
    chat = PtyChat(project)
    try:
        chat.wait_for("session ")
        chat.type("/rename early\r")
        chat.wait_for("nothing to name yet: this session has no turns (send a message first, or start with --name")
        chat.type("hi\r")
        chat.wait_turn("Hello.")
        chat.type("/rename early\r")
        chat.wait_for("is now called 'early'")
        chat.type("/exit\r")
        assert chat.wait_exit() == 0
    finally:
        chat.close()
    (line,) = run_cli("sessions", "list", cwd=project).stdout.splitlines()[1:]
    assert line.endswith("  early · hi")
