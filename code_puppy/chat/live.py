"""The chat's screen: finished output printed above the live prompt, and the live region inside the prompt.

Approach C of terminal-notes.md: one long-lived prompt; whatever is finished (markdown blocks, tool lines, diffs)
is rendered once to ANSI and written above it with `run_in_terminal`, pending writes combined once per loop tick;
the line still streaming and the spinner live in the prompt's message, so typing is never disturbed.
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Generator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from prompt_toolkit import PromptSession
from prompt_toolkit.application import run_in_terminal

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


@dataclass
class Live:
    """What the live region shows while a job runs."""

    started: float | None = None
    """When the job started (monotonic); None when idle."""
    activity: str = ""
    """What it is doing: `waiting for the model`, `writing`, `running shell(pytest)`…"""
    partial: str = ""
    """The line of the answer still being written."""
    plan: list[str] = field(default_factory=list[str])
    """The model's task list, one checklist line per step, while the turn runs."""
    waiting_since: float | None = None
    """When the job began waiting for the user's answer to a question (monotonic); None when it is not waiting."""
    waited: float = 0.0
    """Seconds the job has spent waiting for the user's answers: not its own time."""

    def elapsed(self) -> float:
        """The job's own time so far: since it started, less its waits for the user."""
        if self.started is None:
            return 0.0
        return (self.waiting_since or time.monotonic()) - self.started - self.waited

    def spinner_line(self, *notes: str) -> str:
        """`⠇ writing  1.9s · 1 queued`, or `… waiting for your answer` while a question waits; empty when idle."""
        if self.started is None:
            return ""
        if self.waiting_since is not None:
            return " · ".join(["… waiting for your answer", *notes])
        elapsed = self.elapsed()
        frame = SPINNER[int(elapsed * 10) % len(SPINNER)]
        return " · ".join([f"{frame} {self.activity or 'working'}  {elapsed:.1f}s", *notes])

    @contextmanager
    def waiting(self) -> Generator[None]:
        """The job waits for the user's answer: the spinner says so, and the wait is left out of its time."""
        self.waiting_since = time.monotonic()
        try:
            yield
        finally:
            self.waited += time.monotonic() - self.waiting_since
            self.waiting_since = None


class Screen:
    """Writes above the prompt of `session`; safe to call from the event loop's thread only."""

    def __init__(self, session: PromptSession[str]) -> None:
        self.session = session
        self._pending: list[str] = []
        self._scheduled = False
        self._written: asyncio.Future[None] | None = None

    @property
    def width(self) -> int:
        try:
            return max(20, self.session.output.get_size().columns)
        except Exception:  # no terminal size (not a tty): a sane default
            return 100

    def render(self, *items: Any) -> str:
        """Rich renderables or markup-free strings as ANSI text, each ending in a newline."""
        from rich.console import Console

        console = Console(
            file=io.StringIO(),
            force_terminal=True,
            color_system="256",
            width=self.width,
            highlight=False,
            soft_wrap=False,
        )
        for item in items:
            console.print(item, markup=False) if isinstance(item, str) else console.print(item)
        return console.file.getvalue()  # type: ignore[attr-defined]  # the StringIO given above

    def print(self, *items: Any) -> None:
        self.write(self.render(*items))

    def write(self, ansi: str) -> None:
        """Queue ANSI text; all text queued in one loop tick goes out in one write."""
        self._pending.append(ansi)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    async def drain(self) -> None:
        """Wait until everything queued so far is on the screen."""
        self._flush()
        if self._written is not None:
            await self._written

    def _flush(self) -> None:
        self._scheduled = False
        data, self._pending = "".join(self._pending), []
        if not data:
            return
        output = self.session.output

        def write() -> None:
            output.write_raw(data)
            output.flush()

        self._written = asyncio.ensure_future(run_in_terminal(write, in_executor=False))

    def invalidate(self) -> None:
        if self.session.app.is_running:
            self.session.app.invalidate()
