"""What the run path tells a front end: the sink protocol, how a turn ended (its result object, `RunOutcome`, is
`run/stream_events.py`'s), and one-line descriptions of both."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any, Protocol

from pydantic_ai.exceptions import AgentRunError, UsageLimitExceeded
from pydantic_ai.messages import AgentStreamEvent, FunctionToolResultEvent

from code_puppy.errors import one_line
from code_puppy.history.errors import HistoryProcessingError
from code_puppy.plugins import PromptBlocked, TurnStopped
from code_puppy.run.stream_events import RunOutcome, Status
from code_puppy.sessions.costs import RequestCost
from code_puppy.terminal_text import printable

if TYPE_CHECKING:
    from code_puppy.core.turn import TurnOutcome

EXIT_CODES: dict[Status, int] = {"success": 0, "error": 1, "limit": 3, "interrupted": 130, "terminated": 143}


class RequestsSpent(UsageLimitExceeded):
    """The turn made the model requests `--max-requests` allows, and needs another."""

    def __init__(self, limit: int) -> None:
        requests = "1 model request" if limit == 1 else f"{limit} model requests"
        # Past `UsageLimitExceeded`'s own constructor: it appends a pointer to pydantic-ai's docs.
        AgentRunError.__init__(self, f"stopped after {requests} (--max-requests {limit})")


class EventSink(Protocol):
    """Receives what one invocation produces, in order: start, events, finish."""

    def start(self, session_id: str) -> None: ...

    def run_started(self, index: int) -> None:
        """A run of the turn begins: 0 for the prompt's run, then one per follow-up."""
        ...

    def event(self, event: AgentStreamEvent) -> None: ...

    def request(self, cost: RequestCost) -> None:
        """A model request finished (a delegated run's and a compaction summary's too): what it used and cost."""
        ...

    def warning(self, text: str) -> None:
        """Something the user should know now, e.g. that 80% of a budget is spent."""
        ...

    def finish(self, outcome: RunOutcome) -> None: ...


def ending(outcome: TurnOutcome, *, stopped_by: Status | None = None) -> tuple[Status, str | None]:
    """How a turn ended, as a status and the one line that says why (None for a success).

    `stopped_by` is the signal that cancelled the turn, when the front end knows it (`interrupted` otherwise).
    """
    error = outcome.error
    status: Status
    message: str | None = None
    if error is None:
        status = "success"
    elif isinstance(error, asyncio.CancelledError):
        status = stopped_by or "interrupted"
        message = status
    elif isinstance(error, PromptBlocked):
        status, message = "error", f"prompt blocked by plugin {error.plugin}: {error.reason}"
    elif isinstance(error, TurnStopped):
        status, message = "error", f"stopped by plugin {error.plugin}: {error.reason}"
    elif isinstance(error, RequestsSpent):
        status, message = "limit", str(error)
    elif isinstance(error, UsageLimitExceeded):
        status, message = "limit", f"stopped by a limit: {error}"
    elif isinstance(error, TimeoutError):
        status, message = "limit", f"stopped by a limit: timeout ({error})"
    elif isinstance(error, HistoryProcessingError):  # the class says whether the output was invalid or it crashed
        status, message = "error", f"run failed: {type(error).__name__} {one_line(error)}"
    else:
        status, message = "error", f"run failed: {one_line(error)}"
    if outcome.unsaved is not None:
        status = "error" if status == "success" else status
        message = "; ".join(filter(None, (message, str(outcome.unsaved))))
    return status, message


def tool_call_line(name: str, args: dict[str, Any]) -> str:
    """`name(first-arg)` cut to one short line, e.g. `read_file(src/app.py)` or `shell(pytest -q)`; control characters
    spelled (`\x1b`), so a command cannot repaint its own line."""
    shown = next((str(value) for value in args.values()), "") if args else ""
    shown = printable(" ".join(shown.split()), spelled=True)
    return f"{name}({shown[:77] + '…' if len(shown) > 80 else shown})"


_SHELL_HANDLES = re.compile(r"^PID: \d+ ", re.MULTILINE)
_SHELL_STATUS = re.compile(r'\{"pid": \d+, "exit_code": (-?\d+|null)\}\s*$')
_READ_HEADER = re.compile(r"\[[^\]|]*\| ([^\]]*)\]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`])")


def tool_result_line(event: FunctionToolResultEvent) -> str:
    """The first line of a tool result, short; denials and failures say so, and a denial keeps its first sentence
    whole (what was denied and why; the advice to the model after it is left out)."""
    text = event.part.model_response_str() if hasattr(event.part, "model_response_str") else str(event.part.content)
    first = text.strip().splitlines()[0] if text.strip() else ""
    outcome = getattr(event.part, "outcome", "success")
    if outcome == "denied":
        return f"denied: {_SENTENCE_END.split(first, maxsplit=1)[0]}"
    prefix = "" if outcome == "success" else f"{outcome}: "
    return prefix + (first[:97] + "…" if len(first) > 100 else first)


def short_result(name: str, event: FunctionToolResultEvent) -> str:
    """A few words on how a tool call went, as the chat and headless progress show it: `42 lines`,
    `exit 0 · 3 passed`, `denied: …`; a shell result's process handles are left out."""
    part = event.part
    if getattr(part, "outcome", "success") != "success":
        return tool_result_line(event)
    content = part.model_response_str()
    if name == "shell":
        status = _SHELL_STATUS.search(content)
        output = _SHELL_HANDLES.split(content, maxsplit=1)[0].strip()
        last = printable(output.splitlines()[-1], spelled=True) if output else ""
        code = status.group(1) if status else "?"
        exit_text = "still running" if code == "null" else f"exit {code}"
        return f"{exit_text} · {last[:80]}" if last else exit_text
    if name == "read_file" and (header := _READ_HEADER.match(content)):
        return header.group(1)
    if name in ("grep", "list_files"):
        count = len(content.splitlines())
        return f"{count} line{'s' if count != 1 else ''}"
    return tool_result_line(event)
