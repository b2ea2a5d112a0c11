"""The plugin API (DESIGN §3 "Plugins"): the `hookimpl` marker, `PromptBlocked`, and what hooks receive.

A plugin is a module with functions marked `@code_puppy.hookimpl`, named after the hooks in `hookspecs.py`. Importing
this package imports pluggy and nothing heavy, so `code_puppy.hookimpl` stays cheap for plugins to use.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pluggy

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

    from code_puppy.plugins.process import Completed
    from code_puppy.sessions.session import Session

PROJECT_NAME = "code_puppy"
ENTRY_POINT_GROUP = "code_puppy.plugins"
"""The entry-point group installed distributions register plugins in."""

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Marks a plugin's function as the implementation of the hook it is named after."""


class PromptBlocked(Exception):
    """Raised by a `user_prompt_submit` hook to block the prompt: nothing is sent, `reason` is shown to the user."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.plugin: str | None = None
        """The plugin that raised it; code-puppy sets it."""


class RegisterCommand(Protocol):
    """What `register_commands` receives: adds the slash command `/NAME` to the interactive chat.

    `handler` is called with the text after the command (sync or async); `help` is its one-line description.
    """

    def __call__(self, name: str, handler: Callable[[str], Any], help: str) -> None: ...


AgentCommand = Callable[[str], tuple[str, Mapping[str, str]]]
"""How a command run for the agent runs: the command line (wrapped in the sandbox when the permission mode confines
the agent's commands) and its environment (without secrets)."""


Tracked = Callable[[], AbstractAsyncContextManager[None]]
"""Encloses a command run for the agent, so what it changes in the project is part of the turn's checkpoint."""


@dataclass(frozen=True)
class SessionView:
    """What hooks see of a session, read-only; `messages` is the durable history at the moment it is read."""

    _session: Session = field(repr=False)
    project_dir: Path
    _agent_command: AgentCommand | None = field(default=None, repr=False)
    _tracked: Tracked | None = field(default=None, repr=False)

    def tracked(self) -> AbstractAsyncContextManager[None]:
        """Enclose a command a hook runs in the project: what it changes counts as the agent's, in the turn's
        checkpoint, so a rewind undoes it (README "Checkpoints and rewind"). Does nothing when checkpoints are off."""
        return self._tracked() if self._tracked is not None else contextlib.nullcontext()

    async def run_agent_command(self, command: str, *, timeout: float | None, merge_stderr: bool = False) -> Completed:
        """Run `command` with `sh -c` in the project as the agent's own `shell` commands run: without the secrets, and
        in the sandbox whenever the permission mode runs them there (`auto`). For commands that run code the model
        wrote (a check after its changes), not for the user's own scripts."""
        from code_puppy.plugins.process import run_shell

        if self._agent_command is None:  # never unconfined, with the secrets, by default
            raise RuntimeError("run_agent_command needs a running code-puppy project")
        line, env = self._agent_command(command)
        async with self.tracked():
            return await run_shell(line, cwd=self.project_dir, timeout=timeout, env=env, merge_stderr=merge_stderr)

    @property
    def id(self) -> str:
        return self._session.id

    @property
    def model(self) -> str | None:
        return self._session.model

    @property
    def messages(self) -> tuple[ModelMessage, ...]:
        return tuple(self._session.messages)
