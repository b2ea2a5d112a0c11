"""A session open in an ACP connection: its project, stored session, model, steering, commands and running turn."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from acp.schema import (
    SessionConfigOptionBoolean,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionMode,
    SessionModeState,
)

from code_puppy.acp.commands import SessionCommands
from code_puppy.core.conversation import Conversation
from code_puppy.core.turn import TurnOutcome
from code_puppy.options import PERMISSION_MODES, PermissionMode

MODES: dict[PermissionMode, tuple[str, str]] = {
    "read-only": ("Read only", "Reads and searches; no editing or shell tools are offered."),
    "ask": ("Ask", "File changes and commands outside the allow-list ask first."),
    "accept-edits": ("Accept edits", "File changes in the project run; commands ask unless allow-listed."),
    "auto": ("Auto", "File changes and every command run; commands inside the OS sandbox."),
    "yolo": ("Yolo", "Nothing asks, nothing is confined."),
}
assert set(MODES) == set(PERMISSION_MODES)


@dataclass
class LiveSession(Conversation):
    """A session open in this process, and what the editor sees of it."""

    queued: list[str] = field(default_factory=list[str])
    """Text queued as the next turn (`_code_puppy/queue`), run when the running one ends."""
    running: asyncio.Task[TurnOutcome] | None = None
    """The turn running, if one is."""
    commands: SessionCommands = field(default_factory=SessionCommands)
    announcing: asyncio.Task[None] | None = None
    """Sending the slash commands, just after the session's answer; a prompt waits for it, so they come first."""

    def modes(self) -> SessionModeState:
        return SessionModeState(
            current_mode_id=self.project.policy.mode,
            available_modes=[
                SessionMode(id=mode, name=name, description=description) for mode, (name, description) in MODES.items()
            ],
        )

    def config_options(self) -> list[SessionConfigOptionSelect | SessionConfigOptionBoolean]:
        names = dict.fromkeys([self.model_name, self.project.model_name, *self.project.settings.models])
        return [
            SessionConfigOptionSelect(
                id="model",
                name="Model",
                type="select",
                category="model",
                current_value=self.model_name,
                options=[SessionConfigSelectOption(value=name, name=name) for name in names],
            )
        ]
