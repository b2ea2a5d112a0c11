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
from typing import TYPE_CHECKING, Any, Literal, Protocol

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


class TurnStopped(Exception):
    """Raised by a tool-call hook (or carried by a `ToolDecision`'s `stop`) to end the turn now: the call does not run,
    the run ends, what it completed is saved, and `reason` is shown to the user (not to the model)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.plugin: str | None = None
        """The plugin that stopped the turn; code-puppy sets it."""


@dataclass(frozen=True)
class ToolDecision:
    """What a `pre_tool_call` hook may return instead of a reason: a permission decision, new arguments, a stop.

    A plain string is still a denial (`ToolDecision(permission="deny", reason=...)`).
    """

    permission: Literal["allow", "ask", "deny"] | None = None
    """`allow` runs the call without the question the permission mode would ask; never past a denial, the question a
    protected path (agent config, `.git/hooks`) or a risky option always asks, or the sandbox. `ask` asks the user
    even where the mode would let the call run (nobody to ask: denied). `deny` blocks it and the model is told
    `reason`. None leaves the decision to the permission mode."""
    reason: str = ""
    """Why: what the model is told of a denial, or shown in the question for `ask`."""
    args: dict[str, Any] | None = None
    """Arguments (code-puppy's names) the call runs with instead of the model's; keys the tool does not take are
    dropped, and the permission policy decides on these."""
    stop: str | None = None
    """End the turn instead of running the call (`TurnStopped`); the user is told this."""


@dataclass(frozen=True)
class Context:
    """Text for the model that goes with the user's prompt in a part of its own, never merged into what the user
    typed (titles and the search index leave it out): what `user_prompt_submit` or `session_start` may return."""

    text: str


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
    _mode: Callable[[], str] | None = field(default=None, repr=False)

    @property
    def permission_mode(self) -> str:
        """The permission mode the session's calls are decided in now (`ask`, `accept-edits`, `auto`, …)."""
        return self._mode() if self._mode is not None else "ask"

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
