"""The `shell` tool's output directories: a finished command's goes when its run ends (success, failure,
cancellation), a running command's when the process exits; end to end through the console script."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from code_puppy.config import Settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent
from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, call, text, tool_calls


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private temp dir for this process's `tempfile`, where the harness makes its directories."""
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    return private


def shell_directories(temp: Path) -> list[str]:
    return sorted(path.name for path in temp.glob("harness-shell-*"))


def supervisors(results: list[str]) -> Iterator[int]:
    """The supervisor PIDs named in `shell` tool results."""
    for result in results:
        if match := re.search(r"^PID: (\d+) \(supervisor", result, re.MULTILINE):
            yield int(match.group(1))


def stop(pids: Iterator[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def shell_results(messages: list[ModelMessage]) -> list[str]:
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart) and part.tool_name == "shell"
    ]


def shell_call(index: int, command: str, mode: str = "foreground") -> DeltaToolCall:
    arguments = json.dumps({"command": command, "mode": mode})
    return DeltaToolCall(name="shell", json_args=arguments, tool_call_id=f"s{index}")


async def test_a_finished_commands_directory_goes_at_run_end_a_running_ones_stays(
    project: Path, temp_dir: Path
) -> None:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        if len(messages) == 1:
            yield {0: shell_call(0, "echo done"), 1: shell_call(1, "sleep 30", mode="background")}
        else:
            yield "ok"

    agent = build_pydantic_agent(
        Settings(),
        AgentOptions(model=FunctionModel(stream_function=stream), project_root=project, permission_mode="yolo"),
    )
    result = await agent.run("run them")
    finished, running = shell_results(result.all_messages())
    try:
        assert finished.startswith("done\n")
        running_directory = re.search(r"^Output: (.*)/output\.log$", running, re.MULTILINE)
        assert running_directory is not None
        assert shell_directories(temp_dir) == [Path(running_directory.group(1)).name]
    finally:
        stop(supervisors([running]))


@pytest.mark.parametrize("ending", ["failure", "cancellation"])
async def test_a_run_that_does_not_succeed_removes_its_directories_too(
    project: Path, temp_dir: Path, ending: str
) -> None:
    second_request = asyncio.Event()

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        if len(messages) == 1:
            yield {0: shell_call(0, "echo one"), 1: shell_call(1, "echo two")}
            return
        second_request.set()
        if ending == "failure":
            raise RuntimeError("the provider went away")
        await asyncio.Event().wait()
        yield "never"

    agent = build_pydantic_agent(
        Settings(),
        AgentOptions(model=FunctionModel(stream_function=stream), project_root=project, permission_mode="yolo"),
    )
    run = asyncio.create_task(agent.run("run them"))
    await second_request.wait()
    assert len(shell_directories(temp_dir)) == 2
    if ending == "cancellation":
        run.cancel()
    with pytest.raises(asyncio.CancelledError if ending == "cancellation" else RuntimeError):
        await run
    assert shell_directories(temp_dir) == []


def test_a_headless_run_leaves_no_shell_output_directories(
    server: FakeLLMServer, project: Path, tmp_path: Path
) -> None:
    private = tmp_path / "private-tmp"
    private.mkdir()
    server.script(
        tool_calls(call("shell", {"command": "echo one"})),
        tool_calls(
            call("shell", {"command": "echo two"}),
            call("shell", {"command": "sleep 30", "mode": "background"}),
        ),
        text("done"),
    )
    completed = run_cli("-p", "run things", "--permission-mode", "yolo", cwd=project, env={"TMPDIR": str(private)})
    results = [m["content"] for r in server.requests for m in r.body["messages"] if m["role"] == "tool"][-3:]
    try:
        assert (completed.returncode, completed.stdout) == (0, "done\n"), completed.stderr
        assert [result.splitlines()[0] for result in results[:2]] == ["one", "two"]
        assert str(private) in results[2]  # the check below looks where the harness wrote
        assert shell_directories(private) == []
    finally:
        stop(supervisors(results))
