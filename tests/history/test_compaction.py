"""The built-in compaction: it persists (summarized once, not on every request), composes with user processors
(processors first), keeps tool calls paired; `compact_history` for `/compact`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.profiles import ModelProfile
from pydantic_ai_harness.compaction import SlidingWindowCompaction, SummarizingCompaction, TieredCompaction

from code_puppy.config import HistoryConfig, Settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent
from code_puppy.history import HistoryProcessorContext
from code_puppy.history.compaction import CompactionReport, PersistentCompaction, compact_history, compaction_strategy
from code_puppy.history.groups import SYSTEM_PROMPT, orphan_results, partition, unanswered_calls
from code_puppy.run.deps import RunDeps
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore
from tests.conftest import stored_info
from tests.history.history_cases import C, R, T, U, texts

SUMMARY = "SUMMARY: the user asked about the parser; files were read."


@dataclass
class Model:
    """Plays `steps` for the agent, answers summary requests with `SUMMARY`, records what each request saw."""

    steps: list[list[ToolCallPart] | str]
    context_window: int = 2_000
    seen: list[list[ModelMessage]] = field(default_factory=list[list[ModelMessage]])
    summaries: int = 0

    def _reply(self, messages: list[ModelMessage], info: AgentInfo) -> list[ToolCallPart] | str:
        if info.instructions and "summarization assistant" in info.instructions:
            self.summaries += 1
            return SUMMARY
        self.seen.append(list(messages))
        return self.steps.pop(0)

    def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        reply = self._reply(messages, info)
        return ModelResponse(parts=[TextPart(reply)] if isinstance(reply, str) else list(reply))

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        reply = self._reply(messages, info)
        if isinstance(reply, str):
            yield reply
        else:
            yield {
                i: DeltaToolCall(name=c.tool_name, json_args=json.dumps(c.args), tool_call_id=c.tool_call_id)
                for i, c in enumerate(reply)
            }

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(
            self._respond, stream_function=self._stream, profile=ModelProfile(context_window=self.context_window)
        )


def long_history() -> list[ModelMessage]:
    """Six old tool cycles with big results (~3,000 tokens), then ten short cycles (20 messages)."""
    old: list[ModelMessage] = []
    for i in range(6):
        old += [U(f"old question {i}"), C(f"c{i}"), R(f"c{i}"), T(f"old answer {i}", model_name="fake")]
        old[-2].parts[0].content = "x" * 2_000  # type: ignore[union-attr]
    recent = [m for i in range(10) for m in (U(f"q{i}"), T(f"a{i}", model_name="fake"))]
    return [*old, *recent]


def read(call_id: str) -> list[ToolCallPart]:
    return [ToolCallPart("read_file", {"path": "README.md"}, tool_call_id=call_id)]


def summarized(messages: list[ModelMessage]) -> bool:
    first = messages[0]
    return isinstance(first, ModelRequest) and any(
        isinstance(p, SystemPromptPart) and p.content.endswith(SUMMARY) for p in first.parts
    )


async def test_an_automatic_compaction_persists_and_is_not_repeated(
    project: Path, store: SqliteConversationStore
) -> None:
    session = await Session.start(store, project, model="test")
    await session.set_message_history(long_history())
    old_head = (await store.read_record(session.id)).head_id  # type: ignore[union-attr]
    script = Model([read("r1"), "done", "done again"])
    settings = Settings(history=HistoryConfig(compaction="summarize"))
    agent = build_pydantic_agent(settings, AgentOptions(model=script.model, project_root=project))
    result = await agent.run("new question", message_history=session.messages, deps=RunDeps(session))
    assert script.summaries == 1
    first, second = script.seen
    assert summarized(first) and summarized(second)  # the tool-loop step starts from the compacted history
    assert texts(second[len(first) :]) == ["C:r1", "R:r1"]
    assert texts(first[-20:]) == [*texts(long_history()[-19:]), "U:new question"]  # 20 kept, pairs intact
    stored = session.messages
    assert stored == result.all_messages() and summarized(stored)
    assert orphan_results(stored) == [] and unanswered_calls(stored) == []
    record = await store.read_record(session.id)
    assert record is not None and record.branches == [old_head]
    assert (session.cache_epoch, stored_info(store, session.id).cache_epoch) == (1, 1)  # type: ignore[union-attr]
    await agent.run("and then?", message_history=session.messages, deps=RunDeps(session))
    assert script.summaries == 1
    assert texts(script.seen[2]) == [*texts(stored), "U:and then?"]  # stored as the next run sends it: no 2nd branch
    assert len((await store.read_record(session.id)).branches) == 1  # type: ignore[union-attr]


calls: list[list[str]] = []


def drop_oldest(ctx: HistoryProcessorContext) -> list[ModelMessage]:
    calls.append(texts(ctx.messages))
    eligible = [g for g in ctx.groups if g.eligible]
    if not eligible:
        return list(ctx.messages)
    first = eligible[0]
    return [*ctx.messages[: first.entry_start], *ctx.messages[first.entry_end :]]


async def test_processors_run_before_compaction_and_see_its_result_later(project: Path) -> None:
    calls.clear()
    session = Session.in_memory()
    script = Model([read("r1"), "done"])
    settings = Settings(history=HistoryConfig(compaction="summarize"))
    agent = build_pydantic_agent(
        settings, AgentOptions(model=script.model, project_root=project, history_processors=[drop_oldest])
    )
    history = long_history()
    await agent.run("new question", message_history=history, deps=RunDeps(session))
    # request 1: the processor saw the whole history; compaction summarized what the processor left
    assert calls[0] == texts([*history, U("new question")])
    assert texts(script.seen[0])[:2] == ["system-prompt U:old question 1", "T:a0"]  # (the wire merges requests)
    assert "U:old question 0" not in texts(script.seen[0])
    # request 2: the processor saw the compacted history, the summary in a protected group, and trimmed again
    assert calls[1][:4] == ["system-prompt U:old question 1", "T:a0", "U:q1", "T:a1"]
    summary_group = partition(session.messages)[0]
    assert (summary_group.entry_end, summary_group.protected_reasons) == (2, (SYSTEM_PROMPT,))
    assert texts(script.seen[1])[:4] == ["system-prompt U:old question 1", "T:a0", "U:q2", "T:a2"]
    assert texts(session.messages)[-4:] == ["U:new question", "C:r1", "R:r1", "T:done"]
    assert script.summaries == 1


async def test_compact_history_summarizes_now_and_keeps_tool_pairs(
    project: Path, store: SqliteConversationStore
) -> None:
    session = await Session.start(store, project, model="test")
    history = [U("q1"), C("c1"), R("c1"), T("a1", model_name="m"), U("q2"), C("c2"), R("c2"), T("a2", model_name="m")]
    await session.set_message_history(history)
    old_head = (await store.read_record(session.id)).head_id  # type: ignore[union-attr]
    script = Model([])
    report = await compact_history(session, script.model, focus="the parser")
    assert (report.messages_before, report.messages_after, report.changed, script.summaries) == (8, 4, True, 1)
    assert report.usage.requests == 1
    stored = (await store.load(session.id)).messages  # type: ignore[union-attr]
    assert summarized(stored) and texts(stored) == ["system-prompt U:q2", "C:c2", "R:c2", "T:a2"]
    assert orphan_results(stored) == [] and unanswered_calls(stored) == []
    record = await store.read_record(session.id)
    assert record is not None and record.branches == [old_head]
    info = stored_info(store, session.id)
    assert info is not None and (info.cache_epoch, info.history_version, info.requests) == (1, 1, 1)


async def test_compact_history_sliding_and_nothing_to_do(project: Path) -> None:
    session = Session.in_memory()
    history = [U("q1"), C("c1"), R("c1"), T("a1", model_name="m"), U("q2"), T("a2", model_name="m")]
    await session.set_message_history([*history, U("q3"), T("a3", model_name="m")])
    report = await compact_history(session, Model([]).model, kind="sliding", keep_messages=2)
    assert (report.messages_after, report.changed) == (2, True)
    assert texts(session.messages) == ["U:q3", "T:a3"]
    short = await compact_history(session, Model([]).model, keep_messages=4)
    assert short == CompactionReport(2, 2, False, short.usage) and session.cache_epoch == 1


def test_compaction_kinds() -> None:
    assert isinstance(compaction_strategy("tiered"), TieredCompaction)
    assert isinstance(compaction_strategy("summarize"), SummarizingCompaction)
    assert isinstance(compaction_strategy("sliding"), SlidingWindowCompaction)
    assert compaction_strategy("off") is None
    assert PersistentCompaction.get_serialization_name() is None


async def test_compaction_off_leaves_a_long_history_alone(project: Path) -> None:
    script = Model(["done"])
    settings = Settings(history=HistoryConfig(compaction="off"))
    agent = build_pydantic_agent(settings, AgentOptions(model=script.model, project_root=project))
    await agent.run("new question", message_history=long_history())
    assert script.summaries == 0 and len(script.seen[0]) == len(long_history()) + 1


async def test_tiered_compaction_clears_old_tool_results_first(project: Path) -> None:
    script = Model(["done"], context_window=4_000)
    session = Session.in_memory()
    agent = build_pydantic_agent(Settings(), AgentOptions(model=script.model, project_root=project))
    await agent.run("new question", message_history=long_history(), deps=RunDeps(session))
    for sent in (script.seen[0], session.messages):
        returns = [str(p.content) for m in sent for p in m.parts if p.part_kind == "tool-return"]
        assert returns[3:] == ["x" * 2_000] * 3 and len(set(returns[:3])) == 1 and len(returns[0]) < 30
    assert script.summaries == 0  # clearing the old tool results alone got under the target


async def test_the_default_tiered_compaction_persists_across_runs(
    project: Path, store: SqliteConversationStore
) -> None:
    session = await Session.start(store, project, model="test")
    await session.set_message_history(long_history())
    script = Model([read("r1"), "done", "second turn done"])
    agent = build_pydantic_agent(Settings(), AgentOptions(model=script.model, project_root=project))
    await agent.run("new question", message_history=session.messages, deps=RunDeps(session))
    after_first = session.messages
    summaries_after_first = script.summaries
    await agent.run("another question", message_history=session.messages, deps=RunDeps(session))
    # The second run starts from what the first one stored, not from the original long history.
    assert script.seen[2][: len(after_first)] == after_first
    assert len(after_first) < len(long_history()) + 4
    assert script.summaries == summaries_after_first  # no re-compaction of an already compacted history
    record = await store.read_record(session.id)
    assert record is not None and len(record.branches) == 1


async def test_a_compaction_inside_a_delegated_run_leaves_the_session_revision_alone(
    project: Path, store: SqliteConversationStore
) -> None:
    """`delegate_task` runs this same agent nested in the main run: its compaction is its own, not the session's."""
    (project / "big.txt").write_text("lorem " * 500)
    session = await Session.start(store, project, model="test")
    reads = [[ToolCallPart("read_file", {"path": "big.txt"}, tool_call_id=f"n{i}")] for i in range(6)]
    delegate = ToolCallPart("delegate_task", {"agent_name": "self", "task": "read big.txt six times"}, "d1")
    script = Model([[delegate], *reads, "nested done", "outer done"], context_window=800)
    agent = build_pydantic_agent(Settings(), AgentOptions(model=script.model, project_root=project))
    result = await agent.run("delegate it", message_history=session.messages, deps=RunDeps(session))
    assert result.output == "outer done"
    nested_last = script.seen[-2]
    assert texts(nested_last[:1]) == ["U:read big.txt six times"]
    results = [str(p.content) for m in nested_last for p in m.parts if p.part_kind == "tool-return"]
    # The nested run compacted: the cheap tier cleared all but its three newest results.
    assert ["lorem" in content for content in results] == [False] * 3 + [True] * 3
    assert (session.cache_epoch, session.history_version) == (0, 0)
    assert stored_info(store, session.id).cache_epoch == 0  # type: ignore[union-attr]
