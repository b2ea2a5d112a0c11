"""`code-puppy -p`: one turn on the shared run path, its output in the chosen format, its end as an exit code."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import AgentStreamEvent, TextContent
from pydantic_ai.usage import RunUsage

from code_puppy.config import ConfigError
from code_puppy.core.command_lines import run_command_lines
from code_puppy.core.conversation import Conversation
from code_puppy.core.denials import DeniedCalls
from code_puppy.core.events import EXIT_CODES, EventSink, ending
from code_puppy.core.project import Project
from code_puppy.core.turn import TurnOutcome, unrun_follow_up_note
from code_puppy.cost.spending import Spending
from code_puppy.definitions.file_commands import find_command
from code_puppy.errors import one_line
from code_puppy.headless.claude_compat import ClaudeSink
from code_puppy.headless.sinks import SINKS
from code_puppy.mentions import mention_attachments
from code_puppy.options import RunOptions
from code_puppy.paths import write_atomically
from code_puppy.run.replay import replaying
from code_puppy.run.steering import SteeringInbox
from code_puppy.run.stream_events import RunOutcome, Status, Usage
from code_puppy.sessions.costs import CostTotals, RequestCost

if TYPE_CHECKING:
    from code_puppy.durable.system import Launching


@dataclass(frozen=True, kw_only=True)
class HeadlessOptions:
    """What the command line asked of one headless invocation, beyond the `RunOptions` every front end has."""

    prompt: str
    timeout: float | None = None
    """Seconds the whole invocation may take from the process's start, start-up included (`--timeout`); `[run]
    timeout` when not given."""
    output_format: str = "text"
    input_format: str = "text"
    """`stream-json`: further user messages arrive as JSON lines on stdin and steer the running turn."""
    usage_file: Path | None = None
    """Where the `json` result object is written as well, whatever the output format (`--usage-file`)."""
    compat: str | None = None
    """`claude`: `json` and `stream-json` in Claude Code's headless schema (`--compat claude`)."""


def run_headless(options: RunOptions, headless: HeadlessOptions) -> int:
    """Resolve config, model and session (exit 2 when one is bad, before anything is sent), then run one turn.

    With `--output-format json` or `stream-json`, a failure that stops the invocation still ends its output with the
    result object (`"status": "error"`, the session's id once there is one), before the error propagates to its one
    line on stderr.
    """
    output = Output(make_sink(headless), time.monotonic(), usage_file=headless.usage_file)
    return asyncio.run(run_recorded(options, headless, output, _process_started()))


def make_sink(headless: HeadlessOptions) -> EventSink:
    """The sink of the output format asked for."""
    if headless.compat == "claude" and headless.output_format != "text":
        return ClaudeSink(stream=headless.output_format == "stream-json")
    return SINKS[headless.output_format]()


async def run_recorded(
    options: RunOptions,
    headless: HeadlessOptions,
    output: Output,
    process_started: float,
    *,
    base_messages: int | None = None,
) -> int:
    """The invocation, its output ended by a result object even when it fails (`run_headless`). `base_messages`: a
    resumed durable run's history when it started (`headless/durable.py`)."""
    try:
        return await _headless(options, headless, output, process_started, base_messages)
    except Exception as exc:
        if headless.output_format != "text":
            output.fail(str(exc) if isinstance(exc, ConfigError) else f"internal error: {one_line(exc, typed=True)}")
        raise


def _process_started() -> float:
    """When this process started, on the `time.monotonic` clock: from `/proc` where there is one (Linux), else now."""
    now = time.monotonic()
    try:
        with open("/proc/self/stat", "rb") as stat:  # start time: the 20th field after the name's parenthesis
            ticks = int(stat.read().rsplit(b")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - max(0.0, age)


@dataclass
class Output:
    """The invocation's sink, and what its result object needs: the session (once known) and the start time."""

    sink: EventSink
    started: float
    session_id: str | None = None
    spending: Spending | None = None
    """What the invocation spent, once its project is open."""
    usage_file: Path | None = None
    usage_file_error: str | None = None
    denied: DeniedCalls = field(default_factory=DeniedCalls)
    """The calls the run was not allowed to make: the result's `denied` and the closing line."""
    ended: RunOutcome | None = None
    """The result object, once finished."""

    def start(self, session_id: str) -> None:
        self.session_id = session_id
        self.sink.start(session_id)

    def finish(self, status: Status, *, message: str | None, outcome: TurnOutcome | None = None) -> None:
        usage = outcome.usage if outcome is not None else RunUsage()
        result = outcome.result if outcome is not None and outcome.error is None else None
        cost = self.spending.invocation if self.spending is not None else CostTotals()
        ended = RunOutcome(
            session_id=self.session_id,
            output=result.output if result is not None else None,
            status=status,
            usage=Usage(
                usage.input_tokens,
                usage.output_tokens,
                usage.requests,
                usage.cache_read_tokens,
                usage.cache_write_tokens,
            ),
            duration_ms=round((time.monotonic() - self.started) * 1000),
            error=message,
            cost_usd=cost.cost_usd,
            cost_complete=cost.complete,
            denied=self.denied.count,
        )
        self.ended = ended
        self.sink.finish(ended)
        if self.usage_file is not None:
            try:
                write_atomically(self.usage_file, json.dumps(asdict(ended)) + "\n")
            except OSError as exc:
                self.usage_file_error = f"--usage-file: cannot write {self.usage_file}: {exc.strerror or exc}"
                print(f"code-puppy: {self.usage_file_error}", file=sys.stderr)

    def fail(self, message: str) -> None:
        self.finish("error", message=message)


async def _headless(
    options: RunOptions,
    headless: HeadlessOptions,
    output: Output,
    process_started: float,
    base_messages: int | None = None,
) -> int:
    project = Project(options)
    output.spending = project.spending
    launching: Launching | None = None
    if options.durable_run is None and (options.durable or project.settings.run.durable):
        from code_puppy.durable.system import Launching

        # DBOS is imported and launched beside the project's start: neither waits for the other.
        launching = Launching(debug=options.debug, register=_register_workflow)
        project.durable = True
    if isinstance(output.sink, ClaudeSink):
        output.sink.project = project
    try:
        if project.checkpoint_note:
            print(f"code-puppy: note: {project.checkpoint_note}", file=sys.stderr)
        session, recovered = await project.open_session()
        if recovered:
            print(f"code-puppy: note: {recovered}", file=sys.stderr)
        if base_messages is not None and len(session.messages) > base_messages:
            # The resumed run's turn was saved before its process died: it replays on the history it started from,
            # and its save branches off that one (the turn is in the session once).
            session.go_back_to(base_messages)
        conversation = Conversation(project, session, project.model_name)
        output.start(session.id)
        if headless.input_format == "stream-json":
            from code_puppy.headless.stdin_messages import read_messages

            loop = asyncio.get_running_loop()
            # Delivered on the loop's thread, so the turn's last look at the inbox and its closing can't miss one.
            inbox = conversation.inbox
            read_messages(sys.stdin, lambda text: loop.call_soon_threadsafe(_steer_or_report, inbox, text))
        timeout = headless.timeout or project.settings.run.timeout
        sink = _Counting(output.sink, output.denied)
        turn = _turn(conversation, headless.prompt, sink, timeout, started=process_started)
        if launching is not None:
            from code_puppy.headless.durable import inputs_of, start

            session.list_now()

            inputs = inputs_of(
                options,
                session_id=session.id,
                base_messages=len(session.messages),
                model=conversation.model_name,
                mode=project.mode,
                headless=headless,
            )
            turn = start(inputs, turn, launching)
        outcome, stopped_by = await _with_signals(turn)
    finally:
        await project.close()
    if session.notice:
        print(f"code-puppy: {session.notice}", file=sys.stderr)
    if outcome.checkpoint_note:
        print(f"code-puppy: note: {outcome.checkpoint_note}", file=sys.stderr)
    if outcome.unrun_follow_up:
        note = unrun_follow_up_note(outcome.unrun_follow_up, project.settings.plugins.max_continuations)
        print(f"code-puppy: note: {note}", file=sys.stderr)
    status, message = ending(outcome, stopped_by=stopped_by)
    if options.debug and status == "error" and isinstance(outcome.error, Exception):
        traceback.print_exception(outcome.error, file=sys.stderr)
    output.finish(status, message=message, outcome=outcome)
    if closing := output.denied.closing_line(project.mode):
        print(f"code-puppy: {closing}", file=sys.stderr, flush=True)
    if output.usage_file_error is not None and status == "success":
        return EXIT_CODES["error"]
    return EXIT_CODES[status]


async def _turn(
    conversation: Conversation, prompt: str, sink: EventSink, timeout: float | None, *, started: float
) -> TurnOutcome:
    """The turn, in the task the signals cancel: the plugins and the agent (MCP servers, the provider's HTTP client)
    start and stop in it too, so a signal while they do still ends in a report. `timeout` counts from `started`, the
    process's start: loading the config, the plugins and the store, and starting the MCP servers are part of it."""
    project = conversation.project
    # A cancel from outside (`code-puppy steer --cancel`, the dashboard) ends the turn as a SIGINT does: the same
    # ending, output and exit. Off the main thread (a fleet worker's run, a resumed durable run, on DBOS's loop) a real
    # SIGINT would reach the whole process (a worker would drain): the turn's task is stopped as its handler would.
    on_main = threading.current_thread() is threading.main_thread()
    cancel = (lambda: signal.raise_signal(signal.SIGINT)) if on_main else _INTERRUPT.get()
    async with conversation.steerable(cancel=cancel):
        starting = asyncio.timeout(None if timeout is None else started + timeout - time.monotonic())
        try:
            async with starting:
                await project.start()
        except TimeoutError:
            if not starting.expired():
                raise
            return TurnOutcome(None, TimeoutError(f"{timeout:g} s"), RunUsage(), 0)  # nothing was sent
        attachments: list[TextContent] = []
        # A prompt that starts with a file command's `/name` runs it; any other `/word` is sent as it is.
        command = None
        if (found := find_command(project.root, prompt)) is not None:
            command, arguments = found
            prompt = command.expand(arguments)
            attachments = mention_attachments(prompt, project.root)[0]
        with conversation.command(command, warn=sink.warning) as model:
            if command is not None:
                prompt = await run_command_lines(conversation, command, prompt, ask=None, warn=sink.warning)
            outcome = await conversation.turn(
                prompt, sink, model=model, attachments=attachments, timeout=timeout, timeout_from=started
            )
        conversation.inbox.close()
        # The turn is over and saved: a signal while the servers stop ends the process, not the outcome.
        with contextlib.suppress(asyncio.CancelledError):
            await project.stop()
    return outcome


async def _with_signals(turn: Coroutine[Any, Any, TurnOutcome]) -> tuple[TurnOutcome, Status | None]:
    """Run the turn as a task that SIGINT and SIGTERM cancel; its outcome and the first signal that came."""
    stopped_by: list[Status] = []
    loop = asyncio.get_running_loop()
    made: list[asyncio.Task[TurnOutcome]] = []
    # What a cancel from outside calls when no signal may be sent (`_turn`): set in the context the task copies.
    token = _INTERRUPT.set(lambda: loop.call_soon_threadsafe(_stop, made[0], stopped_by, "interrupted"))
    try:
        task = asyncio.create_task(turn)
    finally:
        _INTERRUPT.reset(token)
    made.append(task)
    stops: tuple[tuple[int, Status], ...] = ((signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated"))
    if threading.current_thread() is not threading.main_thread():
        stops = ()  # a resumed durable run, on DBOS's loop: the main thread hears the signals
    for signum, status in stops:
        loop.add_signal_handler(signum, _stop, task, stopped_by, status)
    try:
        outcome = await task
    except asyncio.CancelledError as exc:
        # The signal came while the plugins or the agent were starting, before any run: nothing was sent.
        outcome = TurnOutcome(None, exc, RunUsage(), 0)
    finally:
        for signum, _ in stops:
            loop.remove_signal_handler(signum)
    return outcome, stopped_by[0] if stopped_by else None


@dataclass
class _Counting:
    """The invocation's sink, with the denied calls counted on their way to it."""

    sink: EventSink
    denied: DeniedCalls

    def start(self, session_id: str) -> None:
        self.sink.start(session_id)

    def run_started(self, index: int) -> None:
        self.sink.run_started(index)

    def event(self, event: AgentStreamEvent) -> None:
        if replaying():
            return  # shown by the process that first ran the step (a resumed durable run)
        self.denied.note(event)
        self.sink.event(event)

    def request(self, cost: RequestCost) -> None:
        self.sink.request(cost)

    def warning(self, text: str) -> None:
        self.sink.warning(text)

    def finish(self, outcome: RunOutcome) -> None:
        self.sink.finish(outcome)


def _register_workflow() -> None:
    """Register the durable run's workflow with DBOS, and import what the agent's build needs of DBOS (~0.4 s) here
    rather than while the project starts."""
    importlib.import_module("code_puppy.headless.durable")
    importlib.import_module("pydantic_ai.durable_exec.dbos")


def _steer_or_report(inbox: SteeringInbox, text: str) -> None:
    if inbox.steer(text) == "closed":
        print(f"code-puppy: the run is over; not delivered: {text[:60]}", file=sys.stderr, flush=True)


_INTERRUPT: contextvars.ContextVar[Callable[[], object] | None] = contextvars.ContextVar("interrupt", default=None)
"""Within a turn's task: what ends it as an interrupt (`_with_signals`)."""


def _stop(task: asyncio.Task[TurnOutcome], stopped_by: list[Status], status: Status) -> None:
    """Cancel the turn on the first signal; later ones only wait for its checkpoint to land."""
    if not stopped_by:
        task.cancel()
    stopped_by.append(status)
