"""The run path: every run goes through `stream_run`; headless invocations end in `finish_run`."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.agent import AgentRun, AgentRunResult
from pydantic_ai.exceptions import AgentRunError, UsageLimitExceeded, UserError
from pydantic_ai.messages import ModelMessage
from pydantic_ai.usage import RunUsage, UsageLimits

from code_puppy.agents.builder import build_pydantic_agent
from code_puppy.config import ConfigError, PermissionMode, load_settings
from code_puppy.models import choose_model_name, resolve_model
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
    no_mcp: bool = False


@dataclass
class RunHandle:
    """The run in progress, for what callers need of it even when it fails: its usage so far."""

    run: AgentRun[None, str] | None = None

    def usage(self) -> RunUsage:
        return self.run.usage if self.run is not None else RunUsage()


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
    async with agent.iter(prompt, message_history=message_history, usage_limits=usage_limits) as run:
        if handle is not None:
            handle.run = run
        async for node in run:
            if Agent.is_model_request_node(node) or Agent.is_call_tools_node(node):
                async with node.stream(run.ctx) as events:
                    async for event in events:
                        sink.event(event)
        assert run.result is not None  # the loop only ends on End
        return run.result


def run_headless(options: HeadlessOptions) -> int:
    """Resolve config and model (exit 2 on a bad one, before anything is sent), run once, return the exit code."""
    settings = load_settings(options.project_root)
    if options.no_mcp:
        settings = settings.model_copy(update={"mcp_servers": {}})
    model_name = choose_model_name(settings, options.model)
    model = resolve_model(settings, model_name)
    agent = build_pydantic_agent(
        settings,
        model=model,
        project_root=options.project_root,
        permission_mode=options.permission_mode,
        allow=options.allow,
    )
    sink: EventSink = SINKS[options.output_format]()
    limits = UsageLimits(request_limit=options.max_requests)
    return asyncio.run(_headless(agent, options.prompt, sink, limits))


async def _headless(agent: Agent[None, str], prompt: str, sink: EventSink, limits: UsageLimits) -> int:
    import uuid

    session_id = str(uuid.uuid4())
    started = time.monotonic()
    sink.start(session_id)
    handle = RunHandle()
    run_task = asyncio.create_task(_run_in(agent, prompt, sink, handle, limits))
    stopped_by: list[Status] = []
    loop = asyncio.get_running_loop()
    stops: tuple[tuple[int, Status], ...] = ((signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated"))
    for signum, status in stops:
        loop.add_signal_handler(signum, _stop, run_task, stopped_by, status)
    result: AgentRunResult[str] | None = None
    error: BaseException | None = None
    try:
        result = await run_task
    except asyncio.CancelledError as exc:
        error = exc
    except (AgentRunError, UserError) as exc:
        error = exc
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    outcome = finish_run(session_id, result, error, stopped_by, started, run_usage=handle.usage())
    sink.finish(outcome)
    return EXIT_CODES[outcome.status]


async def _run_in(
    agent: Agent[None, str], prompt: str, sink: EventSink, handle: RunHandle, limits: UsageLimits
) -> AgentRunResult[str]:
    async with agent:  # closes the provider's HTTP client and stops the MCP servers when the run ends
        return await stream_run(agent, prompt, sink, handle=handle, usage_limits=limits)


def _stop(run_task: asyncio.Task[Any], stopped_by: list[Status], status: Status) -> None:
    stopped_by.append(status)
    run_task.cancel()


def finish_run(
    session_id: str,
    result: AgentRunResult[str] | None,
    error: BaseException | None,
    stopped_by: list[Status],
    started: float,
    *,
    run_usage: RunUsage,
) -> RunOutcome:
    """Where every headless run ends, successful or not: the outcome the sink reports and the exit code follows."""
    status: Status
    message: str | None = None
    if result is not None:
        status = "success"
    elif isinstance(error, asyncio.CancelledError):
        status = stopped_by[0] if stopped_by else "interrupted"
        message = "interrupted" if status == "interrupted" else "terminated"
    elif isinstance(error, UsageLimitExceeded):
        status, message = "limit", f"stopped by a limit: {error}"
    else:
        status, message = "error", f"run failed: {_describe(error)}"
    usage = Usage(run_usage.input_tokens, run_usage.output_tokens, run_usage.requests)
    return RunOutcome(
        session_id=session_id,
        output=result.output if result is not None else None,
        status=status,
        usage=usage,
        duration_ms=round((time.monotonic() - started) * 1000),
        error=message,
    )


def _describe(error: BaseException | None) -> str:
    text = " ".join(str(error).split()) if error is not None else "unknown error"
    return text if len(text) <= 300 else text[:297] + "…"


__all__ = ["ConfigError", "HeadlessOptions", "run_headless", "stream_run"]
