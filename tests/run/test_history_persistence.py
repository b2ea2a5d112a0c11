"""History custody: HistoryPersistence (after_run), persist_result_history, checkpoints; real agents and SQLite."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RunUsage

from code_puppy.config import Settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent, capability
from code_puppy.run.deps import RunDeps
from code_puppy.run.history_persistence import HistoryPersistence, persist_checkpoint, persist_result_history
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore
from tests.conftest import stored_info
from tests.scripted_model import scripted, tool_returns

PACKAGE = Path(__file__).resolve().parents[2] / "code_puppy"


class RecordingHistory:
    """A durable history that records every write, for the seam tests; it keeps no journal."""

    journal = None
    cache_epoch = 0
    history_version = 0

    def __init__(self) -> None:
        self.writes: list[list[ModelMessage]] = []

    @property
    def messages(self) -> list[ModelMessage]:
        return list(self.writes[-1]) if self.writes else []

    async def set_message_history(
        self, messages: Sequence[ModelMessage], *, run_id: str | None = None, run_usage: RunUsage | None = None
    ) -> None:
        self.writes.append(list(messages))


def texts(message: ModelMessage) -> list[str]:
    return [str(getattr(part, "content", "")) for part in message.parts]


class SpyPersistence(HistoryPersistence):
    """Records the result object each `after_run` receives."""

    def __init__(self) -> None:
        self.seen: list[object] = []

    async def after_run(self, ctx: RunContext[Any], *, result: AgentRunResult[Any]) -> AgentRunResult[Any]:
        self.seen.append(result)
        return await super().after_run(ctx, result=result)


async def test_after_run_gets_the_identical_result_the_caller_gets() -> None:
    history = RecordingHistory()
    persistence = SpyPersistence()
    agent = Agent(TestModel(custom_output_text="hi"), deps_type=RunDeps, capabilities=[persistence])
    result = await agent.run("hello", deps=RunDeps(history))  # type: ignore[arg-type]
    assert persistence.seen == [result] and persistence.seen[0] is result
    assert history.writes == [result.all_messages()]
    async with agent.iter("again", message_history=result.all_messages(), deps=RunDeps(history)) as run:  # type: ignore[arg-type]
        async for _ in run:
            pass
    assert persistence.seen[1] is run.result


async def test_after_run_passes_the_result_through_unchanged() -> None:
    history = RecordingHistory()
    agent = Agent(TestModel(custom_output_text="out"), deps_type=RunDeps, capabilities=[HistoryPersistence()])
    result = await agent.run("x", deps=RunDeps(history))  # type: ignore[arg-type]
    assert result.output == "out"
    assert HistoryPersistence.get_serialization_name() is None


async def test_a_failed_run_writes_nothing_through_after_run() -> None:
    history = RecordingHistory()

    def boom(messages: list[ModelMessage], info: object) -> ModelResponse:
        raise RuntimeError("provider down")

    from pydantic_ai.models.function import FunctionModel

    with pytest.raises(RuntimeError):
        agent = Agent(FunctionModel(boom), deps_type=RunDeps, capabilities=[HistoryPersistence()])
        await agent.run("x", deps=RunDeps(history))  # type: ignore[arg-type]
    assert history.writes == []


async def test_persist_result_history_overwrites_a_change_made_after_after_run() -> None:
    """The seed's review: an agent_run_end observer's history change is clobbered by the turn-end write."""
    history = RecordingHistory()
    agent = Agent(TestModel(custom_output_text="a"), deps_type=RunDeps, capabilities=[HistoryPersistence()])
    result = await agent.run("q", deps=RunDeps(history))  # type: ignore[arg-type]
    observer_edit = [ModelRequest(parts=[UserPromptPart("injected by a plugin")])]
    await history.set_message_history(observer_edit)
    await persist_result_history(history, result)
    assert history.messages == result.all_messages()
    await persist_result_history(history, result)  # idempotent: the same write again
    assert history.writes[-1] == history.writes[-2] == result.all_messages()


async def test_persist_result_history_with_a_message_less_result() -> None:
    from pydantic_ai.agent import AgentRunResult

    history = RecordingHistory()
    await persist_result_history(history, AgentRunResult(output="nothing"))
    assert history.writes == [[]]


async def test_real_run_with_a_tool_cycle_lands_in_sqlite(project: Path, store: SqliteConversationStore) -> None:
    session = await Session.start(store, project, model="test")
    script = scripted([ToolCallPart("read_file", {"path": "README.md"}, tool_call_id="r1")], "It is a demo.")
    agent = build_pydantic_agent(Settings(), AgentOptions(model=script.model, project_root=project))
    result = await agent.run("what is it?", deps=RunDeps(session))
    loaded = await store.load(session.id)
    assert loaded is not None and loaded.messages == result.all_messages()
    assert [name for name, _, _ in tool_returns(loaded.messages)] == ["read_file"]
    info = stored_info(store, session.id)
    assert info is not None
    assert (info.title, info.message_count, info.requests) == ("what is it?", 4, 2)


async def test_follow_up_run_is_seeded_with_exactly_the_persisted_history(
    project: Path, store: SqliteConversationStore
) -> None:
    session = await Session.start(store, project, model="test")
    script = scripted("first answer", "second answer")
    agent = build_pydantic_agent(Settings(), AgentOptions(model=script.model, project_root=project))
    first = await agent.run("one", deps=RunDeps(session))
    await persist_result_history(session, first)
    resumed = await Session.resume(store, store.sessions.find(session.id)[0], model="test")
    second = await agent.run("two", message_history=resumed.messages, deps=RunDeps(resumed))
    assert script.seen[1][:-1] == first.all_messages()
    assert second.all_messages()[: len(first.all_messages())] == first.all_messages()


async def test_build_pydantic_agent_carries_history_persistence(project: Path) -> None:
    session = Session.in_memory()
    agent = build_pydantic_agent(Settings(), AgentOptions(model=TestModel(call_tools=[]), project_root=project))
    assert capability(agent, HistoryPersistence) is not None
    result = await agent.run("hi", deps=RunDeps(session))  # no write-back call: the capability alone persists it
    assert session.messages == result.all_messages()


async def test_delegated_sub_agent_runs_never_write_the_main_history(project: Path) -> None:
    writes = RecordingHistory()
    delegate = ToolCallPart("delegate_task", {"agent_name": "self", "task": "count files"}, tool_call_id="d1")
    script = scripted([delegate], "sub-agent says 3", "main answer")
    agent = build_pydantic_agent(Settings(), AgentOptions(model=script.model, project_root=project))
    result = await agent.run("delegate something", deps=RunDeps(writes))  # type: ignore[arg-type]
    assert len(script.seen) == 3  # main request, the delegate's own request, main final request
    assert writes.writes == [result.all_messages()]
    assert result.output == "main answer"


# Not runs, so no response to persist: an import writes a transcript's messages as a session's history, and the
# transcript reader fills in the messages of a file it parsed.
NOT_RUNS = {"sessions/importing.py", "sessions/transcripts.py"}


def test_no_other_module_writes_history_directly() -> None:
    """Only history_persistence.py calls set_message_history; only Session assigns conversation messages (imports,
    which are not runs, aside)."""
    offenders: list[str] = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in NOT_RUNS:
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "set_message_history"
                and relative != "run/history_persistence.py"
            ):
                offenders.append(f"{relative}:{node.lineno} calls set_message_history")
            if isinstance(node, ast.Assign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and target.attr == "messages"
                        and relative != "sessions/session.py"
                    ):
                        offenders.append(f"{relative}:{node.lineno} assigns .messages")
    assert offenders == []


async def test_checkpoint_keeps_the_prompt_and_repairs_dangling_calls(
    project: Path, store: SqliteConversationStore
) -> None:
    session = await Session.start(store, project, model="test")
    completed: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("run the slow thing")]),
        ModelResponse(parts=[TextPart("on it"), ToolCallPart("shell", {"command": "sleep 60"}, tool_call_id="s1")]),
    ]
    await persist_checkpoint(session, completed, prompt="run the slow thing", run_id="r", usage=RunUsage(requests=1))
    loaded = await store.load(session.id)
    assert loaded is not None
    assert loaded.messages[:2] == completed
    assert tool_returns(loaded.messages) == [
        ("shell", "interrupted", "The tool call was interrupted before a result was produced.")
    ]
    assert stored_info(store, session.id).requests == 1  # type: ignore[union-attr]


async def test_checkpoint_of_a_run_that_recorded_nothing_keeps_the_prompt(
    project: Path, store: SqliteConversationStore
) -> None:
    session = await Session.start(store, project, model="test")
    await persist_checkpoint(session, [], prompt="lost before the first request?", run_id=None, usage=RunUsage())
    loaded = await store.load(session.id)
    assert loaded is not None
    assert [texts(m) for m in loaded.messages] == [["lost before the first request?"]]


async def test_run_usage_counts_once_however_often_it_is_written(project: Path, store: SqliteConversationStore) -> None:
    session = await Session.start(store, project, model="test")
    agent = build_pydantic_agent(Settings(), AgentOptions(model=TestModel(call_tools=[]), project_root=project))
    result = await agent.run("hi", deps=RunDeps(session))
    await persist_result_history(session, result)
    await persist_result_history(session, result)
    assert session.usage.requests == result.usage.requests == 1
    assert stored_info(store, session.id).requests == 1  # type: ignore[union-attr]


async def test_a_save_conflict_never_overwrites_the_other_process(
    project: Path, store: SqliteConversationStore
) -> None:
    first = await Session.start(store, project, model="test")
    await first.set_message_history([ModelRequest(parts=[UserPromptPart("shared start")])])
    info = stored_info(store, first.id)
    assert info is not None
    other = await Session.resume(store, info, model="test")
    await first.set_message_history([*first.messages, ModelResponse(parts=[TextPart("first process")])])
    await other.set_message_history([*other.messages, ModelResponse(parts=[TextPart("second process")])])
    assert other.id != first.id
    assert other.notice is not None and "changed by another code-puppy process" in other.notice
    kept = await store.load(first.id)
    moved = await store.load(other.id)
    assert kept is not None and moved is not None
    assert [texts(m) for m in kept.messages] == [["shared start"], ["first process"]]
    assert [texts(m) for m in moved.messages] == [["shared start"], ["second process"]]
