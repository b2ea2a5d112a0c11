"""The chat's event sink: streamed answers as markdown blocks, one line per tool call, file edits as diffs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    AgentStreamEvent,
    EnqueuedMessagesEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
)
from pydantic_ai.usage import RunUsage
from pydantic_ai_harness.filesystem import FileChangeRequestEvent
from rich.markdown import Markdown
from rich.text import Text

from code_puppy.chat.live import Live, Screen
from code_puppy.core.events import RunOutcome, short_result, tool_call_line
from code_puppy.core.plan import PlanView
from code_puppy.run.steering import steered_text
from code_puppy.sessions.costs import RequestCost

_FENCE = re.compile(r"^\s*(```|~~~)")
_PADDING = re.compile(r" +((?:\x1b\[[0-9;]*m)*)\n")
_LEADING_BLANKS = re.compile(r"\A(?:(?:\x1b\[[0-9;]*m)*[ ]*(?:\x1b\[[0-9;]*m)*\n)+")


class MarkdownStream:
    """Cuts streamed text into markdown blocks that can be rendered once complete: paragraphs, lists, fenced code.

    A block is complete at a blank line outside a code fence, or when its fence closes. `partial` is the line
    being written, shown live until it ends.
    """

    def __init__(self) -> None:
        self.partial = ""
        self._lines: list[str] = []
        self._in_fence = False

    def feed(self, chunk: str) -> list[str]:
        """Add streamed text; return the blocks it completed."""
        *lines, self.partial = (self.partial + chunk).split("\n")
        blocks: list[str] = []
        for line in lines:
            fence = bool(_FENCE.match(line))
            if fence:
                self._in_fence = not self._in_fence
            if not line.strip() and not self._in_fence:
                blocks += self._take()
                continue
            self._lines.append(line)
            if fence and not self._in_fence:
                blocks += self._take()
        return blocks

    def flush(self) -> list[str]:
        """The rest, partial line included, as a last block."""
        if self.partial:
            self._lines.append(self.partial)
            self.partial = ""
        self._in_fence = False
        return self._take()

    def _take(self) -> list[str]:
        block, self._lines = "\n".join(self._lines).strip("\n"), []
        return [block] if block.strip() else []


def diff_text(diff: str) -> Text:
    """A unified diff coloured per line: additions green, removals red, hunks cyan."""
    text = Text()
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            style = "bold"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        elif line.startswith("@@"):
            style = "cyan"
        else:
            style = "dim"
        text.append(line + "\n", style=style)
    text.rstrip()
    return text


class ChatSink:
    """Renders one job's events above the prompt and keeps the live region current.

    `diff_shown` holds project-relative paths whose diff was already shown at an approval prompt, so it is not
    printed again when the approved change is made.
    """

    def __init__(self, screen: Screen, live: Live, project_root: Path) -> None:
        self.screen = screen
        self.live = live
        self.project_root = project_root
        self._plan = PlanView()
        self.diff_shown: set[str] = set()
        self._markdown = MarkdownStream()
        self._printed_text = False
        self._calls: dict[str, tuple[str, dict[str, Any]]] = {}
        self._diffs: dict[str, str] = {}

    def start(self, session_id: str) -> None:
        pass

    def run_started(self, index: int) -> None:
        self.live.activity = "waiting for the model"

    def finish(self, outcome: RunOutcome) -> None:
        pass

    def request(self, cost: RequestCost) -> None:
        self.screen.invalidate()  # the bottom bar shows the session's cost

    def warning(self, text: str) -> None:
        self.flush_text()
        self.screen.print(Text(text, style="yellow"))
        self._printed_text = False

    def event(self, event: AgentStreamEvent) -> None:
        if self._plan.update(event):
            self.live.plan = self._plan.lines()
        elif isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
            self._text(event.part.content)
        elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
            self._text(event.delta.content_delta)
        elif isinstance(event, PartEndEvent) and isinstance(event.part, TextPart):
            self.flush_text()
        elif (isinstance(event, PartStartEvent) and isinstance(event.part, ThinkingPart)) or (
            isinstance(event, PartDeltaEvent) and isinstance(event.delta, ThinkingPartDelta)
        ):
            self.live.activity = "thinking"
        elif isinstance(event, FunctionToolCallEvent):
            self.flush_text()
            args = event.part.args_as_dict()
            self._calls[event.part.tool_call_id] = (event.part.tool_name, args)
            self.live.activity = f"running {tool_call_line(event.part.tool_name, args)}"
        elif isinstance(event, FileChangeRequestEvent):
            if event.path in self.diff_shown:
                self.diff_shown.discard(event.path)
            elif event.diff:
                self._diffs[event.path] = event.diff
        elif isinstance(event, FunctionToolResultEvent):
            self._result(event)
        elif isinstance(event, EnqueuedMessagesEvent):
            self.flush_text()
            self.screen.print(Text(f"↪ steer: {steered_text(event)}", style="magenta"))
            self._printed_text = False
            self.live.activity = "waiting for the model"
        self.screen.invalidate()

    def flush_plan(self) -> None:
        """Once the turn is over: its plan as it ended, kept above the prompt; the live checklist goes."""
        if lines := self._plan.lines():
            self.screen.print(Text("\n".join(f"  {line}" for line in lines), style="dim"))
        self.live.plan = []

    def flush_text(self) -> None:
        self._print_blocks(self._markdown.flush())
        self.live.partial = ""

    def _text(self, chunk: str) -> None:
        self.live.activity = "writing"
        self._print_blocks(self._markdown.feed(chunk))
        self.live.partial = self._markdown.partial

    def _print_blocks(self, blocks: list[str]) -> None:
        for block in blocks:
            # Blocks are rendered one at a time, so the blank line between them is ours to print; rich's own
            # leading blank lines (lists, code) and the padding to the full width are not wanted.
            rendered = _PADDING.sub(r"\1\n", self.screen.render(Markdown(block)))
            self.screen.write(("\n" if self._printed_text else "") + _LEADING_BLANKS.sub("", rendered))
            self._printed_text = True

    def _result(self, event: FunctionToolResultEvent) -> None:
        name, args = self._calls.pop(event.part.tool_call_id, (event.part.tool_name, {}))
        outcome = getattr(event.part, "outcome", "success")
        line = Text("⚙ ", style="cyan")
        line.append(tool_call_line(name, args), style="bold")
        line.append(f" · {short_result(name, event)}", style="dim" if outcome == "success" else "yellow")
        items: list[Any] = [line]
        path = self._relative(args.get("path"))
        diff = self._diffs.pop(path, None) if path is not None else None
        self.diff_shown.discard(path or "")  # a denied change never reached the file system
        if diff and outcome == "success":
            items.append(diff_text(diff))
        self.screen.print(*items)
        self._printed_text = False
        self.live.activity = f"running {len(self._calls)} tool calls" if self._calls else "waiting for the model"

    def _relative(self, path: object) -> str | None:
        if not isinstance(path, str) or not path:
            return None
        target = (self.project_root / path).resolve()
        try:
            return target.relative_to(self.project_root).as_posix()
        except ValueError:
            return None


def describe_usage(usage: RunUsage, seconds: float) -> str:
    """`3.2s · 2 requests · 1.2k in / 300 out` for the line under a finished turn."""
    requests = f"{usage.requests} request{'s' if usage.requests != 1 else ''}"
    return f"{seconds:.1f}s · {requests} · {thousands(usage.input_tokens)} in / {thousands(usage.output_tokens)} out"


def thousands(count: int) -> str:
    """A token count as the chat shows it: `12.3k`, or the number itself under a thousand."""
    return f"{count / 1000:.1f}k" if count >= 1000 else str(count)
