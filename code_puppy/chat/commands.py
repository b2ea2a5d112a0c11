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
    light: bool = False
    """Runs before the runtime has loaded: imports nothing beyond what the prompt already has (no pydantic-ai). A
    command that is not light waits for the runtime first, whatever it imports: the loader imports pydantic-ai in a
    worker thread, and a second thread importing the same modules meanwhile can see them half-initialised."""


class CommandRegistry:
    """Slash commands by name, and other names for some (`/clear` for `/new`, as Claude Code's). A plugin's command
    with a built-in's name, or an alias's, replaces it."""

    def __init__(self) -> None:
        self._commands: dict[str, SlashCommand] = {}
        self._aliases: dict[str, str] = {}

    def register(self, name: str, handler: CommandHandler, help: str, *, light: bool = False) -> None:
        """Add `/name`; `name` is a single word, given with or without its slash. `light`: see `SlashCommand`."""
        name = name.removeprefix("/")
        if not name or any(char.isspace() for char in name):
            raise ValueError(f"a slash command name is one word, got {name!r}")
        self._commands[name] = SlashCommand(name, handler, help, light)
        self._aliases.pop(name, None)

    def alias(self, name: str, target: str) -> None:
        """Make `/name` run `/target` (whichever command holds that name when it is typed)."""
        self._aliases[name] = target

    def get(self, name: str) -> SlashCommand | None:
        """The command `/name` runs: its own, or its alias's target."""
        return self._commands.get(name) or self._commands.get(self._aliases.get(name, ""))

    def names(self) -> list[str]:
        """Every name a command answers to, aliases included."""
        return sorted({*self._commands, *self._aliases})

    def __iter__(self) -> Iterator[SlashCommand]:
        return iter(sorted(self._commands.values(), key=lambda command: command.name))

    def suggest(self, name: str) -> str | None:
        """The command a mistyped name most likely meant: the only one it begins, else one a letter or two away (a
        typo, `/hepl`); never one that merely shares letters (`/cost` is not `/compact`)."""
        prefixed = [known for known in self.names() if known.startswith(name)] if name else []
        if len(prefixed) == 1:
            return prefixed[0]
        close = difflib.get_close_matches(name, self.names(), n=1, cutoff=0.75)
        return close[0] if close else None

    def help_lines(self) -> list[str]:
        aliases: dict[str, list[str]] = {}
        for alias, target in sorted(self._aliases.items()):
            aliases.setdefault(target, []).append(f"/{alias}")
        return [
            f"/{command.name:<12} {command.help}"
            + (f" (also {', '.join(aliases[command.name])})" if command.name in aliases else "")
            for command in self
        ]


def split_command(text: str) -> tuple[str, str] | None:
    """`('name', 'args')` for `/name args`, or None when `text` is not a slash command (`/` alone, `//x`, a path)."""
    if not text.startswith("/") or text.startswith("//"):
        return None
    head, _, args = text[1:].partition(" ")
    head = head.strip()
    if not head or "/" in head:
        return None
    return head, args.strip()
