"""The continuation loop shared by every front end: follow-up runs, their bound, the request budget, custody."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic_ai.agent import AgentRunResult
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from code_puppy.config import Settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent
from code_puppy.core.turn import TurnLimits, run_turn
from code_puppy.headless.sinks import StreamJsonSink, TextSink
from code_puppy.run.deps import RunDeps
from code_puppy.sessions.session import Session
from tests.scripted_model import scripted, tool_returns


def prompts_of(session: Session) -> list[str]:
    return [
        str(part.content)
        for message in session.messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


async def test_follow_ups_run_in_the_same_session_until_none(project: Path) -> None:
    session = Session.in_memory()
    script = scripted("first", "second", "third")
    agent = build_pydantic_agent(Settings(), AgentOptions(model=script.model, project_root=project))
    asked: list[str] = []

    async def follow_up(result: AgentRunResult[str]) -> str | None:
        asked.append(result.output)
        return {"first": "again", "second": "once more"}.get(result.output)

    outcome = await run_turn(
        agent, RunDeps(session), "start", TextSink(io.StringIO(), io.StringIO()), follow_up=follow_up
    )
    assert (outcome.error, outcome.runs, outcome.result and outcome.result.output) == (None, 3, "third")
    assert asked == ["first", "second", "third"]
    assert prompts_of(session) == ["start", "again", "once more"]
    assert outcome.usage.requests == 3


async def test_continuations_are_bounded(project: Path) -> None:
    session = Session.in_memory()
    script = scripted(*["answer"] * 5)
    agent = build_pydantic_agent(Settings(), AgentOptions(model=script.model, project_root=project))

    async def forever(result: AgentRunResult[str]) -> str | None:
        return "keep going"

    sink = TextSink(io.StringIO(), io.StringIO())
    outcome = await run_turn(
        agent, RunDeps(session), "go", sink, follow_up=forever, limits=TurnLimits(max_continuations=2)
    )
    assert (outcome.error, outcome.runs, len(script.seen)) == (None, 3, 3)
    assert prompts_of(session) == ["go", "keep going", "keep going"]
    assert outcome.unrun_follow_up == "keep going"


async def test_max_requests_bounds_the_whole_turn(project: Path) -> None:
    session = Session.in_memory()
    script = scripted([ToolCallPart("read_file", {"path": "README.md"}, tool_call_id="r")], "done", "never")
    agent = build_pydantic_agent(Settings(), AgentOptions(model=script.model, project_root=project))

    async def more(result: AgentRunResult[str]) -> str | None:
        return "follow-up"

    outcome = await run_turn(
        agent,
        RunDeps(session),
        "go",
        TextSink(io.StringIO(), io.StringIO()),
        limits=TurnLimits(max_requests=2),
        follow_up=more,
    )
    assert isinstance(outcome.error, UsageLimitExceeded)
    assert (outcome.usage.requests, len(script.seen)) == (2, 2)
    assert prompts_of(session) == ["go"]


async def test_stream_events_carry_the_run_index(project: Path) -> None:
    session = Session.in_memory()
    script = scripted("one", "two")
    agent = build_pydantic_agent(Settings(), AgentOptions(model=script.model, project_root=project))
    out = io.StringIO()

    async def once(result: AgentRunResult[str]) -> str | None:
        return "next" if result.output == "one" else None

    await run_turn(agent, RunDeps(session), "go", StreamJsonSink(out), follow_up=once)
    deltas = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(d["run"], d["text"]) for d in deltas if d["type"] == "text_delta"] == [(0, "one"), (1, "two")]


async def test_a_cancelled_turn_is_checkpointed_and_returned(project: Path) -> None:
    session = Session.in_memory()
    waiting = asyncio.Event()

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        if len(messages) == 1:
            yield {0: DeltaToolCall(name="read_file", json_args='{"path": "README.md"}', tool_call_id="r")}
            return
        waiting.set()
        await asyncio.Event().wait()  # the provider never answers the second request
        yield "unreachable"

    agent = build_pydantic_agent(
        Settings(), AgentOptions(model=FunctionModel(stream_function=stream), project_root=project)
    )
    task = asyncio.create_task(run_turn(agent, RunDeps(session), "slow", TextSink(io.StringIO(), io.StringIO())))
    await waiting.wait()
    task.cancel()
    outcome = await task
    assert isinstance(outcome.error, asyncio.CancelledError)
    assert prompts_of(session) == ["slow"]
    assert [(name, outcome) for name, outcome, _ in tool_returns(session.messages)] == [("read_file", "success")]
