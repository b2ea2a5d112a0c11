"""Slash commands of the chat: a registry that built-ins and plugins (`register_commands(register)`) fill."""

from __future__ import annotations

import difflib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

CommandHandler = Callable[[str], object | Awaitable[object]]
"""Called with the text after the command name (stripped); may be async. What it returns, unless None, is printed
above the prompt (a string or a rich renderable)."""


@dataclass(frozen=True)
class SlashCommand:
    name: str
    """Without the slash, e.g. `help`."""
    handler: CommandHandler
    help: str
    """One line for `/help`; its first word may be an argument placeholder such as `[MODEL]`."""


class CommandRegistry:
    """Slash commands by name. A plugin's command with a built-in's name replaces it."""

    def __init__(self) -> None:
        self._commands: dict[str, SlashCommand] = {}

    def register(self, name: str, handler: CommandHandler, help: str) -> None:
        """Add `/name`; `name` is a single word, given with or without its slash."""
        name = name.removeprefix("/")
        if not name or any(char.isspace() for char in name):
            raise ValueError(f"a slash command name is one word, got {name!r}")
        self._commands[name] = SlashCommand(name, handler, help)

    def get(self, name: str) -> SlashCommand | None:
        return self._commands.get(name)

    def names(self) -> list[str]:
        return sorted(self._commands)

    def __iter__(self) -> Iterator[SlashCommand]:
        return iter(sorted(self._commands.values(), key=lambda command: command.name))

    def suggest(self, name: str) -> str | None:
        """The registered name closest to a mistyped one, if any is close."""
        prefixed = [known for known in self.names() if known.startswith(name)] if name else []
        if len(prefixed) == 1:
            return prefixed[0]
        close = difflib.get_close_matches(name, self.names(), n=1, cutoff=0.5)
        return close[0] if close else None

    def help_lines(self) -> list[str]:
        return [f"/{command.name:<12} {command.help}" for command in self]


def split_command(text: str) -> tuple[str, str] | None:
    """`('name', 'args')` for `/name args`, or None when `text` is not a slash command (`/` alone, `//x`, a path)."""
    if not text.startswith("/") or text.startswith("//"):
        return None
    head, _, args = text[1:].partition(" ")
    head = head.strip()
    if not head or "/" in head:
        return None
    return head, args.strip()
