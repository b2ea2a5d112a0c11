"""The run path: every run goes through `stream_run` inside `run_turn`, the loop every front end shares."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic_ai import Agent, capture_run_messages
from pydantic_ai.agent import AgentRun, AgentRunResult
from pydantic_ai.exceptions import RunCancelled, RunTimedOut, UsageLimitExceeded
from pydantic_ai.messages import AgentStreamEvent, ModelMessage
from pydantic_ai.usage import RunUsage, UsageLimits

from code_puppy.agents.builder import build_pydantic_agent
from code_puppy.agents.history_persistence import (
    persist_checkpoint,
    persist_result_history,
    recover_interrupted_turn,
)
from code_puppy.agents.history_validation import HistoryProcessingError
from code_puppy.agents.provider_retries import ProviderStalled
from code_puppy.agents.steering import SteeringInbox, accepting_steers, held_steers
from code_puppy.config import ConfigError, data_dir, load_settings
from code_puppy.models import choose_model_name, resolve_model
from code_puppy.options import RunOptions
from code_puppy.plugins import PromptBlocked
from code_puppy.plugins.discovery import load_plugins
from code_puppy.plugins.host import PluginHost
from code_puppy.sessions.runs import RunRegistry
from code_puppy.sessions.session import Session, SessionNotSaved, open_session
from code_puppy.sessions.store import SqliteConversationStore
from code_puppy.ui.sinks import SINKS, EventSink, RunOutcome, Status, Usage

EXIT_CODES: dict[Status, int] = {"success": 0, "error": 1, "limit": 3, "interrupted": 130, "terminated": 143}


@dataclass(frozen=True, kw_only=True)
class HeadlessOptions(RunOptions):
    """What the command line asked of one headless invocation."""

    prompt: str
    timeout: float | None = None
    """Seconds the whole invocation may take (`--timeout`); `[run] timeout` when not given."""
    output_format: str = "text"
    input_format: str = "text"
    """`stream-json`: further user messages arrive as JSON lines on stdin and steer the running turn."""


@dataclass
class RunHandle:
    """The run in progress, for what a caller needs of it when it does not succeed: its messages and usage."""

    run: AgentRun[None, str] | None = None
    captured: list[ModelMessage] = field(default_factory=list[ModelMessage])

    def usage(self) -> RunUsage:
        return self.run.usage if self.run is not None else RunUsage()

    def completed_messages(self, error: BaseException | None) -> list[ModelMessage]:
        """What the run completed: the cancellation snapshot when there is one, else what was captured."""
        if error is not None and (cancelled := RunCancelled.from_cancellation(error)) is not None:
            return cancelled.all_messages()
        return list(self.captured)


async def stream_run(
    agent: Agent[None, str],
    prompt: str,
    sink: EventSink,
    *,
    handle: RunHandle | None = None,
    message_history: Sequence[ModelMessage] | None = None,
    usage_limits: UsageLimits | None = None,
    timeout: float | None = None,
    idle_timeout: float | None = None,
) -> AgentRunResult[str]:
    """One run on `agent.iter()`, every stream event handed to `sink`; the sink is the only UI difference.

    `timeout` bounds the whole run (pydantic-ai's `RunTimedOut`); `idle_timeout` bounds each silence of a model's
    stream once it has started (`ProviderStalled`).
    """
    handle = handle if handle is not None else RunHandle()
    with capture_run_messages() as captured:
        handle.captured = captured
        async with agent.iter(
            prompt, message_history=message_history, usage_limits=usage_limits, timeout=timeout
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


def open_store(*, readonly: bool = False) -> SqliteConversationStore:
    """The sessions database of this user (`sessions.db` in the data directory)."""
    return SqliteConversationStore(data_dir() / "sessions.db", readonly=readonly)


def run_headless(options: HeadlessOptions) -> int:
    """Resolve config, model and session (exit 2 when one is bad, before anything is sent), then run one turn.

    With `--output-format json` or `stream-json`, a failure that stops the invocation still ends its output with the
    result object (`"status": "error"`), before the error propagates to its one line on stderr.
    """
    started = time.monotonic()
    try:
        return _run_headless(options)
    except Exception as exc:
        if options.output_format != "text":
            message = str(exc) if isinstance(exc, ConfigError) else f"internal error: {type(exc).__name__}: {exc}"
            SINKS[options.output_format]().finish(
                RunOutcome(None, None, "error", Usage(), round((time.monotonic() - started) * 1000), message)
            )
        raise


def _run_headless(options: HeadlessOptions) -> int:
    settings = load_settings(options.project_root)
    if options.no_mcp:
        settings = settings.model_copy(update={"mcp_servers": {}})
    model_name = choose_model_name(settings, options.model)
    model = resolve_model(settings, model_name)
    plugins = (
        PluginHost(project_dir=options.project_root, debug=options.debug)
        if options.no_plugins
        else load_plugins(settings, options.project_root, debug=options.debug)
    )
    with open_store() as store:

        async def main() -> int:
            session = await open_session(
                store,
                options.project_root,
                model=model_name,
                continue_last=options.continue_last,
                resume=options.resume,
            )
            if recovered := await recover_interrupted_turn(session):
                print(f"code-puppy: note: {recovered}", file=sys.stderr)
            await plugins.startup(settings)
            try:
                inbox = SteeringInbox()
                agent = build_pydantic_agent(
                    settings,
                    model=model,
                    project_root=options.project_root,
                    permission_mode=options.permission_mode,
                    allow=options.allow,
                    session=session,
                    plugins=plugins.for_agent(session),
                    steering=inbox,
                )
                sink: EventSink = SINKS[options.output_format]()
                steers = Steers(
                    RunRegistry(store.database), options.project_root, inbox, options.input_format == "stream-json"
                )
                return await _headless(
                    agent,
                    session,
                    options.prompt,
                    sink,
                    max_requests=options.max_requests,
                    plugins=plugins,
                    max_continuations=settings.plugins.max_continuations,
                    steers=steers,
                    timeout=options.timeout or settings.run.timeout,
                    idle_timeout=settings.run.idle_timeout,
                )
            finally:
                await plugins.shutdown()

        return asyncio.run(main())


FollowUp = Callable[[AgentRunResult[str]], Awaitable[str | None]]
"""Asked after each successful run of a turn, when no plugin's `turn_end` gave one, for the next run's prompt."""


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


async def run_turn(
    agent: Agent[None, str],
    session: Session,
    prompt: str,
    sink: EventSink,
    *,
    max_requests: int | None = None,
    follow_up: FollowUp | None = None,
    max_continuations: int = 10,
    plugins: PluginHost | None = None,
    timeout: float | None = None,
    idle_timeout: float | None = None,
) -> TurnOutcome:
    """One user turn: the prompt's run, then the continuation loop's follow-up runs in the same session.

    Every run ends in the session: a successful one through `persist_result_history`, any other through a
    checkpoint of what it completed. A cancelled turn (Ctrl-C, SIGTERM) is checkpointed and returned, not raised.
    `max_requests` and `timeout` (seconds) bound the whole turn; at most `max_continuations` follow-ups run;
    `idle_timeout` bounds each silence of a model's stream.

    Plugin hooks, in order: `user_prompt_submit` (once; a block ends the turn with `PromptBlocked`, nothing sent or
    saved), then per run `agent_run_start`, the run, `agent_run_end` (after HistoryPersistence absorbed the run and
    before `persist_result_history`; for a run that did not succeed, after its checkpoint), and after a successful
    run `turn_end`, whose first follow-up (else `follow_up`'s) is the next run's prompt.
    """
    hooks = plugins if plugins is not None else PluginHost(project_dir=Path.cwd())
    deadline = None if timeout is None else time.monotonic() + timeout
    usage = RunUsage()
    result: AgentRunResult[str] | None = None
    runs = 0
    try:
        prompt = await hooks.user_prompt_submit(prompt, session)
        for index in range(max_continuations + 1):
            remaining = None if max_requests is None else max_requests - usage.requests
            if remaining is not None and remaining <= 0:
                spent = UsageLimitExceeded(f"the request limit of {max_requests} is spent")
                return TurnOutcome(result, spent, usage, runs)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return TurnOutcome(result, TimeoutError(f"{timeout:g} s"), usage, runs)
            sink.run_started(index)
            await hooks.agent_run_start(agent, prompt, session)
            handle = RunHandle()
            runs = index + 1
            try:
                result = await stream_run(
                    agent,
                    prompt,
                    sink,
                    handle=handle,
                    message_history=session.messages,
                    usage_limits=UsageLimits(request_limit=remaining),
                    timeout=left,
                    idle_timeout=idle_timeout,
                )
            except (Exception, asyncio.CancelledError) as exc:
                run_usage = handle.usage()
                run_id = handle.run.run_id if handle.run is not None else None
                unsaved = None
                try:
                    await persist_checkpoint(
                        session, handle.completed_messages(exc), prompt=prompt, run_id=run_id, usage=run_usage
                    )
                except SessionNotSaved as failure:
                    unsaved = failure
                await hooks.agent_run_end(agent, None, exc, session)
                error = TimeoutError(f"{timeout:g} s") if isinstance(exc, RunTimedOut) else exc
                return TurnOutcome(None, error, usage + run_usage, runs, unsaved=unsaved)
            usage = usage + result.usage
            await hooks.agent_run_end(agent, result, None, session)
            try:
                await persist_result_history(session, result)
            except SessionNotSaved as unsaved:
                return TurnOutcome(result, None, usage, runs, unsaved=unsaved)
            next_prompt = await hooks.turn_end(result, session)
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


@dataclass(frozen=True)
class Steers:
    """Where a headless run takes steers from: `code-puppy steer` through sessions.db, and stdin if asked."""

    registry: RunRegistry
    project_root: Path
    inbox: SteeringInbox
    from_stdin: bool = False


async def _headless(
    agent: Agent[None, str],
    session: Session,
    prompt: str,
    sink: EventSink,
    *,
    max_requests: int | None,
    plugins: PluginHost,
    max_continuations: int,
    steers: Steers,
    timeout: float | None,
    idle_timeout: float,
) -> int:
    started = time.monotonic()
    sink.start(session.id)
    if steers.from_stdin:
        from code_puppy.ui.stdin_messages import read_messages

        loop = asyncio.get_running_loop()
        # Delivered on the loop's thread, so the turn's last look at the inbox and its closing can't miss one.
        read_messages(sys.stdin, lambda text: loop.call_soon_threadsafe(_steer_or_report, steers.inbox, text))

    finished: list[TurnOutcome] = []

    async def turn() -> TurnOutcome:
        # `async with agent` closes the provider's HTTP client and stops the MCP servers when the turn ends.
        async with agent, accepting_steers(steers.registry, session.id, steers.project_root, steers.inbox):
            finished.append(
                await run_turn(
                    agent,
                    session,
                    prompt,
                    sink,
                    max_requests=max_requests,
                    follow_up=held_steers(steers.inbox, sink.event),
                    plugins=plugins,
                    max_continuations=max_continuations,
                    timeout=timeout,
                    idle_timeout=idle_timeout,
                )
            )
            steers.inbox.close()
        return finished[0]

    turn_task = asyncio.create_task(turn())
    stopped_by: list[Status] = []
    loop = asyncio.get_running_loop()
    stops: tuple[tuple[int, Status], ...] = ((signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated"))
    for signum, status in stops:
        loop.add_signal_handler(signum, _stop, turn_task, stopped_by, status)
    try:
        outcome = await turn_task
    except asyncio.CancelledError as exc:
        # The signal came while MCP servers were starting or stopping, outside the run: a turn that had already
        # ended (and been saved) keeps its outcome; otherwise nothing was sent.
        outcome = finished[0] if finished else TurnOutcome(None, exc, RunUsage(), 0)
    finally:
        for signum, _ in stops:
            loop.remove_signal_handler(signum)
    if session.notice:
        print(f"code-puppy: {session.notice}", file=sys.stderr)
    if outcome.unrun_follow_up:
        print(f"code-puppy: note: {unrun_follow_up_note(outcome.unrun_follow_up, max_continuations)}", file=sys.stderr)
    report = _report(session, outcome, stopped_by, started)
    sink.finish(report)
    return EXIT_CODES[report.status]


def _steer_or_report(inbox: SteeringInbox, text: str) -> None:
    if inbox.steer(text) == "closed":
        print(f"code-puppy: the run is over; not delivered: {text[:60]}", file=sys.stderr, flush=True)


def _stop(turn_task: asyncio.Task[TurnOutcome], stopped_by: list[Status], status: Status) -> None:
    """Cancel the turn on the first signal; later ones only wait for its checkpoint to land."""
    if not stopped_by:
        turn_task.cancel()
    stopped_by.append(status)


def _report(session: Session, outcome: TurnOutcome, stopped_by: list[Status], started: float) -> RunOutcome:
    """The headless summary of a turn: status, last answer, usage summed over its runs."""
    error = outcome.error
    status: Status
    message: str | None = None
    if error is None:
        status = "success"
    elif isinstance(error, asyncio.CancelledError):
        status = stopped_by[0] if stopped_by else "interrupted"
        message = status
    elif isinstance(error, PromptBlocked):
        status, message = "error", f"prompt blocked by plugin {error.plugin}: {error.reason}"
    elif isinstance(error, UsageLimitExceeded):
        status, message = "limit", f"stopped by a limit: {error}"
    elif isinstance(error, TimeoutError):
        status, message = "limit", f"stopped by a limit: timeout ({error})"
    elif isinstance(error, HistoryProcessingError):  # the class says whether the output was invalid or it crashed
        status, message = "error", f"run failed: {type(error).__name__} {describe_error(error)}"
    else:
        status, message = "error", f"run failed: {describe_error(error)}"
    if outcome.unsaved is not None:
        status = "error" if status == "success" else status
        message = "; ".join(filter(None, (message, str(outcome.unsaved))))
    return RunOutcome(
        session_id=session.id,
        output=outcome.result.output if error is None and outcome.result is not None else None,
        status=status,
        usage=Usage(outcome.usage.input_tokens, outcome.usage.output_tokens, outcome.usage.requests),
        duration_ms=round((time.monotonic() - started) * 1000),
        error=message,
    )


def unrun_follow_up_note(prompt: str, max_continuations: int) -> str:
    """What the user is told when `[plugins] max_continuations` left a follow-up unrun."""
    unrun = " ".join(prompt.split())[:80]
    return f"stopped after {max_continuations} follow-ups ([plugins] max_continuations); not run: {unrun}"


def describe_error(error: BaseException) -> str:
    """An error on one line, cut to 300 characters."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "…"
