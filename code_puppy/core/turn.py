"""The run path: every run goes through `stream_run` inside `run_turn`, the loop every front end shares."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from pydantic_ai import Agent, capture_run_messages
from pydantic_ai.agent import AgentRun, AgentRunResult
from pydantic_ai.exceptions import RunCancelled, RunTimedOut, UsageLimitExceeded
from pydantic_ai.messages import AgentStreamEvent, ModelMessage, UserContent
from pydantic_ai.models import Model
from pydantic_ai.usage import RunUsage, UsageLimits

from code_puppy.checkpoints.capability import Checkpoints
from code_puppy.checkpoints.rewind import record_turn
from code_puppy.core.builder import capability
from code_puppy.core.events import EventSink, RequestsSpent
from code_puppy.cost.spending import CostMeter
from code_puppy.mentions import attachment
from code_puppy.plugins import PromptBlocked
from code_puppy.plugins.host import PluginHost
from code_puppy.run.deps import RunDeps
from code_puppy.run.history_persistence import persist_checkpoint, persist_result_history
from code_puppy.run.provider_retries import ProviderStalled
from code_puppy.sessions.session import Session, SessionNotSaved

FollowUp = Callable[[AgentRunResult[str]], Awaitable[str | None]]
"""Asked after each successful run of a turn, when no plugin's `turn_end` gave one, for the next run's prompt."""


@dataclass(frozen=True)
class TurnLimits:
    """What bounds one user turn."""

    max_requests: int | None = None
    """Model requests over all the turn's runs (`--max-requests`)."""
    max_continuations: int = 10
    """Follow-up runs after the prompt's (`[plugins] max_continuations`)."""
    timeout: float | None = None
    """Seconds the whole turn may take (`--timeout`, `[run] timeout`)."""
    timeout_from: float | None = None
    """When those seconds began (monotonic): a headless invocation's process start; None: the turn's start."""
    idle_timeout: float | None = None
    """Seconds a model's stream may go silent once it has started (`[run] idle_timeout`)."""


@dataclass
class RunHandle:
    """The run in progress, for what a caller needs of it when it does not succeed: its messages and usage."""

    run: AgentRun[RunDeps, str] | None = None
    captured: list[ModelMessage] = field(default_factory=list[ModelMessage])

    def usage(self) -> RunUsage:
        return self.run.usage if self.run is not None else RunUsage()

    def completed_messages(self, error: BaseException | None) -> list[ModelMessage]:
        """What the run completed: the cancellation snapshot when there is one, else what was captured."""
        if error is not None and (cancelled := RunCancelled.from_cancellation(error)) is not None:
            return cancelled.all_messages()
        return list(self.captured)


async def stream_run(
    agent: Agent[RunDeps, str],
    prompt: str | Sequence[UserContent],
    sink: EventSink,
    *,
    deps: RunDeps,
    model: Model | None = None,
    handle: RunHandle | None = None,
    message_history: Sequence[ModelMessage] | None = None,
    usage_limits: UsageLimits | None = None,
    timeout: float | None = None,
    idle_timeout: float | None = None,
) -> AgentRunResult[str]:
    """One run on `agent.iter()`, every stream event handed to `sink`; the sink is the only UI difference.

    `model` serves this run (the agent's default when None); `timeout` bounds the whole run (pydantic-ai's
    `RunTimedOut`); `idle_timeout` bounds each silence of a model's stream once it has started (`ProviderStalled`).
    """
    handle = handle if handle is not None else RunHandle()
    with capture_run_messages() as captured:
        handle.captured = captured
        async with agent.iter(
            prompt,
            deps=deps,
            model=model,
            message_history=message_history,
            usage_limits=usage_limits,
            timeout=timeout,
        ) as run:
            handle.run = run
            async for node in run:
                if Agent.is_model_request_node(node) or Agent.is_call_tools_node(node):
                    async with node.stream(run.ctx) as events:
                        limited = events
                        if idle_timeout is not None and Agent.is_model_request_node(node):
                            limited = _without_long_silences(events, idle_timeout)
                        async for event in limited:
                            sink.event(event)
            assert run.result is not None  # the loop only ends on End
            return run.result


async def _without_long_silences(
    events: AsyncIterable[AgentStreamEvent], seconds: float
) -> AsyncIterator[AgentStreamEvent]:
    """`events`, failing with `ProviderStalled` when the stream goes silent for `seconds` after its first event."""
    iterator = aiter(events)
    started = False
    while True:
        try:
            if started:
                async with asyncio.timeout(seconds):
                    event = await anext(iterator)
            else:
                event = await anext(iterator)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise ProviderStalled(f"the model stopped streaming for {seconds:g} s ([run] idle_timeout)") from None
        started = True
        yield event


@dataclass
class TurnOutcome:
    """How a turn ended: its last successful run, or the error that stopped it, and the usage of all its runs."""

    result: AgentRunResult[str] | None
    error: BaseException | None
    usage: RunUsage
    runs: int
    unrun_follow_up: str | None = None
    """A follow-up prompt left over when `max_continuations` ended the turn."""
    unsaved: SessionNotSaved | None = None
    """Why the session's history (kept in memory) could not be saved when the turn ended."""
    checkpoint: int | None = None
    """The checkpoint of the files the turn changed (None: it changed none, or checkpoints are off)."""
    checkpoint_note: str | None = None
    """What the user should know about the turn's checkpoint: files too big to keep, a snapshot that failed."""


async def run_turn(
    agent: Agent[RunDeps, str],
    deps: RunDeps,
    prompt: str,
    sink: EventSink,
    *,
    model: Model | None = None,
    limits: TurnLimits | None = None,
    follow_up: FollowUp | None = None,
    plugins: PluginHost | None = None,
    attachments: Sequence[UserContent] = (),
) -> TurnOutcome:
    """One user turn of `deps.session`: the prompt's run, then the continuation loop's follow-up runs.

    `attachments` (images, audio: `BinaryContent`) go with the prompt's text in the first run's user message; plugin
    hooks see the text.

    Every run ends in the session: a successful one through `persist_result_history`, any other through a
    checkpoint of what it completed. A cancelled turn (Ctrl-C, SIGTERM) is checkpointed and returned, not raised.
    `limits` bound the whole turn.

    Plugin hooks, in order: `session_start` (the session's first turn in this process), `user_prompt_submit` (once;
    a block ends the turn with `PromptBlocked`, nothing sent or saved; the context both return goes with the prompt
    as attachments), then per run `agent_run_start`, the run, `agent_run_end` (after HistoryPersistence absorbed
    the run and before `persist_result_history`; for a run that did not succeed, after its checkpoint), and after a
    successful run `turn_end`, whose first follow-up (else `follow_up`'s) is the next run's prompt.
    """
    checkpoints = capability(agent, Checkpoints)
    if checkpoints is not None:
        checkpoints.begin_turn()
    run_ids: list[str] = []
    outcome = await _run_turn(agent, deps, prompt, attachments, sink, model, limits, follow_up, plugins, run_ids)
    if checkpoints is not None:
        outcome.checkpoint, outcome.checkpoint_note = record_turn(checkpoints.take(), deps.session, prompt, run_ids)
        if outcome.checkpoint is not None:
            checkpoints.maintain_in_background()
    return outcome


async def _run_turn(
    agent: Agent[RunDeps, str],
    deps: RunDeps,
    prompt: str,
    attachments: Sequence[UserContent],
    sink: EventSink,
    model: Model | None,
    limits: TurnLimits | None,
    follow_up: FollowUp | None,
    plugins: PluginHost | None,
    run_ids: list[str],
) -> TurnOutcome:
    limits = limits or TurnLimits()
    session = deps.session
    meter = capability(agent, CostMeter)
    spending = meter.spending if meter is not None else None
    if spending is not None:
        spending.begin_turn(session.id)
        spending.on_request, spending.on_warning = sink.request, sink.warning
    began = time.monotonic() if limits.timeout_from is None else limits.timeout_from
    deadline = None if limits.timeout is None else began + limits.timeout
    usage = RunUsage()
    result: AgentRunResult[str] | None = None
    runs = 0
    try:
        if plugins is not None:
            context = await plugins.session_start(session)
            prompt, more = await plugins.user_prompt_submit(prompt, session)
            # The plugins' context goes beside the prompt, never into it: titles and the search index leave it out.
            attachments = [*(attachment(text, "plugin context") for text in [*context, *more]), *attachments]
        for index in range(limits.max_continuations + 1):
            remaining = None if limits.max_requests is None else limits.max_requests - usage.requests
            left = None if deadline is None else deadline - time.monotonic()
            if (reached := _limit_reached(limits, remaining, left)) is not None:
                return TurnOutcome(result, reached, usage, runs)
            sink.run_started(index)
            if spending is not None:
                spending.run_index = index
            if plugins is not None:
                await plugins.agent_run_start(agent, prompt, session)
            handle = RunHandle()
            runs = index + 1
            user_prompt = [prompt, *attachments] if attachments and index == 0 else prompt
            try:
                result = await stream_run(
                    agent,
                    user_prompt,
                    sink,
                    deps=deps,
                    model=model,
                    handle=handle,
                    message_history=session.messages,
                    usage_limits=UsageLimits(request_limit=remaining),
                    timeout=left,
                    idle_timeout=limits.idle_timeout,
                )
            except (Exception, asyncio.CancelledError) as exc:
                unsaved = await _checkpoint(session, handle, exc, user_prompt, run_ids)
                if plugins is not None:
                    await plugins.agent_run_end(agent, None, exc, session)
                return TurnOutcome(None, _in_our_words(exc, limits), usage + handle.usage(), runs, unsaved=unsaved)
            usage = usage + result.usage
            run_ids.append(result.run_id)
            if plugins is not None:
                await plugins.agent_run_end(agent, result, None, session)
            try:
                await persist_result_history(session, result)
            except SessionNotSaved as unsaved:
                return TurnOutcome(result, None, usage, runs, unsaved=unsaved)
            next_prompt = await plugins.turn_end(result, session) if plugins is not None else None
            if not next_prompt and follow_up is not None:
                next_prompt = await follow_up(result)
            if not next_prompt:
                return TurnOutcome(result, None, usage, runs)
            prompt = next_prompt
    except PromptBlocked as blocked:
        return TurnOutcome(None, blocked, usage, 0)
    except asyncio.CancelledError as exc:
        # Cancelled inside a plugin hook, between runs: every run that finished is saved already.
        return TurnOutcome(None, exc, usage, runs)
    return TurnOutcome(result, None, usage, runs, unrun_follow_up=prompt)


def _in_our_words(error: BaseException, limits: TurnLimits) -> BaseException:
    """A run's error as the turn reports it: pydantic-ai's timeout and request limit named by our flags."""
    if isinstance(error, RunTimedOut):
        return TimeoutError(f"{limits.timeout:g} s")
    if isinstance(error, UsageLimitExceeded) and "request_limit" in str(error) and limits.max_requests:
        return RequestsSpent(limits.max_requests)  # pydantic-ai's words name the requests left, not the flag
    return error


def _limit_reached(limits: TurnLimits, remaining: int | None, left: float | None) -> BaseException | None:
    """Why the turn cannot start another run: its requests are spent (`remaining`), or its time (`left`)."""
    if remaining is not None and remaining <= 0:
        return RequestsSpent(limits.max_requests or 0)
    if left is not None and left <= 0:
        return TimeoutError(f"{limits.timeout:g} s")
    return None


async def _checkpoint(
    session: Session, handle: RunHandle, exc: BaseException, prompt: str | Sequence[UserContent], run_ids: list[str]
) -> SessionNotSaved | None:
    """Save what a run that failed or was cancelled completed; why it could not be saved, if it could not."""
    run_id = handle.run.run_id if handle.run is not None else None
    run_ids.extend([run_id] if run_id is not None else [])
    try:
        await persist_checkpoint(
            session, handle.completed_messages(exc), prompt=prompt, run_id=run_id, usage=handle.usage()
        )
    except SessionNotSaved as failure:
        return failure
    return None


def unrun_follow_up_note(prompt: str, max_continuations: int) -> str:
    """What the user is told when `[plugins] max_continuations` left a follow-up unrun."""
    unrun = " ".join(prompt.split())[:80]
    return f"stopped after {max_continuations} follow-ups ([plugins] max_continuations); not run: {unrun}"
