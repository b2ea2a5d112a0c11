"""The sessions store on PostgreSQL (`[storage] url`): two "machines" (two CODE_PUPPY_HOMEs) share one database, through
the installed console script, a real PostgreSQL and the fake model server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
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


@pytest.mark.parametrize("command", [("-p", "hello"), ("-c", "-p", "hello"), ("sessions", "list"), ("steer", "hi")])
def test_an_unreachable_store_is_one_line_exit_2_and_nothing_written(
    server: FakeLLMServer, project: Path, tmp_path: Path, command: tuple[str, ...]
) -> None:
    url = "postgresql://puppy:s3cret@127.0.0.1:9/sessions"  # the discard port: refused
    env = machine(tmp_path / "home", server, url)
    before = listing(tmp_path / "home", project)

    done = run_cli(*command, cwd=project, env=env)

    assert done.returncode == 2
    assert done.stderr.startswith("code-puppy: error: cannot reach the sessions store at ")
    assert "postgresql://puppy@127.0.0.1:9/sessions" in done.stderr and "s3cret" not in done.stderr
    assert done.stderr.count("\n") == 1
    assert server.requests == []
    assert listing(tmp_path / "home", project) == before
