"""A broken store never eats the answer (issue 10.4): checked before anything is sent, never deleted, repairable."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore
from tests.conftest import CODE_PUPPY, run_cli
from tests.fake_llm import FakeLLMServer, text
from tests.sessions.test_journal_recovery import die_journaling
from tests.sessions_data import exchange
from tests.unprivileged import unprivileged


def seed(home: Path, project: Path, *sizes: int) -> list[str]:
    """Sessions of `project` holding `sizes` exchanges each (four messages an exchange); their ids."""

    async def write() -> list[str]:
        ids: list[str] = []
        with SqliteConversationStore(home / "sessions.db") as store:
            for size in sizes:
                session = await Session.start(store, project, model="fake")
                await session.set_message_history([m for i in range(size) for m in exchange(i)])
                ids.append(session.id)
        return ids

    return asyncio.run(write())


def damage(database: Path, *, fraction: float = 1 / 3, pages: int = 5) -> bytes:
    """Overwrite `pages` pages from `fraction` into the file (the header page stays); the damaged bytes."""
    data = bytearray(database.read_bytes())
    first = max(1, int(len(data) // 4096 * fraction))
    for page in range(first, first + pages):
        data[page * 4096 : (page + 1) * 4096] = b"\xde\xad" * 2048
    database.write_bytes(bytes(data))
    return bytes(data)


def test_a_store_that_is_not_a_database_stops_the_run_before_anything_is_sent(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    store = code_puppy_home / "sessions.db"
    store.write_bytes(b"this is not a database" * 100)
    before = store.read_bytes()
    completed = run_cli("-p", "hi", "--output-format", "json", cwd=project)
    assert completed.returncode == 2
    assert completed.stderr == (
        f"code-puppy: error: {store} is damaged (file is not a database); it was left as it is. "
        "`code-puppy sessions repair` moves it aside and keeps what can still be read\n"
    )
    result = json.loads(completed.stdout)
    assert (result["status"], result["session_id"], result["output"]) == ("error", None, None)
    assert result["error"] == completed.stderr.removeprefix("code-puppy: error: ").rstrip()
    assert server.requests == []
    assert store.read_bytes() == before


def test_a_damaged_page_of_the_resumed_session_stops_the_run_before_anything_is_sent(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    small, big = seed(code_puppy_home, project, 5, 500)
    damaged = damage(code_puppy_home / "sessions.db")
    completed = run_cli("-r", big[:8], "-p", "hi", cwd=project)
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.startswith(f"code-puppy: error: {code_puppy_home / 'sessions.db'} is damaged (")
    assert completed.stderr.count("\n") == 1
    assert server.requests == []
    assert (code_puppy_home / "sessions.db").read_bytes() == damaged
    # The pages the other session lives on are sound: it goes on.
    server.script(text("still here"))
    assert run_cli("-r", small[:8], "-p", "hi", cwd=project).stdout == "still here\n"


def test_check_then_repair_keeps_every_readable_message_and_the_damaged_file(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    small, big = seed(code_puppy_home, project, 5, 500)
    sound = run_cli("sessions", "check", cwd=project)
    assert (sound.returncode, sound.stdout) == (0, f"{code_puppy_home / 'sessions.db'}: ok\n")
    damaged = damage(code_puppy_home / "sessions.db")

    checked = run_cli("sessions", "check", cwd=project)
    assert checked.returncode == 1
    assert checked.stdout.startswith(f"{code_puppy_home / 'sessions.db'} is damaged:\n")

    repaired = run_cli("sessions", "repair", cwd=project)
    assert repaired.returncode == 0, repaired.stderr
    moved, rebuilt = repaired.stdout.splitlines()
    aside = Path(moved.removeprefix("moved the damaged database to "))
    assert aside.name.startswith("sessions.db.corrupt-") and aside.read_bytes() == damaged
    assert rebuilt.startswith(f"rebuilt {code_puppy_home / 'sessions.db'}: kept 2 sessions and ")
    assert rebuilt.endswith("; 1 of them end where a damaged page cut their history short")

    assert run_cli("sessions", "check", cwd=project).returncode == 0
    listed = run_cli("sessions", "list", cwd=project).stdout
    assert small[:8] in listed and big[:8] in listed
    server.script(text("whole"), text("shortened"))
    assert run_cli("-r", small[:8], "-p", "hi", cwd=project).stdout == "whole\n"
    assert prompts(server, 0) == [*(f"please fix bug {i}" for i in range(5)), "hi"]
    assert run_cli("-r", big[:8], "-p", "hi", cwd=project).stdout == "shortened\n"
    kept = prompts(server, 1)
    assert kept[: len(kept) - 1] == [f"please fix bug {i}" for i in range(len(kept) - 1)]  # up to the gap, in order
    assert 1 < len(kept) < 500


def prompts(server: FakeLLMServer, request: int) -> list[str]:
    """The user messages of a request, each cut to its first five words."""
    users = [m["content"] for m in server.requests[request].body["messages"] if m["role"] == "user"]
    return [" ".join(content.split()[:4]) if content.startswith("please") else content for content in users]


def test_repair_leaves_a_sound_store_alone(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    seed(code_puppy_home, project, 2)
    repaired = run_cli("sessions", "repair", cwd=project)
    assert (repaired.returncode, repaired.stdout) == (0, f"{code_puppy_home / 'sessions.db'}: ok, nothing to repair\n")
    assert [p.name for p in code_puppy_home.iterdir() if ".corrupt-" in p.name] == []


def test_a_save_that_fails_after_the_answer_still_prints_it_and_exits_1(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    seed(code_puppy_home, project, 1)  # the store exists and is migrated; the run's own writes are what fail
    answer = "long" * 50_000  # one streamed chunk: the fake server splits on white space
    server.script(text(answer))
    completed = subprocess.run(
        # The file size limit plays a full disk: every write past 100 KB fails (Python ignores SIGXFSZ).
        ["bash", "-c", f'ulimit -f 100 && exec "{CODE_PUPPY}" -p hi --output-format json'],
        cwd=project,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert completed.returncode == 1, completed.stderr
    result = json.loads(completed.stdout)
    assert (result["status"], result["output"]) == ("error", answer)
    assert result["error"].startswith(f"session {result['session_id'][:8]} could not be saved to ")
    assert "disk I/O error" in result["error"] or "full" in result["error"]


def full_disk_run(*args: str, cwd: Path, kilobytes: int) -> subprocess.CompletedProcess[str]:
    """The installed `code-puppy` with every write past `kilobytes` failing, as on a full disk (the file size limit;
    Python ignores SIGXFSZ)."""
    return subprocess.run(
        ["bash", "-c", f'ulimit -f {kilobytes} && exec "$@"', "bash", str(CODE_PUPPY), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )


def test_a_turn_that_cannot_be_recovered_before_anything_is_sent_is_one_line_exit_2(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    (session_id,) = seed(code_puppy_home, project, 1)
    die_journaling(code_puppy_home / "sessions.db", session_id)
    # 32 KB: the store opens (its shared-memory file is 32 KB), but the save of the recovered turn does not fit.
    completed = full_disk_run("-c", "-p", "go on", "--output-format", "json", cwd=project, kilobytes=32)
    database = code_puppy_home / "sessions.db"
    assert (completed.returncode, completed.stderr) == (
        2,
        f"code-puppy: error: cannot write to {database}: disk I/O error (free space on its disk, set CODE_PUPPY_HOME "
        "to a writable directory, or fix this one); nothing was sent, and the interrupted turn is kept for the next "
        "start\n",
    )
    result = json.loads(completed.stdout)
    assert (result["status"], result["error"]) == (
        "error",
        completed.stderr.removeprefix("code-puppy: error: ").strip(),
    )
    assert server.requests == []
    # With room again, the next start recovers the turn: nothing was lost.
    server.script(text("continued"))
    recovered = run_cli("-c", "-p", "go on", cwd=project)
    assert (recovered.returncode, recovered.stdout) == (0, "continued\n"), recovered.stderr
    assert recovered.stderr == "code-puppy: note: recovered an interrupted turn: 2 steps\n"
    users = [m["content"] for m in server.requests[0].body["messages"] if m["role"] == "user"]
    assert users[-2:] == ["interrupted question", "go on"]


def test_a_full_disk_at_the_end_of_a_turn_still_prints_the_answer(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    seed(code_puppy_home, project, 1)
    server.script(text("the answer"))
    # The run's bookkeeping after the answer (its registration as running) fails too: that costs nothing.
    completed = full_disk_run("-c", "-p", "go on", "--output-format", "json", cwd=project, kilobytes=32)
    result = json.loads(completed.stdout)
    assert (completed.returncode, result["status"], result["output"]) == (1, "error", "the answer"), completed.stderr
    assert result["error"].startswith(f"session {result['session_id'][:8]} could not be saved to ")
    assert "internal error" not in completed.stderr


def test_a_data_directory_that_is_a_file_is_one_line_exit_2(
    server: FakeLLMServer, project: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    env = {"CODE_PUPPY_HOME": str(blocker), "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test"}
    completed = run_cli("-p", "hi", "-m", "openai-chat:fake", cwd=project, env=env)
    assert completed.returncode == 2
    assert completed.stderr.startswith(f"code-puppy: error: the data directory {blocker} is a file, not a directory")
    assert completed.stderr.count("\n") == 1 and server.requests == []


def test_the_data_directory_and_the_store_are_private(server: FakeLLMServer, project: Path, tmp_path: Path) -> None:
    home = tmp_path / "fresh" / "home"
    shutil.copy(Path(os.environ["CODE_PUPPY_HOME"]) / "config.toml", tmp_path / "config.toml")
    env = {"CODE_PUPPY_HOME": str(home), "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test"}
    server.script(text("ok"))
    assert run_cli("-p", "hi", "-m", "openai-chat:fake", cwd=project, env=env).returncode == 0
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "sessions.db").stat().st_mode) == 0o600


def test_a_store_an_older_version_left_readable_to_others_is_made_private(
    server: FakeLLMServer, project: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    seed(home, project, 1)
    for file in home.glob("sessions.db*"):
        file.chmod(0o644)
    env = {"CODE_PUPPY_HOME": str(home), "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test"}
    server.script(text("ok"))
    assert run_cli("-p", "hi", "-m", "openai-chat:fake", cwd=project, env=env).returncode == 0
    modes = {file.name: stat.S_IMODE(file.stat().st_mode) for file in home.glob("sessions.db*")}
    assert "sessions.db" in modes and set(modes.values()) == {0o600}, modes


def test_a_read_only_data_directory_still_lists_and_shows_sessions(project: Path) -> None:
    runner = unprivileged()
    with runner.workdir() as workdir:
        home = workdir / "home"
        home.mkdir()
        (session_id,) = seed(home, project, 3)
        for path in (home, *home.iterdir()):  # the user may read, not write: root keeps ownership
            path.chmod(0o755 if path.is_dir() else 0o644)
        project.chmod(0o755)
        env = {"PATH": os.environ["PATH"], "HOME": str(workdir), "CODE_PUPPY_HOME": str(home)}
        listed = runner.run_cli("sessions", "list", "--all", cwd=workdir, env=env)
        shown = runner.run_cli("sessions", "show", session_id[:8], cwd=workdir, env=env)
        run = runner.run_cli("-p", "hi", "-m", "openai-chat:fake", cwd=workdir, env={**env, "OPENAI_API_KEY": "x"})
    assert (listed.returncode, shown.returncode) == (0, 0), listed.stderr + shown.stderr
    assert session_id[:8] in listed.stdout and "please fix bug 2" in shown.stdout
    assert run.returncode == 2 and run.stderr.startswith(f"code-puppy: error: cannot open {home / 'sessions.db'}: ")


@pytest.mark.parametrize("command", [("sessions", "check"), ("sessions", "repair")])
def test_check_and_repair_without_a_store(project: Path, command: tuple[str, ...], code_puppy_home: Path) -> None:
    completed = run_cli(*command, cwd=project)
    assert completed.returncode == 0
    assert str(code_puppy_home / "sessions.db") in completed.stdout
    assert not (code_puppy_home / "sessions.db").exists()
