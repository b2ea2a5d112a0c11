"""Headless event sinks: `text` (answer on stdout, progress on stderr), `json` and `stream-json`."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any, TextIO

from pydantic_ai.messages import (
    AgentStreamEvent,
    EnqueuedMessagesEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
)

from code_puppy.core.events import short_result, tool_call_line
from code_puppy.core.plan import PlanView
from code_puppy.run.steering import steered_text
from code_puppy.run.stream_events import (
    RunOutcome,
    plan_event,
    request_event,
    result_event,
    session_event,
    steer_event,
    text_delta,
    thinking_delta,
    tool_call_event,
    tool_result_event,
)
from code_puppy.sessions.costs import RequestCost


class TextSink:
    """Only the final answer on stdout; on stderr, a line per tool call when it starts and one when it ends, in the
    chat's words (`exit 0 · 3 passed`, `denied: …`)."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self._out = out or sys.stdout
        self._err = err or sys.stderr
        self._calls: dict[str, str] = {}
        """The running calls' lines, by call id."""
        self._overlapped = False
        """Whether calls ran at once since nothing was running: their results end in any order, so each names its
        call."""

    def start(self, session_id: str) -> None:
        pass

    def run_started(self, index: int) -> None:
        pass

    def event(self, event: AgentStreamEvent) -> None:
        if isinstance(event, FunctionToolCallEvent):
            line = tool_call_line(event.part.tool_name, event.part.args_as_dict())
            self._calls[event.part.tool_call_id] = line
            self._overlapped = self._overlapped or len(self._calls) > 1
            print(f"⚙ {line}", file=self._err, flush=True)
        elif isinstance(event, FunctionToolResultEvent):
            call = self._calls.pop(event.part.tool_call_id, event.part.tool_name)
            named = f"{call} · " if self._overlapped else ""
            self._overlapped = self._overlapped and bool(self._calls)
            print(f"  ↳ {named}{short_result(event.part.tool_name, event)}", file=self._err, flush=True)
        elif isinstance(event, EnqueuedMessagesEvent):
            print(f"↪ steer: {steered_text(event)}", file=self._err, flush=True)

    def request(self, cost: RequestCost) -> None:
        pass

    def warning(self, text: str) -> None:
        print(f"code-puppy: note: {text}", file=self._err, flush=True)

    def finish(self, outcome: RunOutcome) -> None:
        if outcome.output is not None:
            print(outcome.output, file=self._out, flush=True)
        if outcome.error:
            print(f"code-puppy: {outcome.error}", file=self._err, flush=True)


class JsonSink:
    """One JSON object on stdout when the invocation ends."""

    def __init__(self, out: TextIO | None = None) -> None:
        self._out = out or sys.stdout

    def start(self, session_id: str) -> None:
        pass

    def run_started(self, index: int) -> None:
        pass

    def event(self, event: AgentStreamEvent) -> None:
        pass

    def request(self, cost: RequestCost) -> None:
        pass

    def warning(self, text: str) -> None:
        print(f"code-puppy: note: {text}", file=sys.stderr, flush=True)

    def finish(self, outcome: RunOutcome) -> None:
        print(json.dumps(asdict(outcome)), file=self._out, flush=True)


class StreamJsonSink:
    """One JSON object per line: `session` first, then events, then `result` with the keys of `json`."""

    def __init__(self, out: TextIO | None = None) -> None:
        self._out = out or sys.stdout
        self._run = 0
        self._plan = PlanView()
        """The model's task list, sent whole as a `plan` event after each tool call that changed it."""

    def _emit(self, event: dict[str, Any]) -> None:
        print(json.dumps(event, default=str), file=self._out, flush=True)

    def start(self, session_id: str) -> None:
        self._emit(session_event(session_id))

    def run_started(self, index: int) -> None:
        self._run = index

    def event(self, event: AgentStreamEvent) -> None:
        if self._plan.update(event):
            return
        self._event(event)
        if self._plan.settled(event):
            self._emit(plan_event(self._run, self._plan.as_json()))

    def _event(self, event: AgentStreamEvent) -> None:
        if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart) and event.part.content:
            self._emit(text_delta(self._run, event.part.content))
        elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
            self._emit(text_delta(self._run, event.delta.content_delta))
        elif isinstance(event, PartStartEvent) and isinstance(event.part, ThinkingPart) and event.part.content:
            self._emit(thinking_delta(self._run, event.part.content))
        elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, ThinkingPartDelta):
            if event.delta.content_delta:
                self._emit(thinking_delta(self._run, event.delta.content_delta))
        elif isinstance(event, FunctionToolCallEvent):
            self._emit(tool_call_event(self._run, event.part))
        elif isinstance(event, FunctionToolResultEvent):
            self._emit(tool_result_event(self._run, event.part))
        elif isinstance(event, EnqueuedMessagesEvent):
            self._emit(steer_event(self._run, event.enqueue_id, steered_text(event)))

    def request(self, cost: RequestCost) -> None:
        self._emit(request_event(cost))

    def warning(self, text: str) -> None:
        print(f"code-puppy: note: {text}", file=sys.stderr, flush=True)

    def finish(self, outcome: RunOutcome) -> None:
        self._emit(result_event(outcome))


SINKS = {"text": TextSink, "json": JsonSink, "stream-json": StreamJsonSink}
