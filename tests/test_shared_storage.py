"""The sessions store on PostgreSQL (`[storage] url`): two "machines" (two CODE_PUPPY_HOMEs) share one database, through
the installed console script, a real PostgreSQL and the fake model server."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli, start_cli, wait_for
from tests.fake_llm import FakeLLMServer, text


def listing(*roots: Path) -> list[str]:
    """Every file and folder under `roots`, for a before/after comparison."""
    return sorted(str(path) for root in roots for path in root.rglob("*"))


def machine(home: Path, server: FakeLLMServer, url: str | None = None) -> dict[str, str]:
    """The environment of a machine whose config.toml points at the fake server (and at `url`, when given)."""
    home.mkdir(parents=True, exist_ok=True)
    storage = f'[storage]\nurl = "{url}"\n' if url else ""
    (home / "config.toml").write_text(
        f'model = "fake"\n{storage}[sessions]\nauto_title = false\n[models.fake]\nname = "fake-model"\n'
        f'base_url = "{server.base_url}"\n'
    )
    return {"CODE_PUPPY_HOME": str(home)}


def headless(*args: str, cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    done = run_cli(*args, "--output-format", "json", cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_session_made_on_one_machine_is_listed_searched_and_continued_on_another(
    server: FakeLLMServer, project: Path, tmp_path: Path, postgres_url: str
) -> None:
    one = machine(tmp_path / "one", server, postgres_url)
    two = machine(tmp_path / "two", server, postgres_url)
    server.script(text("the answer is forty-two"), text("second answer"), text("third answer"))

    made = headless("-p", "what is the meaning of life", cwd=project, env=one)
    session = made["session_id"]

    listed = run_cli("sessions", "list", cwd=project, env=two)
    assert listed.returncode == 0, listed.stderr
    assert session[:8] in listed.stdout and "what is the meaning of life" in listed.stdout
    shown = run_cli("sessions", "show", session[:8], cwd=project, env=two)
    assert (shown.returncode, "the answer is forty-two" in shown.stdout) == (0, True), shown.stderr
    found = run_cli("sessions", "search", "meaning", "--output-format", "json", cwd=project, env=two)
    assert found.returncode == 0, found.stderr
    assert [hit["session_id"] for hit in json.loads(found.stdout)] == [session]

    assert headless("-c", "-p", "and then?", cwd=project, env=two)["session_id"] == session
    assert headless("-r", session, "-p", "and finally?", cwd=project, env=one)["session_id"] == session
    assert [m["content"] for m in server.requests[2].body["messages"] if m["role"] == "user"] == [
        "what is the meaning of life",
        "and then?",
        "and finally?",
    ]
    # Nothing of the store is on either machine: no SQLite file, no lock beside one (the checkpoints' file snapshots
    # stay in each machine's shadow repositories).
    for home in (tmp_path / "one", tmp_path / "two"):
        assert [path.name for path in home.iterdir() if path.name != "checkpoints"] == ["config.toml"]
        assert [path for path in home.rglob("*") if "sessions.db" in path.name or path.suffix == ".sqlite"] == []


@pytest.mark.parametrize(
    "command",
    [
        ("-p", "hello"),
        ("-c", "-p", "hello"),
        ("sessions", "list"),
        ("sessions", "search", "hello"),
        ("usage",),
        ("steer", "hi"),
        ("storage", "check"),
        ("-p", "hello", "--durable"),
        ("runs", "list"),
        ("runs", "show", "0123abcd"),
        ("runs", "resume", "0123abcd"),
        ("runs", "cancel", "0123abcd"),
        ("queue", "add", "-p", "hello"),
        ("worker", "--permission-mode", "yolo"),
        ("workers", "list"),
    ],
)
def test_an_unreachable_store_is_one_line_exit_2_and_nothing_written(
    server: FakeLLMServer, project: Path, tmp_path: Path, command: tuple[str, ...]
) -> None:
    url = "postgresql://puppy:s3cret@127.0.0.1:9/sessions"  # the discard port: refused
    env = machine(tmp_path / "home", server, url)
    if command[0] == "queue":  # a project a run can be queued from, but for the store
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "start"]):
            subprocess.run([*git, *args], cwd=project, check=True, capture_output=True)
    before = listing(tmp_path / "home", project)

    done = run_cli(*command, cwd=project, env=env)

    assert done.returncode == 2
    assert done.stderr.startswith("code-puppy: error: cannot reach the sessions store at ")
    assert "postgresql://puppy@127.0.0.1:9/sessions" in done.stderr and "s3cret" not in done.stderr
    assert done.stderr.count("\n") == 1
    assert server.requests == []
    assert listing(tmp_path / "home", project) == before


def test_storage_migrate_copies_the_local_store_once_and_check_reports_both(
    server: FakeLLMServer, project: Path, tmp_path: Path, postgres_url: str
) -> None:
    local = machine(tmp_path / "laptop", server)
    server.script(text("first answer"), text("second answer"), text("third answer"))
    first = headless("-p", "a local question", cwd=project, env=local)["session_id"]
    second = headless("-p", "another local question", cwd=project, env=local)["session_id"]
    sqlite_file = tmp_path / "laptop" / "sessions.db"

    checked = run_cli("storage", "check", cwd=project, env=local)
    assert (checked.returncode, checked.stderr) == (0, "")
    assert checked.stdout == (
        f"backend: sqlite\nfile: {sqlite_file}\nschema: m011_steer_kinds (11 migrations)\n"
        "sessions: 2\nmessages: 4\ncost rows: 2\ncheckpoints: 0\njournals: 0\nrunning runs: 0\n"
    )
    refused = run_cli("storage", "migrate", "--from", "sqlite", cwd=project, env=local)
    assert (refused.returncode, refused.stderr) == (
        2,
        "code-puppy: error: storage migrate copies into PostgreSQL: set [storage] url or CODE_PUPPY_STORAGE_URL\n",
    )

    shared = {**local, "CODE_PUPPY_STORAGE_URL": postgres_url}
    copied = run_cli("storage", "migrate", "--from", "sqlite", cwd=project, env=shared)
    assert (copied.returncode, copied.stderr) == (0, "")
    assert copied.stdout == (
        "copied 2 sessions, 4 messages, 2 cost rows, 0 checkpoints, 0 journals; 0 sessions were there already "
        f"(from {sqlite_file} to {postgres_url})\n"
    )
    again = run_cli("storage", "migrate", "--from", "sqlite", cwd=project, env=shared)
    assert again.stdout == (
        "copied 0 sessions, 0 messages, 0 cost rows, 0 checkpoints, 0 journals; 2 sessions were there already "
        f"(from {sqlite_file} to {postgres_url})\n"
    )
    checked = run_cli("storage", "check", cwd=project, env=shared)
    assert checked.stdout == (
        f"backend: postgresql\nurl: {postgres_url}\nschema: m011_steer_kinds (11 migrations)\n"
        "sessions: 2\nmessages: 4\ncost rows: 2\ncheckpoints: 0\njournals: 0\nrunning runs: 0\n"
    )

    # Another machine sees the copied sessions, finds them and continues one.
    other = machine(tmp_path / "server", server, postgres_url)
    found = run_cli("sessions", "search", "another", "--output-format", "json", cwd=project, env=other)
    assert [hit["session_id"] for hit in json.loads(found.stdout)] == [second]
    assert headless("-r", first, "-p", "continued", cwd=project, env=other)["session_id"] == first
    assert [m["content"] for m in server.requests[2].body["messages"] if m["role"] == "user"] == [
        "a local question",
        "continued",
    ]


def test_a_password_in_the_urls_query_string_is_never_printed(
    server: FakeLLMServer, project: Path, tmp_path: Path
) -> None:
    url = "postgresql://puppy@127.0.0.1:9/sessions?sslmode=disable&password=s3cretQ"  # libpq reads it there too
    done = run_cli("storage", "check", cwd=project, env=machine(tmp_path / "home", server, url))
    assert done.returncode == 2
    assert "at postgresql://puppy@127.0.0.1:9/sessions?sslmode=disable:" in done.stderr
    assert "s3cretQ" not in done.stderr


def test_a_store_whose_schema_is_newer_refuses_in_one_line(
    server: FakeLLMServer, project: Path, tmp_path: Path, postgres_url: str
) -> None:
    import sqlite3

    import psycopg

    local = machine(tmp_path / "home", server)
    server.script(text("answer"))
    headless("-p", "a question", cwd=project, env=local)
    with sqlite3.connect(tmp_path / "home" / "sessions.db") as db:
        db.execute("INSERT INTO schema_migrations VALUES ('m999_from_the_future', '2030-01-01')")
    shared = machine(tmp_path / "shared", server, postgres_url)
    assert run_cli("storage", "check", cwd=project, env=shared).returncode == 0  # creates the schema
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("INSERT INTO schema_migrations VALUES ('m999_from_the_future', '2030-01-01')")

    for env, where in ((local, str(tmp_path / "home" / "sessions.db")), (shared, postgres_url)):
        for command in (("-p", "hello"), ("sessions", "list"), ("storage", "check")):
            done = run_cli(*command, cwd=project, env=env)
            assert (done.returncode, done.stdout, done.stderr) == (
                2,
                "",
                f"code-puppy: error: the sessions store at {where} was written by a newer code-puppy "
                "(migrations m999_from_the_future); upgrade code-puppy\n",
            ), command
    assert len(server.requests) == 1


def test_the_storage_url_of_a_project_config_is_never_honoured(
    server: FakeLLMServer, repo: Path, tmp_path: Path
) -> None:
    env = machine(tmp_path / "home", server)
    (repo / ".code-puppy" / "config.toml").write_text('[storage]\nurl = "postgresql://evil@127.0.0.1:9/loot"\n')
    assert run_cli("trust", cwd=repo, env=env).returncode == 0
    server.script(text("kept here"))

    ran = run_cli("-p", "hello", cwd=repo, env=env)

    assert (ran.returncode, ran.stdout) == (0, "kept here\n"), ran.stderr
    assert (tmp_path / "home" / "sessions.db").is_file()
    assert run_cli("storage", "check", cwd=repo, env=env).stdout.startswith("backend: sqlite\n")


def test_steer_from_one_machine_reaches_a_run_on_another(
    server: FakeLLMServer, project: Path, tmp_path: Path, postgres_url: str
) -> None:
    runner = machine(tmp_path / "server", server, postgres_url)
    steerer = machine(tmp_path / "laptop", server, postgres_url)
    server.script(text("A first draft.", delay=2.0), text("Revised with the tests in mind."))
    process = start_cli("-p", "write it", "--output-format", "stream-json", cwd=project, env=runner)
    try:
        wait_for(lambda: len(server.requests) >= 1, what="the run's first request")
        session = json.loads(process.stdout.readline())["session_id"]  # type: ignore[union-attr]
        steered = run_cli("steer", "--session", session[:8], "focus on the tests", cwd=tmp_path, env=steerer)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert (steered.returncode, steered.stderr) == (0, "")
    assert steered.stdout == f"steered session {session[:8]} (pid {process.pid})\n"
    assert process.returncode == 0, stderr
    assert [m["content"] for m in server.requests[1].body["messages"] if m["role"] == "user"] == [
        "write it",
        "focus on the tests",
    ]
    assert json.loads(stdout.splitlines()[-1])["output"] == "Revised with the tests in mind."


def test_a_run_without_a_url_imports_no_psycopg_and_one_with_it_does(
    server: FakeLLMServer, project: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_startup import imported_modules

    def postgres_modules() -> list[str]:
        modules = imported_modules("-p", "hi", cwd=project)
        assert "pydantic_ai.models.openai" in modules  # the run happened
        return sorted(m for m in modules if m.split(".")[0] == "psycopg" or m == "code_puppy.sessions.postgres")

    server.script(text("hi"), text("hi again"))
    assert postgres_modules() == []
    monkeypatch.setenv("CODE_PUPPY_STORAGE_URL", postgres_url)
    assert {"psycopg", "code_puppy.sessions.postgres"} <= set(postgres_modules())


def test_a_url_that_is_not_postgresql_is_one_line_exit_2(server: FakeLLMServer, project: Path, tmp_path: Path) -> None:
    env = machine(tmp_path / "home", server, "mysql://puppy@127.0.0.1/sessions")
    done = run_cli("-p", "hello", cwd=project, env=env)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"code-puppy: error: [storage] url in {tmp_path / 'home' / 'config.toml'} must be a url "
        "postgresql://USER[:PASSWORD]@HOST:PORT/DB\n"
    )
    assert server.requests == [] and not (tmp_path / "home" / "sessions.db").exists()


def test_the_dbos_system_database_is_the_store_url_or_a_file_in_the_data_directory(
    code_puppy_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from code_puppy.durable.system import system_database_url

    (code_puppy_home / "config.toml").write_text('[storage]\nurl = "postgresql://puppy:pw@db:5432/shared"\n')
    assert system_database_url() == "postgresql://puppy:pw@db:5432/shared"
    monkeypatch.setenv("CODE_PUPPY_STORAGE_URL", "postgresql://other@db:5432/elsewhere")
    assert system_database_url() == "postgresql://other@db:5432/elsewhere"
    assert sorted(path.name for path in code_puppy_home.iterdir()) == ["config.toml"]  # no SQLite file made
    monkeypatch.delenv("CODE_PUPPY_STORAGE_URL")
    (code_puppy_home / "config.toml").unlink()
    assert system_database_url() == f"sqlite:///{code_puppy_home / 'durable.sqlite'}"
    assert (code_puppy_home / "durable.sqlite").stat().st_mode & 0o777 == 0o600


def test_sessions_check_and_repair_say_they_work_on_the_sqlite_file_only(
    server: FakeLLMServer, project: Path, tmp_path: Path, postgres_url: str
) -> None:
    env = machine(tmp_path / "home", server, postgres_url.replace("postgres@", "postgres:pw@"))
    for command in ("check", "repair"):
        done = run_cli("sessions", command, cwd=project, env=env)
        assert (done.returncode, done.stdout, done.stderr) == (
            2,
            "",
            f"code-puppy: error: the sessions store is on PostgreSQL ({postgres_url}): `sessions check` and `repair` "
            "work on the SQLite file; `code-puppy storage check` reports on PostgreSQL\n",
        )
