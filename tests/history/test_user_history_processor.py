"""UserHistoryProcessor in real agents (FunctionModel, SQLite): processor kinds, conditions, errors, persistence.

§6 cases 13-15, 20 (nothing sent), 22-24, 26, 28, 29, and the recursion guard.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    repair_messages,
)

from code_puppy.config import ConfigError, HistoryConfig, Settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent
from code_puppy.history import HistoryProcessingError, HistoryProcessingValidationError, HistoryProcessorContext
from code_puppy.history.processing import (
    HistoryProcessorState,
    classify_condition,
    classify_processor,
    resolve_history_processing,
)
from code_puppy.history.tokens import text_tokens
from code_puppy.history.user_history_processor import UserHistoryProcessor
from code_puppy.run.deps import RunDeps
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore
from tests.conftest import stored_info
from tests.history.history_cases import C, R, T, U, texts
from tests.scripted_model import Scripted, scripted

if TYPE_CHECKING:
    from pydantic_ai.models.function import AgentInfo

PRIOR: list[ModelMessage] = [U("q1"), T("a1", model_name="fake"), U("q2"), T("a2", model_name="fake")]


@dataclass
class SessionAgent:
    """The agent, with each run belonging to `session` (its `RunDeps`) when there is one."""

    agent: Agent[RunDeps, str]
    session: Session | None

    async def run(self, prompt: str, **kwargs: Any) -> AgentRunResult[str]:
        deps = RunDeps(self.session) if self.session is not None else None
        return await self.agent.run(prompt, deps=deps, **kwargs)  # type: ignore[arg-type]


def agent_with(
    script: Scripted,
    project: Path,
    processors: Sequence[Callable[..., Any]],
    *,
    condition: Callable[..., Any] | None = None,
    session: Session | None = None,
) -> SessionAgent:
    agent = build_pydantic_agent(
        Settings(),
        AgentOptions(
            model=script.model,
            project_root=project,
            history_processors=processors,
            history_processor_condition=condition,
        ),
    )
    return SessionAgent(agent, session)


# --- the four pydantic-ai signatures and the context style, sync and async -------------------------------------

calls: list[tuple[str, type, int]] = []


def drop_first_cycle(messages: list[ModelMessage]) -> list[ModelMessage]:
    calls.append(("messages", type(messages), threading.get_ident()))
    return messages[2:]


async def drop_first_cycle_async(messages: list[ModelMessage]) -> list[ModelMessage]:
    calls.append(("messages", type(messages), threading.get_ident()))
    return messages[2:]


def with_run_context(ctx: RunContext[None], messages: list[ModelMessage]) -> list[ModelMessage]:
    calls.append(("run_context", type(ctx), threading.get_ident()))
    assert ctx.messages == messages and ctx.run_step == 1
    return messages[2:]


async def with_run_context_async(ctx: RunContext[None], messages: list[ModelMessage]) -> list[ModelMessage]:
    calls.append(("run_context", type(ctx), threading.get_ident()))
    return messages[2:]


def keep_one(ctx: HistoryProcessorContext) -> list[ModelMessage]:
    calls.append(("context", type(ctx), threading.get_ident()))
    return ctx.keep_recent_groups(1)


async def keep_one_async(ctx: HistoryProcessorContext) -> list[ModelMessage]:
    calls.append(("context", type(ctx), threading.get_ident()))
    return ctx.keep_recent_groups(1)


@pytest.mark.parametrize(
    ("processor", "kind", "is_async"),
    [
        (drop_first_cycle, "messages", False),
        (drop_first_cycle_async, "messages", True),
        (with_run_context, "run_context", False),
        (with_run_context_async, "run_context", True),
        (keep_one, "context", False),
        (keep_one_async, "context", True),
    ],
)
async def test_each_processor_kind_trims_and_persists(
    processor: Callable[..., Any], kind: str, is_async: bool, project: Path
) -> None:
    calls.clear()
    assert (classify_processor(processor, "p").kind, classify_processor(processor, "p").is_async) == (kind, is_async)
    session = Session.in_memory()
    script = scripted("a3")
    agent = agent_with(script, project, [processor], session=session)
    result = await agent.run("q3", message_history=PRIOR)
    assert texts(script.seen[0]) == ["U:q2", "T:a2", "U:q3"]
    assert texts(result.all_messages()) == ["U:q2", "T:a2", "U:q3", "T:a3"]
    assert session.messages == result.all_messages()
    assert result.all_messages()[0] is PRIOR[2]  # kept groups are the caller's own objects, not the copies
    expected_type = {"messages": list, "run_context": RunContext, "context": HistoryProcessorContext}[kind]
    assert [(k, t) for k, t, _ in calls] == [(kind, expected_type)]
    on_loop_thread = calls[0][2] == threading.get_ident()
    assert on_loop_thread is is_async  # sync processors run in a worker thread
    assert (session.cache_epoch, session.history_version) == (1, 2)


def test_case_28_and_ambiguous_signatures_are_rejected_at_configuration() -> None:
    def unannotated(ctx, messages):  # type: ignore[no-untyped-def]
        return messages

    def run_context_only(ctx: RunContext[None]) -> None: ...

    def three(a: Any, b: Any, c: Any) -> None: ...

    def star(*messages: Any) -> None: ...

    def wrong_first(ctx: HistoryProcessorContext, messages: list[ModelMessage]) -> None: ...

    expected = {
        unannotated: "history processor 'p' takes two arguments but its first, 'ctx', is unannotated: annotate it "
        "as RunContext, or take one argument (the messages or a HistoryProcessorContext)",
        run_context_only: "history processor 'p' takes only a RunContext; a processor with a RunContext also takes "
        "the messages: fn(ctx: RunContext, messages)",
        three: "history processor 'p' takes 3 required arguments; it must take the messages, a RunContext and the "
        "messages, or a HistoryProcessorContext",
        star: "history processor 'p' takes *messages; name its parameters so its kind is clear",
        wrong_first: "history processor 'p' takes two arguments but its first, 'ctx', is annotated "
        f"{HistoryProcessorContext!r}: annotate it as RunContext, or take one argument (the messages or a "
        "HistoryProcessorContext)",
    }
    for function, message in expected.items():
        with pytest.raises(ConfigError) as caught:
            classify_processor(function, "p")
        assert str(caught.value) == message


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (
            "tests.history.history_cases:missing",
            "[history] processors: cannot import 'tests.history.history_cases:missing': "
            "tests.history.history_cases has no attribute 'missing'",
        ),
        (
            "tests.history.history_cases",
            "[history] processors: 'tests.history.history_cases' is not an import path of the form 'module:callable'",
        ),
        ("tests.history.history_cases:texts", None),
    ],
)
def test_import_paths_resolve_on_sys_path(path: str, message: str | None) -> None:
    config = HistoryConfig(processors=(path,))
    if message is None:
        resolved = resolve_history_processing(config).processors
        assert [(p.name, p.kind) for p in resolved] == [(path, "messages")]
        assert resolve_history_processing(config).processors[0] is resolved[0]  # resolved once, then cached
        return
    with pytest.raises(ConfigError) as caught:
        resolve_history_processing(config)
    assert str(caught.value) == message


def test_kinds_of_callable_objects_partials_and_unresolved_annotations() -> None:
    import functools

    class Trimmer:
        def __call__(self, ctx: HistoryProcessorContext) -> list[ModelMessage]:
            return list(ctx.messages)

    class AsyncTrimmer:
        async def __call__(self, messages: list[ModelMessage]) -> list[ModelMessage]:
            return messages

    def two(ctx: RunContext[None], messages: list[ModelMessage], keep: int) -> list[ModelMessage]:
        return messages[-keep:]

    def later(ctx: HistoryProcessorContext) -> None: ...

    later.__annotations__ = {"ctx": "NotImportedHere.HistoryProcessorContext"}  # a TYPE_CHECKING-only import
    kinds = [
        (classify_processor(f, "p").kind, classify_processor(f, "p").is_async)
        for f in (Trimmer(), AsyncTrimmer(), functools.partial(two, keep=2), later, lambda m: m)
    ]
    assert kinds == [
        ("context", False),
        ("messages", True),
        ("run_context", False),
        ("context", False),
        ("messages", False),
    ]


# --- conditions ----------------------------------------------------------------------------------------------------

states: list[HistoryProcessorState] = []


def record_state(state: HistoryProcessorState) -> bool:
    states.append(state)
    return state.request_index == 2


async def async_false(state: HistoryProcessorState) -> bool:
    states.append(state)
    return False


async def test_case_24_condition_is_level_triggered_and_sees_a_frozen_state(project: Path) -> None:
    states.clear()
    calls.clear()
    script = scripted([ToolCallPart("read_file", {"path": "README.md"}, tool_call_id="r1")], "a3")
    agent = agent_with(script, project, [keep_one], condition=record_state)
    await agent.run("q3", message_history=PRIOR)
    assert [(s.request_index, s.history_version, s.message_count, s.cache_epoch) for s in states] == [
        (1, 1, 5, 0),
        (2, 2, 7, 0),
    ]
    assert [kind for kind, _, _ in calls] == ["context"]  # only where the condition held
    assert texts(script.seen[1]) == ["U:q2", "T:a2", "U:q3", "C:r1", "R:r1"]
    first = states[0]
    assert (first.adapter_shortname, first.model_id, first.context_window) == (
        "function",
        "function:function:_respond:_stream",
        None,
    )
    assert 0 < first.estimated_tokens < first.estimated_request_tokens  # + instructions and tool schemas
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.request_index = 9  # type: ignore[misc]


async def test_case_24_a_false_condition_skips_the_processor_but_pydantic_still_repairs(project: Path) -> None:
    states.clear()
    calls.clear()
    script = scripted("a2")
    agent = agent_with(script, project, [keep_one], condition=async_false)
    orphan = [U("q1"), R("lost"), T("a1")]
    result = await agent.run("q2", message_history=orphan)
    assert calls == [] and len(states) == 1
    assert texts(script.seen[0]) == ["U:q1", "T:a1", "U:q2"]  # the orphan result never reaches the model
    assert texts(result.all_messages()) == ["U:q1", "T:a1", "U:q2", "T:a2"]


@pytest.mark.parametrize(
    ("verdict", "message"),
    [
        (1, "history processor condition tests:cond returned 1 (int); it must return exactly True or False"),
        (None, "history processor condition tests:cond returned None (NoneType); it must return exactly True or False"),
        ("yes", "history processor condition tests:cond returned 'yes' (str); it must return exactly True or False"),
        (ValueError("bad"), "history processor condition tests:cond raised ValueError: bad"),
    ],
)
async def test_case_24_a_bad_condition_stops_the_request_before_transport(
    verdict: object, message: str, project: Path
) -> None:
    def condition(state: HistoryProcessorState) -> Any:
        if isinstance(verdict, Exception):
            raise verdict
        return verdict

    script = scripted("never")
    processors = resolve_history_processing(HistoryConfig(), processors=[keep_one]).processors
    capability = UserHistoryProcessor(processors, condition=classify_condition(condition, "tests:cond"))
    agent = Agent(script.model, capabilities=[capability])
    with pytest.raises(HistoryProcessingError) as caught:
        await agent.run("q3", message_history=PRIOR)
    assert (type(caught.value), str(caught.value)) == (HistoryProcessingError, message)
    assert script.seen == []


def test_case_24_a_condition_without_processors_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_history_processing(HistoryConfig(), processors=[], condition=record_state)
    assert str(caught.value) == (
        f"[history] processor_condition '{__name__}:record_state' is set without processors: "
        "a condition only decides whether [history] processors run"
    )
    with pytest.raises(ConfigError, match="takes 2 required arguments; it must take one, a HistoryProcessorState"):
        classify_condition(lambda a, b: True, "c")


# --- what reaches the model, and what does not ----------------------------------------------------------------------


def keep_last_message(messages: list[ModelMessage]) -> list[ModelMessage]:
    return messages[-1:]


async def test_case_26_a_naive_tail_inside_a_tool_loop_is_rejected_not_looped(project: Path) -> None:
    script = scripted(*[[ToolCallPart("read_file", {"path": "README.md"}, tool_call_id=f"r{i}")] for i in range(60)])
    agent = agent_with(script, project, [keep_last_message])
    with pytest.raises(HistoryProcessingValidationError) as caught:
        await agent.run("q1")
    assert (caught.value.rule, caught.value.output_index) == ("V8", 0)
    assert str(caught.value) == (
        f"[V8] {__name__}:keep_last_message returned an invalid history: message 0 holds the result of tool call "
        "'r0' (read_file) without the call; keep or drop whole groups (ctx.groups)"
    )
    assert len(script.seen) == 1  # one request went out; the second was stopped before transport


def restore_dropped(messages: list[ModelMessage]) -> list[ModelMessage]:
    return [*PRIOR[:2], *messages]


async def test_processors_run_in_order_each_validated_against_its_own_input(project: Path) -> None:
    seen_by_second: list[list[str]] = []

    def second(ctx: HistoryProcessorContext) -> list[ModelMessage]:
        seen_by_second.append(texts(ctx.messages))
        return restore_dropped(list(ctx.messages))

    script = scripted("never")
    agent = agent_with(script, project, [drop_first_cycle, second])
    with pytest.raises(HistoryProcessingValidationError) as caught:
        await agent.run("q3", message_history=PRIOR)
    assert seen_by_second == [["U:q2", "T:a2", "U:q3"]]
    assert str(caught.value) == (
        "[V10] tests.history.test_user_history_processor:"
        "test_processors_run_in_order_each_validated_against_its_own_input.<locals>.second returned an invalid "
        "history: message 1 is a ModelResponse no model produced here (text); a summary response may hold only "
        "TextParts without id or provider fields"
    )
    assert script.seen == []


async def test_case_20_invalid_outputs_send_nothing(project: Path) -> None:
    for bad in ([], "text", [{"kind": "request"}], PRIOR):
        script = scripted("never")
        agent = agent_with(script, project, [lambda messages, bad=bad: bad])  # type: ignore[misc]
        with pytest.raises(HistoryProcessingValidationError):
            await agent.run("q3", message_history=PRIOR)
        assert script.seen == []


async def test_case_21_a_no_op_keeps_the_original_objects(project: Path) -> None:
    def same(ctx: HistoryProcessorContext) -> Sequence[ModelMessage]:
        return ctx.messages  # a tuple of deep copies, equal to the input

    session = Session.in_memory()
    script = scripted("a3")
    result = await agent_with(script, project, [same], session=session).run("q3", message_history=PRIOR)
    assert all(a is b for a, b in zip(result.all_messages(), PRIOR, strict=False))
    assert (session.cache_epoch, session.history_version) == (0, 1)


async def test_case_22_in_place_mutation_cannot_reach_the_history(project: Path) -> None:
    def vandal(messages: list[ModelMessage]) -> list[ModelMessage]:
        for message in messages:
            for part in message.parts:
                if isinstance(part, UserPromptPart | TextPart):
                    part.content = "HACKED"
        return messages[2:]  # drop the first cycle: valid, but it edited the kept ones too

    def quiet_vandal(messages: list[ModelMessage]) -> list[ModelMessage]:
        messages[0].parts[0].content = "HACKED"  # type: ignore[union-attr]  # a group it then drops
        return messages[2:]

    history = [U("q1"), T("a1"), U("q2"), T("a2")]
    script = scripted("never")
    with pytest.raises(HistoryProcessingValidationError) as caught:
        await agent_with(script, project, [vandal]).run("q3", message_history=history)
    assert caught.value.rule == "V2"
    assert texts(history) == ["U:q1", "T:a1", "U:q2", "T:a2"]
    script = scripted("a3")
    result = await agent_with(script, project, [quiet_vandal]).run("q3", message_history=history)
    assert texts(history) == ["U:q1", "T:a1", "U:q2", "T:a2"]
    assert texts(result.all_messages()) == ["U:q2", "T:a2", "U:q3", "T:a3"]


async def test_case_13_the_processor_sees_run_start_cleaned_history(project: Path) -> None:
    seen: list[list[str]] = []

    def look(ctx: HistoryProcessorContext) -> Sequence[ModelMessage]:
        seen.append(texts(ctx.messages))
        return ctx.messages

    incoming = [U("q1"), C("d1", "ok1"), R("ok1", "orph"), T("a1"), U("q2a"), U("q2b"), T("a2")]
    await agent_with(scripted("a3"), project, [look]).run("q3", message_history=incoming)
    assert seen == [["U:q1", "C:d1 C:ok1", "R:ok1 R:d1", "T:a1", "U:q2a U:q2b", "T:a2", "U:q3"]]


async def test_case_14_and_15_unanswered_and_interrupted_calls(project: Path) -> None:
    seen: list[list[str]] = []

    def look(ctx: HistoryProcessorContext) -> list[ModelMessage]:
        seen.append([f"{g.entry_start}-{g.entry_end}:{','.join(g.protected_reasons)}" for g in ctx.groups])
        return ctx.keep_recent_groups(0)

    pending = [U("q1"), C("pend")]
    agent = agent_with(scripted("a2", "a3"), project, [look])
    with pytest.raises(UserError, match="unprocessed tool calls"):
        await agent.run("q2", message_history=pending)
    assert seen == []
    result = await agent.run("q2", message_history=repair_messages(pending))
    assert seen == [["0-4:current_request"]]  # the synthesized return and the new prompt join the group
    returns = [p for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [(r.tool_call_id, r.outcome) for r in returns] == [("pend", "interrupted")]
    interrupted = ModelResponse(parts=[ToolCallPart("shell", {}, tool_call_id="s1")], state="interrupted")
    seen.clear()
    await agent.run("q3", message_history=[U("q0"), T("a0"), U("q1"), interrupted])
    assert seen == [["0-2:", "2-6:current_request"]]


# --- errors, cancellation, recursion -----------------------------------------------------------------------------


def boom(messages: list[ModelMessage]) -> list[ModelMessage]:
    raise RuntimeError("processor exploded")


async def test_case_23_a_crash_sends_nothing_and_keeps_the_history(
    project: Path, store: SqliteConversationStore
) -> None:
    session = await Session.start(store, project, model="test")
    await session.set_message_history(PRIOR)
    script = scripted("never")
    with pytest.raises(HistoryProcessingError) as caught:
        await agent_with(script, project, [boom], session=session).run("q3", message_history=session.messages)
    assert type(caught.value) is HistoryProcessingError
    assert str(caught.value) == f"{__name__}:boom raised RuntimeError: processor exploded"
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert script.seen == []
    loaded = await store.load(session.id)
    assert loaded is not None and loaded.messages == PRIOR
    assert (session.cache_epoch, stored_info(store, session.id).cache_epoch) == (0, 0)  # type: ignore[union-attr]


async def test_case_23_cancellation_during_a_processor_commits_nothing(
    project: Path, store: SqliteConversationStore
) -> None:
    started, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def slow(ctx: HistoryProcessorContext) -> list[ModelMessage]:
        started.set()
        release.wait(5)
        finished.append("late result")
        return ctx.keep_recent_groups(0)

    session = await Session.start(store, project, model="test")
    await session.set_message_history(PRIOR)
    script = scripted("never")
    run = asyncio.create_task(agent_with(script, project, [slow], session=session).run("q3", message_history=PRIOR))
    await asyncio.to_thread(started.wait, 5)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert finished == []  # the run ended while the worker thread was still busy
    release.set()
    await asyncio.sleep(0.05)
    assert script.seen == []
    loaded = await store.load(session.id)
    assert loaded is not None and loaded.messages == PRIOR
    assert (session.cache_epoch, session.history_version) == (0, 1)


async def test_a_processor_may_not_run_its_own_agent(project: Path) -> None:
    holder: list[Agent[None, str]] = []

    async def recursive(messages: list[ModelMessage]) -> list[ModelMessage]:
        await holder[0].run("summarize this")
        return messages

    script = scripted("never", "never")
    holder.append(agent_with(script, project, [recursive]))
    with pytest.raises(HistoryProcessingError) as caught:
        await holder[0].run("q1")
    assert str(caught.value) == (
        "a history processor ran the agent whose history it processes; "
        "summarize with a separate agent that has no history processors"
    )
    assert script.seen == []


# --- persistence (case 29) ----------------------------------------------------------------------------------------


async def test_case_29_an_accepted_edit_is_stored_as_a_branch_and_resumed(
    project: Path, store: SqliteConversationStore
) -> None:
    session = await Session.start(store, project, model="test")
    await session.set_message_history(PRIOR)
    old_head = (await store.read_record(session.id)).head_id  # type: ignore[union-attr]
    script = scripted("a3", "a4")
    agent = agent_with(script, project, [keep_one], session=session)
    result = await agent.run("q3", message_history=session.messages)
    assert texts(session.messages) == texts(result.all_messages()) == ["U:q2", "T:a2", "U:q3", "T:a3"]
    record = await store.read_record(session.id)
    assert record is not None and record.branches == [old_head]
    assert texts([e.message for e in await store.read_history(old_head)]) == ["U:q1", "T:a1", "U:q2", "T:a2"]
    info = stored_info(store, session.id)
    assert info is not None and (info.cache_epoch, info.history_version, info.message_count) == (1, 2, 4)
    resumed = await Session.resume(store, info, model="test")
    assert texts(resumed.messages) == ["U:q2", "T:a2", "U:q3", "T:a3"]
    assert (resumed.cache_epoch, resumed.history_version) == (1, 2)
    later = agent_with(script, project, [keep_one], session=resumed)
    await later.run("q4", message_history=resumed.messages)
    assert texts(script.seen[1]) == ["U:q3", "T:a3", "U:q4"]
    assert (stored_info(store, session.id).cache_epoch, resumed.history_version) == (2, 4)  # type: ignore[union-attr]


async def test_request_estimate_anchors_on_the_latest_usage_and_keeps_it_after_a_rewrite(project: Path) -> None:
    estimates: list[tuple[int, int]] = []

    def look(ctx: HistoryProcessorContext) -> Sequence[ModelMessage]:
        estimates.append((ctx.estimated_tokens, ctx.estimated_request_tokens))
        return ctx.messages

    def trim(ctx: HistoryProcessorContext) -> Sequence[ModelMessage]:
        return ctx.keep_recent_groups(1)

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        from pydantic_ai.usage import RequestUsage

        return ModelResponse(
            parts=[TextPart("a")], usage=RequestUsage(input_tokens=1000 * len(messages), output_tokens=10)
        )

    from pydantic_ai.models.function import FunctionModel

    processors = (classify_processor(look, "look"), classify_processor(trim, "trim"), classify_processor(look, "look"))
    agent = Agent(FunctionModel(answer), capabilities=[UserHistoryProcessor(processors)])
    history: list[ModelMessage] = []
    for prompt in ("q1", "q2", "q3"):
        history = (await agent.run(prompt, message_history=history)).all_messages()
    assert texts(history) == ["U:q2", "T:a", "U:q3", "T:a"]
    assert estimates == [
        (9, text_tokens("q1")),  # no anchor: the text, instructions and tool schemas (none here) estimated
        (9, text_tokens("q1")),
        (27, 1010 + text_tokens("q2")),  # anchored on the first answer's usage: only the new prompt estimated
        (27, 1010 + text_tokens("q2")),
        (45, 3010 + text_tokens("q3")),
        (27, 3010 + text_tokens("q3")),  # trimmed, but the anchor still counts q1 and a1 until the next answer
    ]


async def test_delegated_runs_are_processed_but_do_not_advance_the_session(project: Path) -> None:
    seen: list[list[str]] = []

    def look(ctx: HistoryProcessorContext) -> list[ModelMessage]:
        seen.append(texts(ctx.messages))
        return ctx.keep_recent_groups(1)

    delegate = ToolCallPart("delegate_task", {"agent_name": "self", "task": "count files"}, tool_call_id="d1")
    script = scripted([delegate], "sub-agent says 3", "main answer")
    session = Session.in_memory()
    agent = agent_with(script, project, [look], session=session)
    await agent.run("q3", message_history=PRIOR)
    assert [s[-1] for s in seen] == ["U:q3", "U:count files", "R:d1"]
    assert texts(script.seen[0]) == ["U:q2", "T:a2", "U:q3"]
    assert (session.cache_epoch, session.history_version) == (1, 3)  # two main requests and one rewrite
