"""`ShellOutputs`: removes the directories the harness `shell` tool leaves in the temp dir, one per call.

The harness runs each command under a supervisor that writes its output log and exit status into a fresh
`harness-shell-*` directory and never removes it. A command that has finished is done with its directory by the
time the run that started it ends (the tool result carried the tail of its output, and the run could read the
rest), so the directory goes then, whether the run succeeded, failed or was cancelled. A command still running
(started in the background, or past the 270 s foreground wait) is still writing there, and the model may read its
log and status in a later turn; its directory stays until the process exits, when nobody is left to read it (the
command itself keeps running, as the harness intends).
"""

from __future__ import annotations

import atexit
import json
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.capabilities import AbstractCapability, WrapRunHandler, on_event
from pydantic_ai_harness.shell import CommandFinishedEvent

_still_running: set[Path] = set()
"""Directories of commands that were running when their run ended, removed at exit."""


def _remove_still_running() -> None:
    for directory in _still_running:
        shutil.rmtree(directory, ignore_errors=True)
    _still_running.clear()


atexit.register(_remove_still_running)


@dataclass
class ShellOutputs(AbstractCapability[Any]):
    """At the end of each run, removes the output directories of the `shell` commands it started that have finished;
    those of commands still running go when the process exits."""

    _directories: list[Path] = field(default_factory=list[Path], init=False, repr=False)

    async def for_run(self, ctx: RunContext[Any]) -> ShellOutputs:
        # Per run: a delegated run ending must not remove what its parent run may still read.
        return replace(self)

    @on_event(CommandFinishedEvent)
    async def _command_finished(self, ctx: RunContext[Any], event: CommandFinishedEvent) -> None:
        self._directories.append(Path(event.status_path).parent)

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        try:
            return await handler()
        finally:
            for directory in self._directories:
                if _finished(directory):
                    shutil.rmtree(directory, ignore_errors=True)
                else:
                    _still_running.add(directory)
            self._directories.clear()


def _finished(directory: Path) -> bool:
    try:
        return json.loads((directory / "status.json").read_text())["exit_code"] is not None
    except (OSError, ValueError, KeyError, TypeError):
        return False  # not published yet, or unreadable: treat it as running
