"""Finding sessions from the command line: names and `-r NAME`, search, archive and fork, through the console script."""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from code_puppy.sessions.schema import Database
from code_puppy.sessions.search import catch_up
from tests.conftest import CODE_PUPPY, run_cli, start_cli
from tests.fake_llm import FakeLLMServer, text


def headless(*args: str, cwd: Path) -> dict[str, Any]:
    completed = run_cli(*args, "--output-format", "json", cwd=cwd)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def sent_texts(server: FakeLLMServer, index: int) -> list[str]:
    """The user and assistant texts of request `index` to the fake server."""
    return [m["content"] for m in server.requests[index].body["messages"] if m["role"] in ("user", "assistant")]


def test_rename_and_resume_by_name(server: FakeLLMServer, project: Path) -> None:
    server.script(text("one"), text("two"), text("three"), text("four"))
    first = headless("-p", "first session", cwd=project)["session_id"]
    second = headless("-p", "second session", "--name", "wip", cwd=project)["session_id"]

    renamed = run_cli("sessions", "rename", first[:8], "auth refactor", cwd=project)
    assert (renamed.returncode, renamed.stdout) == (0, f"session {first[:8]} is now called 'auth refactor'\n")
    taken = run_cli("sessions", "rename", first, "wip", cwd=project)
    assert (taken.returncode, taken.stderr) == (
        2,
        f"code-puppy: error: another session ({second[:8]}) is already called 'wip'\n",
    )
    clash = run_cli("-p", "x", "--name", "auth refactor", cwd=project)
    assert (clash.returncode, clash.stderr) == (
        2,
        f"code-puppy: error: --name: another session ({first[:8]}) is already called 'auth refactor'\n",
    )

    assert headless("-r", "auth refactor", "-p", "go on", cwd=project)["session_id"] == first
    assert sent_texts(server, 2) == ["first session", "one", "go on"]
    assert headless("-r", "wip", "-p", "more", cwd=project)["session_id"] == second
    assert sent_texts(server, 3) == ["second session", "two", "more"]
    assert len(server.requests) == 4  # the refused runs sent nothing

    listed = run_cli("sessions", "list", cwd=project).stdout.splitlines()
    assert [line.split()[0] for line in listed[1:]] == [second[:8], first[:8]]
    assert listed[1].endswith("wip · second session") and listed[2].endswith("auth refactor · first session")
    assert [line.split()[2] for line in listed[1:]] == ["2", "2"]  # turns
    assert "name: auth refactor" in run_cli("sessions", "show", "auth refactor", cwd=project).stdout


def test_an_exact_name_wins_over_an_id_prefix_and_an_ambiguous_prefix_is_refused(
    server: FakeLLMServer, project: Path, backend: str
) -> None:
    from code_puppy.sessions.store import open_store

    with open_store() as store:
        store.sessions.create(project, session_id="abc-1", name="abc")
        store.sessions.create(project, session_id="abc-2")
        store.sessions.create(project, session_id="abd-3")
        assert [info.id for info in store.sessions.find("abc")] == ["abc-1"]
        assert [info.id for info in store.sessions.find("abc-2")] == ["abc-2"]
        assert [info.id for info in store.sessions.find("ab")] == ["abd-3", "abc-2", "abc-1"]
    ambiguous = run_cli("-r", "ab", "-p", "x", cwd=project)
    assert ambiguous.returncode == 2
    assert (
        ambiguous.stderr
        == "code-puppy: error: 'ab' matches 3 sessions: abd-3 (untitled), abc-2 (untitled), abc-1 (abc)\n"
    )
    assert run_cli("sessions", "rename", "abc-2", " ", cwd=project).returncode == 2
    assert not server.requests


def _downgrade(db_path: Path) -> None:
    """Make the store as the schema before `m007_finding_sessions` had it."""
    with sqlite3.connect(db_path) as db:
        db.execute("DROP INDEX sessions_name")
        for column in ("name", "archived_at", "turns", "indexed"):
            db.execute(f"ALTER TABLE sessions DROP COLUMN {column}")
        db.execute("DROP TABLE search")
        db.execute("DROP TABLE search_text")
        db.execute("DELETE FROM schema_migrations WHERE name = 'm007_finding_sessions'")


def test_search_finds_a_word_of_a_third_turn_in_a_store_migrated_from_the_previous_schema(
    server: FakeLLMServer, project: Path, code_puppy_home: Path, tmp_path: Path
) -> None:
    server.script(*[text(f"answer {i}") for i in range(4)], text("the zebra crossing is fixed"), text("far away"))
    found = headless("-p", "start the work", cwd=project)["session_id"]
    headless("-c", "-p", "second step", cwd=project)
    headless("-c", "-p", "third step: look at the quokka module", cwd=project)
    other = headless("-p", "an unrelated session", cwd=project)["session_id"]
    headless("-c", "-p", "more unrelated", cwd=project)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    headless("-p", "a quokka elsewhere", cwd=elsewhere)
    db_path = code_puppy_home / "sessions.db"
    _downgrade(db_path)

    listed = run_cli("sessions", "list", cwd=project)  # read-only: it does not migrate, and still lists
    assert listed.returncode == 0 and [line.split()[2] for line in listed.stdout.splitlines()[1:]] == ["-", "-"]
    with sqlite3.connect(db_path) as db:
        assert "m007_finding_sessions" not in {name for (name,) in db.execute("SELECT name FROM schema_migrations")}

    searched = run_cli("sessions", "search", "quokka", cwd=project)
    assert searched.returncode == 0, searched.stderr
    lines = searched.stdout.splitlines()
    assert lines[0].startswith(f"{found[:8]}  ") and lines[0].endswith("start the work")
    assert lines[1:] == ["    › third step: look at the [quokka] module"]
    assert other[:8] not in searched.stdout

    everywhere = json.loads(
        run_cli("sessions", "search", "quokka", "--all", "--output-format", "json", cwd=project).stdout
    )
    assert sorted(hit["project_dir"] for hit in everywhere) == sorted(
        [str(project.resolve()), str(elsewhere.resolve())]
    )
    answer = json.loads(run_cli("sessions", "search", "zebra", "--output-format", "json", cwd=project).stdout)
    assert answer[0]["session_id"] == other
    assert answer[0]["matches"] == [
        {"role": "model", "line": "the zebra crossing is fixed", "marked": "the [zebra] crossing is fixed"}
    ]
    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT id, turns, indexed FROM sessions WHERE id = ?", (found,)).fetchone() == (found, 3, 1)

    none = run_cli("sessions", "search", "platypus", cwd=project)
    assert (none.returncode, none.stdout) == (1, "")
    assert none.stderr == f"no session matches in {project.resolve()} (--all searches every project)\n"
    assert run_cli("sessions", "search", "x", "--all", "--project", ".", cwd=project).returncode == 2

    # A session saved after the migration is searchable at once, by its new turn.
    server.script(text("noted"))
    headless("-r", other, "-p", "remember the wombat", cwd=project)
    assert run_cli("sessions", "search", "wombat", cwd=project).stdout.startswith(other[:8])


def test_the_indexer_catches_up_once_and_stops_when_asked(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    import threading

    server.script(text("a"), text("b"))
    headless("-p", "alpha", cwd=project)
    headless("-p", "beta", cwd=project)
    _downgrade(code_puppy_home / "sessions.db")
    database = Database(code_puppy_home / "sessions.db")  # migrates: both sessions wait to be indexed
    try:
        stopped = threading.Event()
        stopped.set()
        assert catch_up(database, stop=stopped) == 0
        assert catch_up(database) == 2
        assert catch_up(database) == 0
        with database.read() as db:
            rows = db.execute("SELECT role, text FROM search_text ORDER BY text").fetchall()
        assert rows == [("model", "a"), ("user", "alpha"), ("model", "b"), ("user", "beta")]
    finally:
        database.close()


def test_archive_hides_a_session_from_lists_search_and_continue(
    server: FakeLLMServer, project: Path, backend: str
) -> None:
    server.script(text("old answer"), text("new answer"), text("continued"), text("resumed"))
    older = headless("-p", "older session about kiwis", cwd=project)["session_id"]
    newer = headless("-p", "newer session about kiwis", cwd=project)["session_id"]

    archived = run_cli("sessions", "archive", newer[:8], cwd=project)
    assert archived.returncode == 0 and archived.stdout.startswith(f"archived session {newer[:8]} ")
    listed = run_cli("sessions", "list", cwd=project).stdout.splitlines()
    assert [line.split()[0] for line in listed[1:]] == [older[:8]]
    assert run_cli("sessions", "list", "--archived", cwd=project).stdout.splitlines()[1].startswith(newer[:8])
    searched = run_cli("sessions", "search", "kiwis", cwd=project).stdout
    assert older[:8] in searched and newer[:8] not in searched
    assert headless("-c", "-p", "go on", cwd=project)["session_id"] == older
    assert headless("-r", newer[:8], "-p", "still there", cwd=project)["session_id"] == newer  # -r still finds it

    assert run_cli("sessions", "unarchive", newer, cwd=project).returncode == 0
    listed = run_cli("sessions", "list", cwd=project).stdout.splitlines()
    assert [line.split()[0] for line in listed[1:]] == [newer[:8], older[:8]]
    assert run_cli("sessions", "archive", "nonesuch", cwd=project).returncode == 2


def test_fork_continues_independently_and_leaves_the_original_unchanged(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    server.script(text("base answer"), text("fork answer"), text("original answer"), text("fork again"))
    original = headless("-p", "the shared start", "--name", "base", cwd=project)["session_id"]
    before = run_cli("sessions", "export", original, cwd=project).stdout

    fork = headless("-r", "base", "--fork", "-p", "try it the other way", cwd=project)["session_id"]
    assert fork != original
    assert sent_texts(server, 1) == ["the shared start", "base answer", "try it the other way"]
    assert run_cli("sessions", "export", original, cwd=project).stdout == before  # unchanged

    headless("-r", original, "-p", "the first way", cwd=project)
    assert sent_texts(server, 2) == ["the shared start", "base answer", "the first way"]
    headless("-r", fork, "-p", "and on", cwd=project)
    assert sent_texts(server, 3) == [
        "the shared start",
        "base answer",
        "try it the other way",
        "fork answer",
        "and on",
    ]
    shown = run_cli("sessions", "show", fork, cwd=project).stdout
    assert f"forked from {original} (base)" in shown.splitlines()
    # Listed apart from its source, not as its twin.
    listed = {
        line.split()[0]: line.split("  ")[-1]
        for line in run_cli("sessions", "list", cwd=project).stdout.splitlines()[1:]
    }
    assert (listed[original[:8]], listed[fork[:8]]) == ("base · the shared start", "base (fork)")
    # The fork shares the stored messages of the history it copied rather than copying them.
    with sqlite3.connect(code_puppy_home / "sessions.db") as db:
        assert db.execute("SELECT count(*) FROM entries").fetchone() == (2 + 2 + 4,)
    # Its index is its own: the fork's turn is found in the fork only, the shared start in both.
    fork_only = run_cli("sessions", "search", "other way", cwd=project).stdout
    assert fork[:8] in fork_only and original[:8] not in fork_only
    shared = run_cli("sessions", "search", "shared", cwd=project).stdout
    assert fork[:8] in shared and original[:8] in shared

    server.script(text("third line answer"))
    third = headless("-c", "--fork", "--name", "third line", "-p", "a third way", cwd=project)["session_id"]
    assert third not in (original, fork)
    assert sent_texts(server, 4)[-3:] == ["and on", "fork again", "a third way"]  # -c: the latest, the fork
    assert f"forked from {fork}" in run_cli("sessions", "show", "third line", cwd=project).stdout

    refused = run_cli("--fork", "-p", "x", cwd=project)
    assert (refused.returncode, refused.stderr) == (
        2,
        "code-puppy: error: --fork copies the session -r ID or -c continues: use it with one of them\n",
    )


def test_resume_without_an_id_needs_the_interactive_chat(server: FakeLLMServer, project: Path) -> None:
    expected = (
        "code-puppy: error: -r without an ID opens a picker, which needs the interactive chat in a terminal: "
        "pass -r ID\n"
    )
    headless_picker = run_cli("-r", "-p", "x", cwd=project)
    assert (headless_picker.returncode, headless_picker.stderr) == (2, expected)
    no_terminal = run_cli("-r", cwd=project)
    assert (no_terminal.returncode, no_terminal.stderr) == (2, expected)
    assert not server.requests


def test_concurrent_searches_and_a_run_on_a_big_upgraded_store_never_hit_a_locked_database(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    """Only one process indexes the sessions stored before search existed, in short transactions: searches wait
    for it, and a run saving meanwhile is never told the store is locked."""
    server.script(text("the pelican answer"), text("b"), text("again"))
    headless("-p", "the pelican question", cwd=project)
    headless("-c", "-p", "a second turn", cwd=project)
    db_path = code_puppy_home / "sessions.db"
    _downgrade(db_path)
    with sqlite3.connect(db_path) as db:  # 600 more sessions with the same history, as an old store could have
        db.row_factory = sqlite3.Row
        (conversation,) = [dict(row) for row in db.execute("SELECT * FROM conversations")]
        (session,) = [dict(row) for row in db.execute("SELECT * FROM sessions")]
        for table, row in (("conversations", conversation), ("sessions", session)):
            db.executemany(
                f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
                [tuple({**row, "id": f"{n:08d}-clone"}.values()) for n in range(600)],
            )
    searches = [start_cli("sessions", "search", "pelican", "--all", cwd=project) for _ in range(4)]
    run = start_cli("-c", "-p", "a third turn", cwd=project)
    outputs = [process.communicate(timeout=120) for process in [*searches, run]]
    assert run.returncode == 0 and outputs[-1][1] == "", outputs[-1][1]
    for process, (out, err) in zip(searches, outputs, strict=False):
        assert process.returncode == 0, err
        assert len(out.splitlines()) == 3 * 50  # the 50 best sessions, each with its question and answer
        assert set(err.splitlines()) <= {f"indexing {n} sessions stored before search existed…" for n in range(602)}
    assert any(err.startswith("indexing ") for _, err in outputs[:-1])  # the first search said why it took long
    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT count(*) FROM sessions WHERE indexed = 0").fetchone() == (0,)


def test_a_background_indexer_leaves_the_work_to_the_process_that_holds_the_index_lock(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    server.script(text("a"), text("b"))
    headless("-p", "alpha", cwd=project)
    db_path = code_puppy_home / "sessions.db"
    _downgrade(db_path)
    lock = os.open(db_path.with_name("sessions.db.index-lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process indexing
        headless("-p", "beta", cwd=project)  # its background indexer finds the lock taken and does nothing
        with sqlite3.connect(db_path) as db:
            assert db.execute("SELECT count(*) FROM sessions WHERE indexed = 0").fetchone() == (1,)
        database = Database(db_path)
        try:
            assert catch_up(database, wait=False) == 0
        finally:
            database.close()
    finally:
        os.close(lock)
    found = run_cli("sessions", "search", "alpha", cwd=project)
    assert (found.returncode, found.stderr) == (0, "indexing 1 session stored before search existed…\n")


def test_a_query_is_plain_words_never_fts5_syntax(server: FakeLLMServer, project: Path, backend: str) -> None:
    server.script(text("I read main.py and secret.txt of code-puppy; NEAR(a b, x) is fine"), text("other"))
    wanted = headless("-p", 'fix x y "quoted" words', cwd=project)["session_id"]
    headless("-p", "something else entirely", cwd=project)

    def matched(query: str) -> tuple[int, list[str]]:
        found = run_cli("sessions", "search", query, cwd=project)
        assert found.stderr in ("", f"no session matches in {project.resolve()} (--all searches every project)\n")
        return found.returncode, [line.split()[0] for line in found.stdout.splitlines() if not line[0].isspace()]

    for query in ("code-puppy", "main.py", "secret.txt", "x y", "NEAR(a b, x)", "mai*", '"code-puppy; near"', "read*"):
        assert matched(query) == (0, [wanted[:8]]), query
    for query in ("x y -z", "*", "main.py platypus", '"puppy code"', '"unbalanced', "OR", "mai"):
        assert matched(query) == (1, []), query
    lines = run_cli("sessions", "search", "code-puppy", cwd=project).stdout.splitlines()
    assert lines[1:] == ["    ‹ I read main.py and secret.txt of [code-puppy]; NEAR(a b, x) is fine"]

    raw = subprocess.run(
        [str(CODE_PUPPY).encode(), b"sessions", b"search", b"\xff\xfe"], cwd=project, capture_output=True, check=False
    )
    assert (raw.returncode, raw.stdout) == (2, b"")
    assert raw.stderr.decode(errors="replace").startswith("code-puppy: error: the search query ")
    assert len(raw.stderr.splitlines()) == 1 and b"not valid UTF-8" in raw.stderr
    huge = run_cli("sessions", "search", "\udcff" + "a" * 100_000, cwd=project)
    assert huge.returncode == 2 and len(huge.stderr) < 200, huge.stderr[:300]


def test_a_damaged_search_index_never_fails_a_save_and_check_and_repair_handle_it(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    server.script(text("first answer"), text("hi answer"), text("more answer"))
    first = headless("-p", "first question", cwd=project)["session_id"]
    db_path = code_puppy_home / "sessions.db"
    with sqlite3.connect(db_path) as db:  # out of step: FTS5 still opens, its check fails, a rebuild mends it
        db.execute("UPDATE search_text SET text = 'changed behind its back'")
    checked = run_cli("sessions", "check", cwd=project)
    assert checked.returncode == 1 and "  search index: " in checked.stdout, checked.stdout
    assert "`code-puppy sessions repair` rebuilds the search index" in checked.stdout
    repaired = run_cli("sessions", "repair", cwd=project)
    assert (repaired.returncode, repaired.stdout) == (0, f"rebuilt the search index of {db_path}\n")
    assert run_cli("sessions", "check", cwd=project).stdout == f"{db_path}: ok\n"
    assert run_cli("sessions", "search", "behind", cwd=project).returncode == 0

    with sqlite3.connect(db_path) as db:  # worse: FTS5 cannot even open the index
        db.execute("DELETE FROM search_data WHERE id > 1")
    saved = run_cli("-p", "hi there", cwd=project)
    assert (saved.returncode, saved.stderr) == (0, ""), saved.stderr
    assert run_cli("-c", "-p", "more please", cwd=project).returncode == 0
    assert sent_texts(server, 2) == ["hi there", "hi answer", "more please"]
    broken = run_cli("sessions", "search", "hi", cwd=project)
    assert broken.returncode == 1 and broken.stderr.splitlines()[-1] == (
        "the search index is damaged (vtable constructor failed: search): `code-puppy sessions repair` rebuilds it"
    )
    checked = run_cli("sessions", "check", cwd=project)
    assert checked.returncode == 1 and "  search index: vtable constructor failed: search" in checked.stdout

    repaired = run_cli("sessions", "repair", cwd=project)  # a rebuild cannot: the whole store is rebuilt
    assert repaired.returncode == 0 and "kept 2 sessions and 6 messages" in repaired.stdout, repaired.stdout
    assert run_cli("sessions", "check", cwd=project).stdout == f"{db_path}: ok\n"
    found = run_cli("sessions", "search", "please", cwd=project)
    assert found.returncode == 0 and "› [more] [please]" not in found.stdout and "[please]" in found.stdout
    assert run_cli("sessions", "search", "first", cwd=project).stdout.startswith(first[:8])


def test_control_characters_never_reach_the_terminal_and_names_refuse_them(
    server: FakeLLMServer, project: Path
) -> None:
    server.script(text("answer with \x1b]0;pwned\x07 inside"))
    hostile = "\x1b[2J\x1b]0;pwned\x07 clear the screen\x9b"
    session = headless("-p", hostile, cwd=project)["session_id"]
    listed = run_cli("sessions", "list", cwd=project).stdout
    assert listed.splitlines()[1].endswith("  �[2J�]0;pwned� clear the screen�")
    searched = run_cli("sessions", "search", "pwned", cwd=project).stdout
    assert sorted(searched.splitlines()[1:]) == [
        "    ‹ answer with �]0;[pwned]� inside",
        "    › �[2J�]0;[pwned]� clear the screen�",
    ]
    shown = run_cli("sessions", "show", session[:8], cwd=project).stdout
    assert "› �[2J�]0;pwned� clear the screen�" in shown and "answer with �]0;pwned� inside" in shown
    for output in (listed, searched, shown):
        assert not any((ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0 for c in output)

    refused = "a session name cannot hold control characters (escape sequences, newlines, tabs)"
    renamed = run_cli("sessions", "rename", session[:8], "evil\x1b[2J", cwd=project)
    assert (renamed.returncode, renamed.stderr) == (2, f"code-puppy: error: {refused}\n")
    named = run_cli("-p", "x", "--name", "two\nlines", cwd=project)
    assert (named.returncode, named.stderr) == (2, f"code-puppy: error: --name: {refused}\n")
    assert len(server.requests) == 1


def test_a_save_whose_indexing_failed_is_found_after_catch_up(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    server.script(text("first answer"), text("platypus answer"), text("more"))
    headless("-p", "first question", cwd=project)
    db_path = code_puppy_home / "sessions.db"
    with sqlite3.connect(db_path) as db:  # the index refuses every write (a damaged index, a full disk)
        db.execute("CREATE TRIGGER refuse BEFORE INSERT ON search_text BEGIN SELECT RAISE(ABORT, 'refused'); END")

    saved = headless("-p", "platypus question", cwd=project)["session_id"]

    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT indexed FROM sessions WHERE id = ?", (saved,)).fetchone() == (0,)
        db.execute("DROP TRIGGER refuse")  # the index takes writes again
    assert headless("-c", "-p", "go on", cwd=project)["session_id"] == saved  # the session itself was saved whole
    assert sent_texts(server, 2) == ["platypus question", "platypus answer", "go on"]
    found = run_cli("sessions", "search", "platypus", cwd=project)
    assert found.returncode == 0, found.stderr
    assert [line.split()[0] for line in found.stdout.splitlines() if not line[0].isspace()] == [saved[:8]]
