"""Slash commands from markdown files: Claude Code's `.claude/commands/`, code-puppy's `.code-puppy/commands/`,
the user's `commands/` folders and Codex's `~/.codex/prompts` (issue 15).

The file's path is the command (`review.md` → `/review`, `frontend/review.md` → `/frontend:review`, Codex prompts
→ `/prompts:NAME`); optional frontmatter gives `description`, `argument-hint`, `model` and `allowed-tools`. Running
one sends its body with `$ARGUMENTS` and `$1`…`$9` substituted (a body without placeholders gets the arguments
appended, as Claude Code does). Imports nothing heavy: the chat lists them while its prompt is already up.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from code_puppy.definitions.files import (
    Loaded,
    Problem,
    Scope,
    ToolGrant,
    codex_prompts,
    folders,
    parse_tools,
    read_frontmatter,
)

BUILT_IN_COMMANDS = (
    *("help", "model", "new", "sessions", "resume", "usage", "budget", "permissions", "steer", "queue", "compact"),
    *("mcp", "exit", "agent", "skills", "init"),
)
"""The chat's own commands, which a file command never shadows (headless runs know them by this list)."""
_PLACEHOLDER = re.compile(r"\$(ARGUMENTS|[1-9])")


@dataclass(frozen=True)
class FileCommand:
    """A slash command defined by a markdown file."""

    name: str
    """Without the slash: `review`, `frontend:review`."""
    body: str
    path: Path
    scope: Scope
    description: str = ""
    argument_hint: str = ""
    model: str | None = None
    grant: ToolGrant = field(default_factory=ToolGrant)
    """`allowed-tools`: the tools offered while it runs (it grants nothing the mode does not allow)."""

    @property
    def help(self) -> str:
        """Its line in `/help`."""
        hint = f"{self.argument_hint} " if self.argument_hint else ""
        return f"{hint}{self.description or 'a command from ' + self.path.name} ({self.scope})"

    def expand(self, arguments: str) -> str:
        """The prompt it sends for `arguments`."""
        try:
            positional = shlex.split(arguments)
        except ValueError:
            positional = arguments.split()
        if not _PLACEHOLDER.search(self.body):
            return f"{self.body}\n\nARGUMENTS: {arguments}" if arguments else self.body

        def substitute(match: re.Match[str]) -> str:
            if match[1] == "ARGUMENTS":
                return arguments
            index = int(match[1]) - 1
            return positional[index] if index < len(positional) else ""

        return _PLACEHOLDER.sub(substitute, self.body)


def load_commands(project_root: Path, *, reserved: Collection[str] = ()) -> Loaded[FileCommand]:
    """Every file command, one per name (the project's over the user's, `.code-puppy/` over `.claude/`). A name in
    `reserved` (a built-in's) is never shadowed: the file's command is renamed `project:NAME` or `user:NAME`, with
    a note."""
    loaded: Loaded[FileCommand] = Loaded()
    chosen: dict[str, FileCommand] = {}
    sources: list[tuple[Path, Scope, str]] = [
        (folder, scope, "") for folder, scope in folders(project_root, "commands")
    ]
    if (prompts := codex_prompts()) is not None:
        sources.append((prompts, "user", "prompts:"))
    for folder, scope, prefix in sources:
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*.md")):
            relative = path.relative_to(folder).with_suffix("")
            name = prefix + ":".join(relative.parts)
            if any(character.isspace() for character in name):
                loaded.problems.append(Problem(path, "a command's file name cannot contain spaces; skipped"))
                continue
            if name in reserved:
                renamed = f"{scope}:{name}"
                loaded.notes.append(f"/{name} is built in; {_shown(path)} is /{renamed}")
                name = renamed
            command = _read_command(path, name, scope, loaded.problems)
            if command is None:
                continue
            if (winner := chosen.get(name)) is not None:
                loaded.notes.append(f"/{name} in {_shown(path)} is shadowed by {_shown(winner.path)}")
                continue
            chosen[name] = command
    loaded.items = list(chosen.values())
    return loaded


def find_command(project_root: Path, text: str) -> tuple[FileCommand, str] | None:
    """The file command `text` (`/name arguments`) runs, and its arguments; None for any other text."""
    if not text.startswith("/") or text.startswith("//"):
        return None
    name, _, arguments = text[1:].partition(" ")
    if not name or "/" in name:
        return None
    loaded = load_commands(project_root, reserved=BUILT_IN_COMMANDS)
    command = next((command for command in loaded.items if command.name == name.strip()), None)
    return (command, arguments.strip()) if command is not None else None


def _read_command(path: Path, name: str, scope: Scope, problems: list[Problem]) -> FileCommand | None:
    if (read := read_frontmatter(path, problems)) is None:
        return None
    fields, body = read
    grant, unknown = parse_tools(fields.get("allowed-tools"))
    for tool in unknown:
        problems.append(Problem(path, f"unknown tool '{tool}' dropped"))
    description = fields.get("description")
    hint = fields.get("argument-hint")
    model = fields.get("model")
    first_line = next((line.strip("# ").strip() for line in body.splitlines() if line.strip()), "")
    return FileCommand(
        name=name,
        body=body,
        path=path,
        scope=scope,
        description=description if isinstance(description, str) else first_line[:80],
        argument_hint=hint if isinstance(hint, str) else "",
        model=model if isinstance(model, str) and model != "inherit" else None,
        grant=grant,
    )


def _shown(path: Path) -> str:
    return str(Problem(path, ""))[:-2]
