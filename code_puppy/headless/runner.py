"""`code-puppy -p`: one turn on the shared run path, its output in the chosen format, its end as an exit code."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from pydantic_ai.usage import RunUsage

from code_puppy.agents.deps import RunDeps
from code_puppy.agents.steering import SteeringInbox, accepting_steers, held_steers
from code_puppy.config import ConfigError
from code_puppy.core.events import EXIT_CODES, EventSink, RunOutcome, Status, Usage, ending
from code_puppy.core.project import Project
from code_puppy.core.run import TurnLimits, TurnOutcome, run_turn, unrun_follow_up_note
from code_puppy.errors import one_line
from code_puppy.headless.sinks import SINKS
from code_puppy.options import RunOptions
from code_puppy.sessions.runs import RunRegistry


@dataclass(frozen=True, kw_only=True)
class HeadlessOptions:
    """What the command line asked of one headless invocation, beyond the `RunOptions` every front end has."""

    prompt: str
    timeout: float | None = None
    """Seconds the whole invocation may take (`--timeout`); `[run] timeout` when not given."""
    output_format: str = "text"
    input_format: str = "text"
    """`stream-json`: further user messages arrive as JSON lines on stdin and steer the running turn."""


def run_headless(options: RunOptions, headless: HeadlessOptions) -> int:
    """Resolve config, model and session (exit 2 when one is bad, before anything is sent), then run one turn.

    With `--output-format json` or `stream-json`, a failure that stops the invocation still ends its output with the
    result object (`"status": "error"`), before the error propagates to its one line on stderr.
    """
    started = time.monotonic()
    try:
        return asyncio.run(_headless(options, headless, started))
    except Exception as exc:
        if headless.output_format != "text":
            message = str(exc) if isinstance(exc, ConfigError) else f"internal error: {one_line(exc, typed=True)}"
            duration = round((time.monotonic() - started) * 1000)
            SINKS[headless.output_format]().finish(RunOutcome(None, None, "error", Usage(), duration, message))
        raise


async def _headless(options: RunOptions, headless: HeadlessOptions, started: float) -> int:
    project = Project(options)
    try:
        session, recovered = await project.open_session()
        if recovered:
            print(f"code-puppy: note: {recovered}", file=sys.stderr)
        deps = RunDeps(session)
        sink: EventSink = SINKS[headless.output_format]()
        sink.start(session.id)
        if headless.input_format == "stream-json":
            from code_puppy.headless.stdin_messages import read_messages

            loop = asyncio.get_running_loop()
            # Delivered on the loop's thread, so the turn's last look at the inbox and its closing can't miss one.
            read_messages(sys.stdin, lambda text: loop.call_soon_threadsafe(_steer_or_report, deps.steering, text))
        limits = TurnLimits(
            max_requests=options.max_requests,
            max_continuations=project.settings.plugins.max_continuations,
            timeout=headless.timeout or project.settings.run.timeout,
            idle_timeout=project.settings.run.idle_timeout,
        )
        finished: list[TurnOutcome] = []

        async def turn() -> TurnOutcome:
            # Inside the task the signals cancel: the plugins and the agent (MCP servers, the provider's HTTP
            # client) start and stop in it, so a signal while they do still ends in a report.
            async with accepting_steers(RunRegistry(project.store.database), session.id, project.root, deps.steering):
                await project.start()
                finished.append(
                    await run_turn(
                        project.agent,
                        deps,
                        headless.prompt,
                        sink,
                        model=project.model(),
                        limits=limits,
                        follow_up=held_steers(deps.steering, sink.event),
                        plugins=project.plugins,
                    )
                )
                deps.steering.close()
                await project.stop()
            return finished[0]

        outcome, stopped_by = await _with_signals(turn, finished)
    finally:
        await project.close()
    if session.notice:
        print(f"code-puppy: {session.notice}", file=sys.stderr)
    if outcome.unrun_follow_up:
        note = unrun_follow_up_note(outcome.unrun_follow_up, limits.max_continuations)
        print(f"code-puppy: note: {note}", file=sys.stderr)
    status, message = ending(outcome, stopped_by=stopped_by)
    usage = Usage(outcome.usage.input_tokens, outcome.usage.output_tokens, outcome.usage.requests)
    sink.finish(
        RunOutcome(
            session_id=session.id,
            output=outcome.result.output if outcome.error is None and outcome.result is not None else None,
            status=status,
            usage=usage,
            duration_ms=round((time.monotonic() - started) * 1000),
            error=message,
        )
    )
    return EXIT_CODES[status]


async def _with_signals(
    turn: Callable[[], Coroutine[Any, Any, TurnOutcome]], finished: list[TurnOutcome]
) -> tuple[TurnOutcome, Status | None]:
    """Run the turn as a task that SIGINT and SIGTERM cancel; its outcome and the first signal that came."""
    task = asyncio.create_task(turn())
    stopped_by: list[Status] = []
    loop = asyncio.get_running_loop()
    stops: tuple[tuple[int, Status], ...] = ((signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated"))
    for signum, status in stops:
        loop.add_signal_handler(signum, _stop, task, stopped_by, status)
    try:
        outcome = await task
    except asyncio.CancelledError as exc:
        # The signal came while plugins or MCP servers were starting or stopping, outside the run: a turn that had
        # already ended (and been saved) keeps its outcome; otherwise nothing was sent.
        outcome = finished[0] if finished else TurnOutcome(None, exc, RunUsage(), 0)
    finally:
        for signum, _ in stops:
            loop.remove_signal_handler(signum)
    return outcome, stopped_by[0] if stopped_by else None


def _steer_or_report(inbox: SteeringInbox, text: str) -> None:
    if inbox.steer(text) == "closed":
        print(f"code-puppy: the run is over; not delivered: {text[:60]}", file=sys.stderr, flush=True)


def _stop(task: asyncio.Task[TurnOutcome], stopped_by: list[Status], status: Status) -> None:
    """Cancel the turn on the first signal; later ones only wait for its checkpoint to land."""
    if not stopped_by:
        task.cancel()
    stopped_by.append(status)
