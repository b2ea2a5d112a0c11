"""Slash commands from markdown files: Claude Code's `.claude/commands/`, code-puppy's `.code-puppy/commands/`,
the user's `commands/` folders and Codex's `~/.codex/prompts` (issue 15).

The file's path is the command (`review.md` → `/review`, `frontend/review.md` → `/frontend:review`, Codex prompts
→ `/prompts:NAME`); optional frontmatter gives `description`, `argument-hint`, `model`, `allowed-tools` and (Claude
Code's) `arguments`. Running one sends its body with the arguments substituted (`expand`): `$ARGUMENTS` is all of
them, `$ARGUMENTS[N]` and `$N` one of them, 0-based in Claude Code's folders as Claude Code has them now (`$0` is the
first), 1-based in code-puppy's and Codex's (`$1` is the first), and `$NAME` one named by `arguments`. A `$` with a
number names the whole number (`$150` is argument 150); one naming no given argument stays as written, and a body
with no placeholder that names a given argument gets them appended as `ARGUMENTS: …`, as Claude Code does.

`` !`cmd` `` in a body is Claude Code's shell line: its output replaces it before the prompt is sent, run by the core
(`core/command_lines.py`) only for a `trusted` command. Imports nothing heavy: the chat lists commands while its
prompt is already up.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from code_puppy.definitions.files import (
    FrontmatterError,
    Loaded,
    Problem,
    Scope,
    ToolGrant,
    codex_prompts,
    folders,
    parse_tools,
    split_frontmatter,
)
from code_puppy.trust import trusted_content

BUILT_IN_COMMANDS = (
    *("help", "model", "new", "sessions", "resume", "usage", "budget", "permissions", "steer", "queue", "compact"),
    *("mcp", "exit", "agent", "skills", "init"),
)
"""The chat's own commands, which a file command never shadows (headless runs know them by this list)."""
_PLACEHOLDER = re.compile(r"\$ARGUMENTS\[(\d+)\]|\$ARGUMENTS(?!\w)|\$(\d+)(?!\w)")
SHELL_LINE = re.compile(r"(?<!\S)!`([^`\n]+)`|^```!\n(.*?)\n```[ \t]*$", re.MULTILINE | re.DOTALL)
"""Claude Code's `` !`git status` `` (at a line's start or after a space: `KEY=!`cmd`` is text) and its ```` ```! ````
fenced block (a script): a command whose output takes its place in the prompt."""


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
    """`allowed-tools`: the tools offered while it runs; a `trusted` command's also run without asking (within the
    user's mode: never more than read-only, never an edit outside the project or of agent config)."""
    zero_based: bool = False
    """Whether `$0` is the first argument (Claude Code's folders) rather than `$1` (code-puppy's, Codex's)."""
    argument_names: tuple[str, ...] = ()
    """Claude Code's `arguments:`: `$NAME` is the argument in that position."""
    trusted: bool = True
    """Whether its `!` lines run and its `allowed-tools` grant: the user's own, or a project's whose content is the
    one `code-puppy trust` recorded."""

    @property
    def help(self) -> str:
        """Its line in `/help`."""
        hint = f"{self.argument_hint} " if self.argument_hint else ""
        return f"{hint}{self.description or 'a command from ' + self.path.name} ({self.scope})"

    def expand(self, arguments: str) -> str:
        """The prompt it sends for `arguments` (`!` lines not run yet)."""
        values = split_arguments(arguments)
        pattern = self._placeholders()
        placeholders = 0

        def substitute(match: re.Match[str]) -> str:
            nonlocal placeholders
            if match[0] == "$ARGUMENTS":
                placeholders += 1
                return arguments
            if match[1] is not None:
                index = int(match[1])
            elif match[2] is not None:
                index = int(match[2]) - (0 if self.zero_based else 1)
            else:
                index = self.argument_names.index(match[3])
            if not 0 <= index < len(values):
                return match[0]
            placeholders += 1
            return values[index]

        text = pattern.sub(substitute, self.body)
        return f"{text}\n\nARGUMENTS: {arguments}" if arguments and not placeholders else text

    def shell_lines(self, prompt: str) -> list[str]:
        """The `` !`cmd` `` commands and ```` ```! ```` scripts in `prompt` (an `expand`ed body) that the command's own
        body wrote, its placeholders filled in, in order; none for a Codex prompt. One that came in with the
        arguments (text the user pasted, a file an editor attached) is text: it never runs."""
        if self.name.startswith("prompts:"):
            return []
        written = [self._line_pattern((match[1] or match[2]).strip()) for match in SHELL_LINE.finditer(self.body)]
        found = ((match[1] or match[2]).strip() for match in SHELL_LINE.finditer(prompt))
        return [line for line in found if any(pattern.fullmatch(line) for pattern in written)]

    def _line_pattern(self, line: str) -> re.Pattern[str]:
        """A body's line as a pattern: its text as written, each placeholder any text (what `expand` put there)."""
        placeholders = self._placeholders()
        pieces = placeholders.split(line)[:: (placeholders.groups + 1)]
        return re.compile(".*?".join(re.escape(piece) for piece in pieces), re.DOTALL)

    def _placeholders(self) -> re.Pattern[str]:
        """`$ARGUMENTS`, `$ARGUMENTS[N]`, `$N` and the named `$NAME`s: the placeholders `expand` fills."""
        named = "|".join(re.escape(name) for name in sorted(self.argument_names, key=len, reverse=True))
        return re.compile(f"{_PLACEHOLDER.pattern}|\\$({named})(?![\\w-])") if named else _PLACEHOLDER


def split_arguments(arguments: str) -> list[str]:
    """The positional arguments, split as a shell would (quotes group words), or at spaces when quotes don't close."""
    try:
        return shlex.split(arguments)
    except ValueError:
        return arguments.split()


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
            # Claude Code's folders (the project's `.claude/commands`, `~/.claude/commands`) count from `$0`.
            zero_based = folder.parent.name == ".claude"
            command = _read_command(
                path, name, scope, loaded.problems, project_root=project_root, zero_based=zero_based
            )
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


def _read_command(
    path: Path, name: str, scope: Scope, problems: list[Problem], *, project_root: Path, zero_based: bool
) -> FileCommand | None:
    try:
        content = path.read_bytes()
        fields, body = split_frontmatter(content.decode("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem(path, f"cannot be read ({exc.__class__.__name__}); skipped"))
        return None
    except FrontmatterError as exc:
        problems.append(Problem(path, f"broken frontmatter: {exc}; skipped"))
        return None
    grant, unknown = parse_tools(fields.get("allowed-tools"))
    for tool in unknown:
        problems.append(Problem(path, f"unknown tool '{tool}' dropped"))
    description = fields.get("description")
    hint = fields.get("argument-hint")
    model = fields.get("model")
    names = fields.get("arguments", [])
    first_line = next((line.strip("# ").strip() for line in body.splitlines() if line.strip()), "")
    # The bytes read are the bytes checked: the file cannot change between the check and the use.
    trusted = scope == "user" or trusted_content(project_root, path.relative_to(project_root).as_posix(), content)
    return FileCommand(
        name=name,
        body=body,
        path=path,
        scope=scope,
        description=description if isinstance(description, str) else first_line[:80],
        argument_hint=hint if isinstance(hint, str) else "",
        model=model if isinstance(model, str) and model != "inherit" else None,
        grant=grant,
        zero_based=zero_based,
        argument_names=tuple(names.split() if isinstance(names, str) else names),
        trusted=trusted,
    )


def _shown(path: Path) -> str:
    return str(Problem(path, ""))[:-2]
