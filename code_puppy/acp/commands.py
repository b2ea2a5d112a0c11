"""Slash commands in an editor session: `/permissions`, `/model`, the plugins' commands and the commands defined in
markdown files (`.code-puppy/commands`, `.claude/commands`, the user's), as in the chat.

They are advertised with `available_commands_update`. A prompt that starts with a built-in or plugin command runs it
instead of a model turn, and its result is the agent's message; a file command's expanded body is the turn's prompt,
under its `model` and `allowed-tools`. Any other text starting with `/` goes to the model as it is.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp.schema import AvailableCommand, AvailableCommandInput, UnstructuredCommandInput

from code_puppy.definitions.file_commands import BUILT_IN_COMMANDS, FileCommand, load_commands

BUILT_IN = {
    "permissions": ("Show or switch the permission mode (read-only, ask, accept-edits, auto, yolo)", "mode"),
    "model": ("Show or switch the session's model (a model string or a [models] name)", "model"),
}


@dataclass
class SessionCommands:
    """The slash commands of one session's project: the built-in ones, those its plugins registered and its file
    commands."""

    plugins: dict[str, tuple[Callable[[str], Any], str]] = field(
        default_factory=dict[str, tuple[Callable[[str], Any], str]]
    )
    files: dict[str, FileCommand] = field(default_factory=dict[str, FileCommand])

    def load_files(self, project_root: Path) -> list[str]:
        """Add the file commands of `project_root` (a built-in's or plugin's name is never shadowed: the file's is
        renamed, as in the chat); the lines about files skipped and names changed."""
        loaded = load_commands(project_root, reserved={*BUILT_IN_COMMANDS, *BUILT_IN, *self.plugins})
        self.files = {command.name: command for command in loaded.items}
        return [str(problem) for problem in loaded.problems] + loaded.notes

    def file_command(self, text: str) -> tuple[FileCommand, str] | None:
        """The file command `text` (`/name arguments`) runs, with its arguments; None for any other text."""
        if not text.startswith("/"):
            return None
        name, _, arguments = text[1:].partition(" ")
        command = self.files.get(name)
        return (command, arguments.strip()) if command is not None else None

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
        files = [
            AvailableCommand(
                name=command.name,
                description=command.description or f"a command from {command.path.name} ({command.scope})",
                input=AvailableCommandInput(root=UnstructuredCommandInput(hint=command.argument_hint))
                if command.argument_hint
                else None,
            )
            for command in self.files.values()
        ]
        return built_in + plugins + files

    async def run_plugin(self, name: str, args: str) -> str | None:
        """Run plugin command `name`; its result as text, None when `name` is not one."""
        if name not in self.plugins:
            return None
        result = self.plugins[name][0](args)
        if inspect.isawaitable(result):
            result = await result
        return "" if result is None else str(result)
