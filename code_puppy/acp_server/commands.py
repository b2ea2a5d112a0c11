"""Slash commands in an editor session: `/permissions`, `/model` and the plugins' commands.

They are advertised with `available_commands_update`; a prompt that starts with one runs it instead of a model turn,
and its result is the agent's message. Any other text starting with `/` goes to the model as it is.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from acp.schema import AvailableCommand, AvailableCommandInput, UnstructuredCommandInput

BUILT_IN = {
    "permissions": ("Show or switch the permission mode (read-only, ask, accept-edits, auto, yolo)", "mode"),
    "model": ("Show or switch the session's model (a model string or a [models] name)", "model"),
}


@dataclass
class SessionCommands:
    """The slash commands of one session's project: the built-in ones and those its plugins registered."""

    plugins: dict[str, tuple[Callable[[str], Any], str]] = field(
        default_factory=dict[str, tuple[Callable[[str], Any], str]]
    )

    def register(self, name: str, handler: Callable[[str], Any], help: str) -> None:
        """`RegisterCommand` for the plugins' `register_commands`; a plugin cannot replace a built-in command."""
        name = name.removeprefix("/")
        if name and name not in BUILT_IN and not any(char.isspace() for char in name):
            self.plugins[name] = (handler, help)

    def available(self) -> list[AvailableCommand]:
        built_in = [
            AvailableCommand(
                name=name,
                description=description,
                input=AvailableCommandInput(root=UnstructuredCommandInput(hint=hint)),
            )
            for name, (description, hint) in BUILT_IN.items()
        ]
        plugins = [AvailableCommand(name=name, description=help) for name, (_, help) in sorted(self.plugins.items())]
        return built_in + plugins

    async def run_plugin(self, name: str, args: str) -> str | None:
        """Run plugin command `name`; its result as text, None when `name` is not one."""
        if name not in self.plugins:
            return None
        result = self.plugins[name][0](args)
        if inspect.isawaitable(result):
            result = await result
        return "" if result is None else str(result)
