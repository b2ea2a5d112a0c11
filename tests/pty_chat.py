"""Drive the installed `code-puppy` chat in a real pseudo-terminal, reading its screen through pyte."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pexpect
import pyte

from tests.conftest import CODE_PUPPY

ROWS, COLUMNS = 50, 120
IDLE_KEYS = "/help · @file · !cmd"
"""What the toolbar shows when no turn runs."""


class PtyChat:
    """A chat process in a 120x50 terminal (or `columns` wide, `rows` high). pyte answers its cursor-position
    requests, as a real terminal does."""

    def __init__(
        self,
        cwd: Path,
        *args: str,
        env: Mapping[str, str] | None = None,
        columns: int = COLUMNS,
        rows: int = ROWS,
    ) -> None:
        self.screen = pyte.Screen(columns, rows)
        self._stream = pyte.ByteStream(self.screen)
        self.child = pexpect.spawn(
            str(CODE_PUPPY),
            list(args),
            cwd=str(cwd),
            env={**os.environ, "TERM": "xterm-256color", **(env or {})},
            dimensions=(rows, columns),
        )
        self.screen.write_process_input = lambda data: self.child.send(data.encode())  # pyright: ignore[reportAttributeAccessIssue]

    def pump(self, timeout: float = 0.05) -> None:
        with contextlib.suppress(pexpect.TIMEOUT):
            self._stream.feed(self.child.read_nonblocking(65536, timeout=timeout))

    @property
    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display)

    def wait_for(self, what: str | Callable[[str], bool], timeout: float = 60) -> str:
        """Read output until the screen shows `what` (or satisfies it); the screen's text. The wait is long because a
        loaded machine (CI on two cores running tests in parallel) can take many seconds to start the chat: it bounds
        only how long a failing test takes, never what a passing one sees."""
        check = (lambda text: what in text) if isinstance(what, str) else what
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.pump()
            except pexpect.EOF:
                if check(self.text):
                    return self.text
                raise AssertionError(f"the chat exited before showing {what!r}; screen:\n{self.text}") from None
            if check(self.text):
                return self.text
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what!r}; screen:\n{self.text}")

    def wait_turn(self, text: str, timeout: float = 60) -> str:
        """Wait until `text` is on the screen and the turn is over (the toolbar shows the idle keys again)."""
        return self.wait_for(lambda screen: text in screen and IDLE_KEYS in screen, timeout)

    def type(self, text: str) -> None:
        self.child.send(text.encode())

    def prompt_line(self) -> str:
        """The input line: the last line starting with the prompt."""
        lines = [line for line in self.text.splitlines() if line.startswith(("›", "steer›"))]
        return lines[-1] if lines else ""

    def row_of(self, text: str) -> int:
        return next(i for i, line in enumerate(self.screen.display) if text in line)

    def colour_at(self, text: str) -> str:
        """The foreground colour of the first character of `text` on the screen."""
        row = self.row_of(text)
        return self.screen.buffer[row][self.screen.display[row].index(text)].fg

    def wait_exit(self, timeout: float = 60) -> int:
        """Read output until the process ends; its exit status."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.pump(0.1)
            except pexpect.EOF:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"the chat did not exit; screen:\n{self.text}")
        self.child.wait()
        assert self.child.exitstatus is not None
        return self.child.exitstatus

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)
        self.child.close()
