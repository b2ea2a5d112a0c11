"""The Steering capability: text sent to the inbox reaches the running run with pydantic-ai's enqueue."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import (
    AgentStreamEvent,
    EnqueuedMessagesEvent,
    ModelMessage,
    ModelRequest,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from code_puppy.config import Settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent
from code_puppy.core.turn import run_turn, stream_run
from code_puppy.headless.sinks import TextSink
from code_puppy.run.deps import RunDeps
from code_puppy.run.steering import Steering, SteeringInbox, held_steers, steered_text
from code_puppy.sessions.session import Session


def user_texts(messages: list[ModelMessage]) -> list[str]:
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


def steering_into(inbox: SteeringInbox) -> RunDeps:
    """Deps for a run of an in-memory session, steered through `inbox`."""
    return RunDeps(Session.in_memory(), steering=inbox)


class Recorder:
    """An event sink that keeps the steers it saw."""

    def __init__(self) -> None:
        self.steers: list[str] = []

    def run_started(self, index: int) -> None:
        pass

    def event(self, event: AgentStreamEvent) -> None:
        if isinstance(event, EnqueuedMessagesEvent):
            self.steers.append(steered_text(event))


async def test_a_steer_during_a_tool_call_reaches_the_next_request() -> None:
    inbox = SteeringInbox()
    tool_started, release = asyncio.Event(), asyncio.Event()
    seen: list[list[str]] = []

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        seen.append(user_texts(messages))
        if len(seen) == 1:
            yield {0: DeltaToolCall(name="slow", json_args="{}", tool_call_id="c1")}
        else:
            yield "done"

    agent = Agent(FunctionModel(stream_function=stream), deps_type=RunDeps, capabilities=[Steering()])

    @agent.tool_plain
    async def slow() -> str:  # pyright: ignore[reportUnusedFunction]
        tool_started.set()
        await release.wait()
        return "slow result"

    sink = Recorder()
    run = asyncio.create_task(stream_run(agent, "start", sink, deps=steering_into(inbox)))
    await tool_started.wait()
    assert inbox.steer("use approach B") == "enqueued"
    assert inbox.waiting == 1
    release.set()
    result = await run
    assert seen == [["start"], ["start", "use approach B"]]
    assert sink.steers == ["use approach B"]
    assert user_texts(result.all_messages()) == ["start", "use approach B"]
    assert inbox.waiting == 0
    assert inbox.steer("after the run") == "held"  # no run takes text any more


async def test_a_steer_during_the_final_answer_makes_the_run_go_one_more_round() -> None:
    inbox = SteeringInbox()
    writing, steered = asyncio.Event(), asyncio.Event()
    seen: list[list[str]] = []

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        seen.append(user_texts(messages))
        if len(seen) == 1:
            yield "Here is my final "
            writing.set()
            await steered.wait()
            yield "answer."
        else:
            yield "Revised for the steer."

    agent = Agent(FunctionModel(stream_function=stream), deps_type=RunDeps, capabilities=[Steering()])
    run = asyncio.create_task(stream_run(agent, "start", Recorder(), deps=steering_into(inbox)))
    await writing.wait()
    assert inbox.steer("also mention tests") == "enqueued"
    steered.set()
    result = await run
    assert seen == [["start"], ["start", "also mention tests"]]
    assert result.output == "Revised for the steer."
    assert len(result.all_messages()) == 4  # one run: prompt, answer, steer, revised answer


async def test_a_steer_after_the_run_ended_is_held_for_the_owner(project: Path) -> None:
    inbox = SteeringInbox()
    session = Session.in_memory()
    seen: list[list[str]] = []

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        seen.append(user_texts(messages))
        yield f"answer {len(seen)}"

    agent = build_pydantic_agent(
        Settings(), AgentOptions(model=FunctionModel(stream_function=stream), project_root=project)
    )
    sink = TextSink(io.StringIO(), io.StringIO())
    outcome = await run_turn(agent, RunDeps(session, steering=inbox), "first", sink)
    assert outcome.error is None
    assert inbox.steer("too late for the first run") == "held"
    assert inbox.waiting == 1
    announced = Recorder()
    # The next run takes it at its start, and it is saved in the session.
    outcome = await run_turn(
        agent, RunDeps(session, steering=inbox), "second", sink, follow_up=held_steers(inbox, announced.event)
    )
    assert announced.steers == []  # the second run took it at its start, so nothing was left for the follow-up
    assert seen[-1] == ["first", "second", "too late for the first run"]
    assert user_texts(session.messages) == ["first", "second", "too late for the first run"]
    assert inbox.steer("after everything") == "held"
    assert inbox.close() == ["after everything"]
    assert inbox.steer("closed now") == "closed"


async def test_text_held_when_a_run_ends_runs_as_a_follow_up(project: Path) -> None:
    inbox = SteeringInbox()
    session = Session.in_memory()
    seen: list[list[str]] = []

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        seen.append(user_texts(messages))
        if len(seen) == 1:
            # Arrives after this run's last chance to take it: the run ends before the model call returns.
            inbox.unbind(inbox._ctx)  # pyright: ignore[reportPrivateUsage, reportArgumentType]
            inbox.steer("arrived as it ended")
        yield f"answer {len(seen)}"

    agent = build_pydantic_agent(
        Settings(), AgentOptions(model=FunctionModel(stream_function=stream), project_root=project)
    )
    announced = Recorder()
    sink = TextSink(io.StringIO(), io.StringIO())
    outcome = await run_turn(
        agent, RunDeps(session, steering=inbox), "go", sink, follow_up=held_steers(inbox, announced.event)
    )
    assert (outcome.error, outcome.runs) == (None, 2)
    assert announced.steers == ["arrived as it ended"]
    assert user_texts(session.messages) == ["go", "arrived as it ended"]


async def test_steers_a_cancelled_run_never_sent_are_returned() -> None:
    inbox = SteeringInbox()
    started = asyncio.Event()

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        started.set()
        await asyncio.Event().wait()
        yield "never"

    agent = Agent(FunctionModel(stream_function=stream), deps_type=RunDeps, capabilities=[Steering()])
    run = asyncio.create_task(stream_run(agent, "start", Recorder(), deps=steering_into(inbox)))
    await started.wait()
    assert inbox.steer("typed while it hung") == "enqueued"
    run.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await run
    assert inbox.take_undelivered() == ["typed while it hung"]
    assert inbox.steer("after the run") == "held"  # no run takes text any more


async def test_a_nested_run_of_the_same_agent_does_not_take_the_inbox() -> None:
    inbox = SteeringInbox()
    depth: list[bool] = []
    agent: Agent[RunDeps, str]
    deps = steering_into(inbox)

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        if user_texts(messages) == ["outer"] and len(messages) == 1:
            yield {0: DeltaToolCall(name="delegate", json_args="{}", tool_call_id="d")}
        else:
            yield "ok"

    agent = Agent(FunctionModel(stream_function=stream), deps_type=RunDeps, capabilities=[Steering()])

    @agent.tool_plain
    async def delegate() -> str:  # pyright: ignore[reportUnusedFunction]
        outer = inbox._ctx  # pyright: ignore[reportPrivateUsage]
        await agent.run("inner", deps=deps)  # the same deps, as the harness's delegate_task passes them
        depth.append(inbox._ctx is outer)  # pyright: ignore[reportPrivateUsage]
        return "delegated"

    await stream_run(agent, "outer", Recorder(), deps=deps)
    assert depth == [True]
