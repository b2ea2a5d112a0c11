"""Every test gets its own CODE_PUPPY_HOME and no provider credentials; real model requests are off."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from pydantic_ai import models

from code_puppy.sessions.catalog import SessionInfo
from code_puppy.sessions.store import SqliteConversationStore
from tests.fake_llm import FakeLLMServer
from tests.postgres import postgres_server, postgres_url  # noqa: F401  (fixtures)

models.ALLOW_MODEL_REQUESTS = False

CODE_PUPPY = Path(sys.executable).parent / "code-puppy"
"""The installed console script of the environment running the tests."""

_PROVIDER_VARIABLES = ("OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_", "OLLAMA_", "OPENROUTER_", "CODE_PUPPY_")


@pytest.fixture(autouse=True)
def code_puppy_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("home")
    for name in list(os.environ):
        if name.startswith(_PROVIDER_VARIABLES):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CODE_PUPPY_HOME", str(home))
    return home


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the test on each store: the SQLite file, and PostgreSQL (`CODE_PUPPY_STORAGE_URL`)."""
    if request.param == "postgresql":
        monkeypatch.setenv("CODE_PUPPY_STORAGE_URL", request.getfixturevalue("postgres_url"))
    return request.param


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where the test's sessions database lives."""
    return tmp_path / "data" / "sessions.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[SqliteConversationStore]:
    """A real sessions database of the test's own, open for the test."""
    with SqliteConversationStore(db_path) as opened:
        yield opened


def stored_info(store: SqliteConversationStore, session_id: str) -> SessionInfo | None:
    """The stored row of the session with exactly this id, or None."""
    found = store.sessions.find(session_id)
    return found[0] if found and found[0].id == session_id else None


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory the user can write outside /tmp: the sandbox's /tmp is its own, so only a write here escapes."""
    directory = Path(tempfile.mkdtemp(prefix="code-puppy-test-", dir="/var/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def home(outside: Path) -> Path:
    """A home directory with credentials in it."""
    home = outside / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    (home / ".netrc").write_text("machine example.com password hunter2\n")
    return home


@pytest.fixture
def repo(project: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / ".code-puppy").mkdir()
    (project / ".code-puppy" / "config.toml").write_text("# the project's config\n")
    return project


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty git-less project directory with one file."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "README.md").write_text("# demo project\n")
    return root


def run_cli(
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run the installed `code-puppy` in a subprocess, with the test's environment plus `env`."""
    return subprocess.run(
        [str(CODE_PUPPY), *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_cli(*args: str, cwd: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """Start the installed `code-puppy` in the background, stdin closed, stdout and stderr captured."""
    return subprocess.Popen(
        [str(CODE_PUPPY), *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition: Callable[[], object], *, timeout: float = 60, what: str = "the condition") -> None:
    """Poll `condition` until it is true; fail the test after `timeout` seconds. A wait, not a speed check: it returns
    as soon as the condition holds, and its default leaves room for a child process that starts slowly on a loaded
    2-core machine (20 s was once not enough there for a start, a tool call and a second request)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def server(code_puppy_home: Path) -> Iterator[FakeLLMServer]:
    """A fake OpenAI-compatible server, configured in config.toml as the default model `fake`."""
    with FakeLLMServer() as fake:
        (code_puppy_home / "config.toml").write_text(
            # No title requests after a chat's first turn: they would take the answers scripted for the turns.
            f'model = "fake"\n[sessions]\nauto_title = false\n[models.fake]\nname = "fake-model"\n'
            f'base_url = "{fake.base_url}"\n'
        )
        yield fake
