"""The run path: every run goes through `stream_run`; every headless run ends in `finish_run`."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic_ai import Agent, capture_run_messages
from pydantic_ai.agent import AgentRun, AgentRunResult
from pydantic_ai.exceptions import AgentRunError, RunCancelled, UsageLimitExceeded, UserError
from pydantic_ai.messages import ModelMessage
from pydantic_ai.usage import RunUsage, UsageLimits

from code_puppy.agents.builder import build_pydantic_agent
from code_puppy.agents.history_persistence import persist_checkpoint, persist_result_history
from code_puppy.agents.history_validation import HistoryProcessingError
from code_puppy.config import PermissionMode, data_dir, load_settings
from code_puppy.models import choose_model_name, resolve_model
from code_puppy.sessions.session import Session, open_session
from code_puppy.sessions.store import SqliteConversationStore
from code_puppy.ui.sinks import SINKS, EventSink, RunOutcome, Status, Usage

EXIT_CODES: dict[Status, int] = {"success": 0, "error": 1, "limit": 3, "interrupted": 130, "terminated": 143}


@dataclass(frozen=True)
class HeadlessOptions:
    """What the command line asked of one headless invocation."""

    project_root: Path
    prompt: str
    model: str | None = None
    output_format: str = "text"
    permission_mode: PermissionMode | None = None
    allow: tuple[str, ...] = ()
    max_requests: int | None = None
    continue_last: bool = False
    resume: str | None = None


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
) -> AgentRunResult[str]:
    """One run on `agent.iter()`, every stream event handed to `sink`; the sink is the only UI difference."""
    handle = handle if handle is not None else RunHandle()
    with capture_run_messages() as captured:
        handle.captured = captured
        async with agent.iter(prompt, message_history=message_history, usage_limits=usage_limits) as run:
            handle.run = run
            async for node in run:
                if Agent.is_model_request_node(node) or Agent.is_call_tools_node(node):
                    async with node.stream(run.ctx) as events:
                        async for event in events:
                            sink.event(event)
            assert run.result is not None  # the loop only ends on End
            return run.result


def open_store() -> SqliteConversationStore:
    """The sessions database of this user (`sessions.db` in the data directory)."""
    return SqliteConversationStore(data_dir() / "sessions.db")


def run_headless(options: HeadlessOptions) -> int:
    """Resolve config, model and session (exit 2 on a bad one, before anything is sent), run once, return the code."""
    settings = load_settings(options.project_root)
    model_name = choose_model_name(settings, options.model)
    model = resolve_model(settings, model_name)
    with open_store() as store:

        async def main() -> int:
            session = await open_session(
                store,
                options.project_root,
                model=model_name,
                continue_last=options.continue_last,
                resume=options.resume,
            )
            agent = build_pydantic_agent(
                settings,
                model=model,
                project_root=options.project_root,
                permission_mode=options.permission_mode,
                allow=options.allow,
                session=session,
            )
            sink: EventSink = SINKS[options.output_format]()
            limits = UsageLimits(request_limit=options.max_requests)
            return await _headless(agent, session, options.prompt, sink, limits)

        return asyncio.run(main())


async def _headless(
    agent: Agent[None, str], session: Session, prompt: str, sink: EventSink, limits: UsageLimits
) -> int:
    started = time.monotonic()
    sink.start(session.id)
    handle = RunHandle()
    run_task = asyncio.create_task(_run_in(agent, session, prompt, sink, handle, limits))
    stopped_by: list[Status] = []
    loop = asyncio.get_running_loop()
    stops: tuple[tuple[int, Status], ...] = ((signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated"))
    for signum, status in stops:
        loop.add_signal_handler(signum, _stop, run_task, stopped_by, status)
    result: AgentRunResult[str] | None = None
    error: BaseException | None = None
    try:
        result = await run_task
    except (asyncio.CancelledError, AgentRunError, UserError) as exc:
        error = exc
    finally:
        for signum, _ in stops:
            loop.remove_signal_handler(signum)
    outcome = await finish_run(session, prompt, result, error, handle, stopped_by, started)
    sink.finish(outcome)
    return EXIT_CODES[outcome.status]


async def _run_in(
    agent: Agent[None, str], session: Session, prompt: str, sink: EventSink, handle: RunHandle, limits: UsageLimits
) -> AgentRunResult[str]:
    async with agent:  # closes the provider's HTTP client when the run ends
        return await stream_run(
            agent, prompt, sink, handle=handle, message_history=session.messages, usage_limits=limits
        )


def _stop(run_task: asyncio.Task[AgentRunResult[str]], stopped_by: list[Status], status: Status) -> None:
    stopped_by.append(status)
    run_task.cancel()


async def finish_run(
    session: Session,
    prompt: str,
    result: AgentRunResult[str] | None,
    error: BaseException | None,
    handle: RunHandle,
    stopped_by: list[Status],
    started: float,
) -> RunOutcome:
    """Where every headless run ends: its history written back, then the outcome the sink reports."""
    if result is not None:
        await persist_result_history(session, result)
    else:
        run_id = handle.run.run_id if handle.run is not None else None
        messages = handle.completed_messages(error)
        await persist_checkpoint(session, messages, prompt=prompt, run_id=run_id, usage=handle.usage())
    if session.notice:
        print(f"code-puppy: {session.notice}", file=sys.stderr)
    status: Status
    message: str | None = None
    if result is not None:
        status = "success"
    elif isinstance(error, asyncio.CancelledError):
        status = stopped_by[0] if stopped_by else "interrupted"
        message = status
    elif isinstance(error, UsageLimitExceeded):
        status, message = "limit", f"stopped by a limit: {error}"
    elif isinstance(error, HistoryProcessingError):  # the class says whether the output was invalid or it crashed
        status, message = "error", f"run failed: {type(error).__name__} {_describe(error)}"
    else:
        status, message = "error", f"run failed: {_describe(error)}"
    run_usage = result.usage if result is not None else handle.usage()
    return RunOutcome(
        session_id=session.id,
        output=result.output if result is not None else None,
        status=status,
        usage=Usage(run_usage.input_tokens, run_usage.output_tokens, run_usage.requests),
        duration_ms=round((time.monotonic() - started) * 1000),
        error=message,
    )


def _describe(error: BaseException | None) -> str:
    text = " ".join(str(error).split()) if error is not None else "unknown error"
    return text if len(text) <= 300 else text[:297] + "…"
