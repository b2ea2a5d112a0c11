"""What the fleet's tests share (tests/test_fleet*.py): a git repository, worker processes started through the installed
console script (on the test's `CODE_PUPPY_HOME`, or each on a home of its own: another "machine"), and the commands
that queue runs and read them back, each a subprocess of the console script."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CODE_PUPPY, run_cli
from tests.fake_llm import FakeLLMServer, call, text, tool_calls


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A git repository with one commit."""
    root = tmp_path / "repository"
    root.mkdir()
    (root / "README.md").write_text("# demo\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "start")
    return root


@pytest.fixture
def fleet_server(server: FakeLLMServer, code_puppy_home: Path) -> FakeLLMServer:
    """Every conversation: one shell call writing `change.txt`, then a text answer. A priced model `gpt` beside."""
    server.per_conversation = True
    server.script(tool_calls(call("shell", {"command": "echo done > change.txt"})), text("changed"))
    with (code_puppy_home / "config.toml").open("a") as config:
        config.write(f'[models.gpt]\nname = "gpt-4o"\nbase_url = "{server.base_url}"\n')
    return server


def worker_name(process: subprocess.Popen[str]) -> str:
    """The name a worker process goes by (`runs show`'s `worker`): its host and pid."""
    return f"{os.uname().nodename}:{process.pid}"


class Workers:
    """`code-puppy worker` processes, each in a process group of its own (killed with it at the end if still there),
    started in `cwd`: on the test's `CODE_PUPPY_HOME`, or, given a `home` name, on a home of their own under
    `cwd/machines` holding a copy of the test's config (another "machine" on the same store)."""

    def __init__(self, cwd: Path, config: Path) -> None:
        self.cwd, self.config = cwd, config
        self.processes: list[subprocess.Popen[str]] = []

    def start(self, *args: str, home: str | None = None) -> subprocess.Popen[str]:
        environment = dict(os.environ)
        if home is not None:
            path = self.cwd / "machines" / home
            path.mkdir(parents=True)
            shutil.copy(self.config, path / "config.toml")
            environment["CODE_PUPPY_HOME"] = str(path)
        process = subprocess.Popen(
            [str(CODE_PUPPY), "worker", *args],
            cwd=self.cwd,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def ready(self, process: subprocess.Popen[str]) -> str:
        """The worker's first line on stderr, said once it launched DBOS and beat (empty if it died first)."""
        assert process.stderr is not None
        return process.stderr.readline()

    def drain(self, process: subprocess.Popen[str]) -> tuple[int, str]:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
        return process.returncode, stderr

    def kill(self, process: subprocess.Popen[str]) -> str:
        """kill -9 of the worker's process group (the worker and its runs, as a machine that goes down): its stderr."""
        os.killpg(process.pid, signal.SIGKILL)
        return process.communicate(timeout=10)[1]

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate(timeout=10)


@pytest.fixture
def workers(tmp_path: Path, code_puppy_home: Path) -> Iterator[Workers]:
    started = Workers(tmp_path, code_puppy_home / "config.toml")
    yield started
    started.close()


def queue(*args: str, cwd: Path, input: str | None = None) -> str:
    """`queue add`: the run id it printed last."""
    added = run_cli("queue", "add", *args, cwd=cwd, input=input)
    assert added.returncode == 0, added.stderr
    return added.stdout.splitlines()[-1]


def runs(cwd: Path, *, pause: float = 0.0) -> dict[str, dict[str, Any]]:
    """`runs list --json` by run id; `pause` first (a poll: each is a process, which the workers' 2 cores also run)."""
    time.sleep(pause)
    listed = run_cli("runs", "list", "--json", cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    return {entry["id"]: entry for entry in json.loads(listed.stdout)}


def shown(run_id: str, cwd: Path) -> dict[str, Any]:
    found = run_cli("runs", "show", run_id, "--json", cwd=cwd)
    assert found.returncode == 0, found.stderr
    return json.loads(found.stdout)


def first_prompts(server: FakeLLMServer) -> Counter[str]:
    """The prompt of every first request of a conversation (nothing answered yet), counted."""
    counted: Counter[str] = Counter()
    for request in server.requests:
        messages = request.body["messages"]
        if not any(message["role"] == "assistant" for message in messages):
            counted[next(m["content"] for m in messages if m["role"] == "user")] += 1
    return counted
