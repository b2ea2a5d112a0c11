"""`--permission-mode auto` end to end (issue 12): headless runs against the fake server where the model's shell
commands run in the real bwrap sandbox; the same commands in `yolo` run unconfined. No skips."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage, ToolCallPart
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

from code_puppy.config import Settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent, capability
from code_puppy.run.deps import RunDeps
from code_puppy.sandbox.sandboxed_shell import SandboxedShell, _sandbox_failure  # pyright: ignore[reportPrivateUsage]
from code_puppy.sessions.session import Session
from tests.conftest import run_cli, wait_for
from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.scripted_model import Reply, scripted, tool_returns
from tests.test_mcp import tool_results

CANARY = "sk-auto-mode-canary"

PYTHON = os.path.realpath(sys.executable)
"""The interpreter itself: a virtual environment under /tmp is hidden in the sandbox (its /tmp is its own)."""


@pytest.fixture
def place(outside: Path) -> Path:
    """A folder outside /tmp (the sandbox's /tmp is its own) holding the project, a home, and room to escape to."""
    (outside / "project").mkdir()
    subprocess.run(["git", "init", "-q", str(outside / "project")], check=True)
    (outside / "home").mkdir()
    return outside


def commands(server: FakeLLMServer) -> list[str]:
    """The commands the model runs, one shell call each."""
    port = server.server_port
    script = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('connected')"
    connect = f'{PYTHON} -c "{script}"'
    return [
        "touch inside.txt && echo created",
        "touch ../outside.txt && echo escaped",
        'touch "$HOME/at-home.txt" && echo escaped',
        connect,
        "env",
        "echo '[permissions]' >> .code-puppy/config.toml && echo loosened",
    ]


def run(server: FakeLLMServer, place: Path, mode: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    project = place / "project"
    (project / ".code-puppy").mkdir(exist_ok=True)
    (project / ".code-puppy" / "config.toml").write_text('model = "fake"\n')
    server.script(tool_calls(*(call("shell", {"command": command}) for command in commands(server))), text("done"))
    env = {"HOME": str(place / "home"), "OPENAI_API_KEY": CANARY}
    completed = run_cli("-p", "try everything", "--permission-mode", mode, cwd=project, env=env)
    return completed, tool_results(server.requests[1].body)


def test_auto_runs_every_command_without_asking_but_confined(server: FakeLLMServer, place: Path) -> None:
    completed, (inside, outside, home, network, env, config) = run(server, place, "auto")
    assert (completed.returncode, completed.stdout) == (0, "done\n"), completed.stderr
    assert "Exception ignored" not in completed.stderr, completed.stderr  # nothing fails at exit
    assert "created" in inside and (place / "project" / "inside.txt").exists()
    assert "Read-only file system" in outside and not (place / "outside.txt").exists()
    assert "Read-only file system" in home and not (place / "home" / "at-home.txt").exists()
    assert "ConnectionRefusedError" in network or "Network is unreachable" in network, network
    assert "connected" not in network
    assert CANARY not in env and f"HOME={place / 'home'}" in env
    assert "Read-only file system" in config
    assert (place / "project" / ".code-puppy" / "config.toml").read_text() == 'model = "fake"\n'
    instructions = " ".join(str(m["content"]) for m in server.requests[0].body["messages"] if m["role"] == "system")
    assert "Permission mode: auto" in instructions and "There is no network" in instructions


def test_yolo_runs_the_same_commands_unconfined(server: FakeLLMServer, place: Path) -> None:
    completed, (inside, outside, home, network, env, config) = run(server, place, "yolo")
    assert completed.returncode == 0, completed.stderr
    assert "created" in inside
    assert "escaped" in outside and (place / "outside.txt").exists()
    assert "escaped" in home and (place / "home" / "at-home.txt").exists()
    assert "connected" in network
    assert CANARY not in env  # secrets are stripped in every mode
    assert "loosened" in config


def test_nothing_a_command_started_outlives_the_run(server: FakeLLMServer, place: Path) -> None:
    tag = f"{os.getpid() % 1000 + 1000}.417"  # a sleep no other process runs
    for mode in ("auto", "yolo"):
        server.script(
            tool_calls(
                call("shell", {"command": f"sleep {tag}", "mode": "background"}),
                call("shell", {"command": f"sleep {tag} & echo started"}),
            ),
            text("done"),
        )
        completed = run_cli("-p", "start things", "--permission-mode", mode, cwd=place / "project")
        assert completed.returncode == 0, completed.stderr
        results = tool_results(server.requests[-1].body)
        assert "PID:" in results[0] and "started" in results[1], results
        assert sleeping(tag) == [], mode


def sleeping(tag: str) -> list[int]:
    """Processes running `sleep TAG`."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", tag.encode()]:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_auto_without_a_sandbox_is_refused_in_one_line(
    server: FakeLLMServer, code_puppy_home: Path, place: Path
) -> None:
    with (code_puppy_home / "config.toml").open("a") as config:
        config.write('[sandbox]\nmechanism = "bwrap"\nbwrap = "/nonexistent/bwrap"\n')
    completed = run_cli("-p", "hi", "--permission-mode", "auto", cwd=place / "project")
    assert completed.returncode == 2
    assert completed.stderr == (
        "code-puppy: error: permission mode auto needs the sandbox, and no bwrap program at /nonexistent/bwrap "
        "([sandbox] bwrap); use another mode (accept-edits, ask), or see `code-puppy sandbox check`\n"
    )
    assert server.requests == []
    server.script(text("fine"))
    other = run_cli("-p", "hi", "--permission-mode", "accept-edits", cwd=place / "project")
    assert (other.returncode, other.stdout) == (0, "fine\n"), other.stderr  # other modes keep working


def test_a_delegated_run_gets_the_same_sandbox(server: FakeLLMServer, place: Path) -> None:
    server.script(
        tool_calls(call("delegate_task", {"agent_name": "self", "task": "escape"})),
        tool_calls(call("shell", {"command": "touch ../from-delegate.txt"})),  # the delegate's first request
        text("the delegate tried"),
        text("done"),
    )
    completed = run_cli("-p", "delegate it", "--permission-mode", "auto", cwd=place / "project")
    assert (completed.returncode, completed.stdout) == (0, "done\n"), completed.stderr
    (result,) = tool_results(server.requests[2].body)
    assert "Read-only file system" in result and not (place / "from-delegate.txt").exists()


def test_headless_never_leaves_the_sandbox_even_when_the_model_asks(server: FakeLLMServer, place: Path) -> None:
    server.script(
        tool_calls(call("shell", {"command": "touch ../asked.txt", "unsandboxed": True, "reason": "it must"})),
        text("done"),
    )
    completed = run_cli("-p", "escape politely", "--permission-mode", "auto", cwd=place / "project")
    assert (completed.returncode, completed.stdout) == (0, "done\n"), completed.stderr
    (result,) = tool_results(server.requests[1].body)
    assert "Read-only file system" in result and not (place / "asked.txt").exists()
    assert result.endswith("[This command ran inside the sandbox: nobody can let it run outside in this run.]")
    instructions = " ".join(str(m["content"]) for m in server.requests[0].body["messages"] if m["role"] == "system")
    assert "Nobody can let a command run outside the sandbox in this run." in instructions


def test_sandbox_modes_confine_allow_listed_commands_in_accept_edits_but_not_unsandboxed_entries(
    server: FakeLLMServer, code_puppy_home: Path, place: Path
) -> None:
    config = code_puppy_home / "config.toml"
    original = config.read_text()
    config.write_text(
        original
        + '[permissions]\nallow = ["touch ../confined.txt", { command = "touch ../free.txt", sandbox = false }]\n'
        + '[sandbox]\nmodes = ["accept-edits"]\n'
    )
    server.script(
        tool_calls(*(call("shell", {"command": f"touch ../{name}.txt"}) for name in ("confined", "free"))),
        text("done"),
    )
    completed = run_cli("-p", "touch both", "--permission-mode", "accept-edits", cwd=place / "project")
    assert (completed.returncode, completed.stdout) == (0, "done\n"), completed.stderr
    confined, free = tool_results(server.requests[1].body)
    assert "Read-only file system" in confined and not (place / "confined.txt").exists()
    assert (place / "free.txt").exists(), free
    # Without [sandbox] modes, accept-edits runs its allow-listed commands as the user, as before.
    config.write_text(original + '[permissions]\nallow = ["touch ../confined.txt"]\n')
    server.script(tool_calls(call("shell", {"command": "touch ../confined.txt"})), text("done"))
    completed = run_cli("-p", "touch it", "--permission-mode", "accept-edits", cwd=place / "project")
    assert completed.returncode == 0 and (place / "confined.txt").exists(), completed.stderr


def test_a_mode_that_asks_for_the_sandbox_without_one_is_refused(
    server: FakeLLMServer, code_puppy_home: Path, place: Path
) -> None:
    config = code_puppy_home / "config.toml"
    original = config.read_text()
    config.write_text(original + '[sandbox]\nmechanism = "bwrap"\nbwrap = "/nonexistent/bwrap"\nmodes = ["ask"]\n')
    completed = run_cli("-p", "hi", cwd=place / "project")
    assert completed.returncode == 2
    assert completed.stderr == (
        "code-puppy: error: permission mode ask needs the sandbox, and no bwrap program at /nonexistent/bwrap "
        "([sandbox] bwrap); drop ask from [sandbox] modes, or see `code-puppy sandbox check`\n"
    )
    assert server.requests == []
    config.write_text(original + '[sandbox]\nmodes = ["yolo"]\n')
    completed = run_cli("-p", "hi", cwd=place / "project")
    assert completed.returncode == 2  # yolo never sandboxes
    assert completed.stderr.endswith(
        "config.toml: 'sandbox.modes.0': input should be 'auto', 'accept-edits' or 'ask', got 'yolo'\n"
    )


async def test_the_model_can_stop_a_background_command_it_started(project: Path, outside: Path) -> None:
    tag = f"{os.getpid() % 1000 + 2000}.417"
    pwned = outside / "pwned"

    def stop_it(messages: list[ModelMessage], info: AgentInfo) -> Reply:
        (started,) = [content for _, _, content in tool_returns(messages)]
        pid = re.search(r"PID: (\d+)", started)
        assert pid is not None, started
        wait_for(lambda: sleeping(tag) != [], timeout=15, what="the background sleep to start")
        # Anything more than `kill [SIGNAL] [--] PIDS` of its own commands runs in the sandbox like any command.
        hostile = [f'kill -s "$(touch {pwned}; echo TERM)" -- -{pid[1]}', f"kill -- -{pid[1]}; touch {pwned}"]
        hostile += [f"kill -NOSUCH -- -{pid[1]}", f"kill -99 -- -{pid[1]}"]  # no such signal: the shell says so
        return [
            *(ToolCallPart("shell", {"command": command}, tool_call_id=f"h{i}") for i, command in enumerate(hostile)),
            ToolCallPart("shell", {"command": f"kill -- -{pid[1]}"}, tool_call_id="k"),  # as the harness says
        ]

    def own_and_other(messages: list[ModelMessage], info: AgentInfo) -> Reply:
        """A kill naming one of its own commands and another process: not all its own, so it runs in the sandbox."""
        pid = re.search(r"PID: (\d+)", next(content for _, _, content in tool_returns(messages)))
        assert pid is not None
        return [ToolCallPart("shell", {"command": f"kill -9 {pid[1]} {bystander.pid}"}, tool_call_id="both")]

    bystander = subprocess.Popen(["sleep", "60"])  # not the model's: its kill stays in the sandbox, and fails
    try:
        for mechanism in ("bwrap", "landlock"):
            settings = Settings.model_validate({"sandbox": {"mechanism": mechanism}})
            script = scripted(
                [ToolCallPart("shell", {"command": f"sleep {tag}", "mode": "background"}, tool_call_id="s")],
                stop_it,
                [ToolCallPart("shell", {"command": f"kill -9 {bystander.pid}"}, tool_call_id="other")],
                own_and_other,
                "stopped",
            )
            agent = build_pydantic_agent(
                settings, AgentOptions(model=script.model, project_root=project, permission_mode="auto")
            )
            session = Session.in_memory()
            shell = capability(agent, SandboxedShell)
            assert shell is not None
            try:
                await agent.run("start and stop", deps=RunDeps(session))
                # Stopped by the model (the sandbox goes with its bwrap), before the process ends its commands.
                wait_for(lambda: sleeping(tag) == [], timeout=15, what=f"the background sleep to stop ({mechanism})")
            finally:
                shell.end_commands()
            *hostile, stopped, other, both = [content for _, _, content in tool_returns(session.messages)][1:]
            assert stopped.startswith("Sent SIGTERM to -"), stopped
            assert not pwned.exists() and all("Sent" not in result for result in hostile), hostile
            assert not other.endswith('"exit_code": 0}') and bystander.poll() is None, other
            assert not both.startswith("Sent") and not both.endswith('"exit_code": 0}'), both
            assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


async def approve_all(ctx: RunContext[Any], requests: DeferredToolRequests, token: str) -> DeferredToolResults:
    """An interactive run whose user says yes to every question."""
    return requests.build_results(approvals={call.tool_call_id: True for call in requests.approvals})


async def test_ask_mode_with_the_sandbox_asks_once_per_command(project: Path, outside: Path) -> None:
    """`[sandbox] modes = ["ask"]`: the approved command runs inside (and failing there asks nothing more, since an
    approved call cannot wait for approval again); one the model asked to run outside runs outside on the same yes,
    the question having shown that."""
    settings = Settings.model_validate({"sandbox": {"modes": ["ask"]}})
    script = scripted(
        [ToolCallPart("shell", {"command": f"touch {outside}/inside-the-sandbox"}, tool_call_id="a")],
        [
            ToolCallPart(
                "shell",
                {"command": f"touch {outside}/outside", "unsandboxed": True, "reason": "the test"},
                tool_call_id="b",
            )
        ],
        "done",
    )
    agent = build_pydantic_agent(
        settings, AgentOptions(model=script.model, project_root=project, permission_mode="ask")
    )
    session = Session.in_memory()
    result = await agent.run("touch", deps=RunDeps(session, ask=approve_all))
    assert result.output == "done"
    first, second = [content for _, _, content in tool_returns(session.messages)]
    assert "Read-only file system" in first and not (outside / "inside-the-sandbox").exists()
    assert (outside / "outside").exists(), second


def test_only_a_finished_command_that_failed_the_sandboxs_way_offers_to_run_outside() -> None:
    """What a `shell` result must say before the user is asked to run the command again outside the sandbox."""
    trailer = "PID: 7 (supervisor/session leader; use `kill -- -7` to stop it)\nOutput: o\nStatus: s"
    denied = "touch: cannot touch '/etc/x': Read-only file system\n"
    assert _sandbox_failure(f'{denied}{trailer}\n{{"exit_code": 1}}')
    assert not _sandbox_failure(f'{denied}{trailer}\n{{"exit_code": 0}}')  # it failed nothing
    assert not _sandbox_failure(f'make: *** [all] Error 2\n{trailer}\n{{"exit_code": 2}}')  # not the sandbox's doing
    assert not _sandbox_failure(f"{denied}{trailer}")  # not finished: no status yet
    assert not _sandbox_failure(f"{denied}{trailer}\n[1]")  # a status that is no object
    assert not _sandbox_failure(f'{denied}{trailer}\n{{"exit_code": "1"}}')
