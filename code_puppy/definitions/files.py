"""Agents, commands and skills defined in files, in the formats other coding agents already use (issue 15).

Read from the project and the user's folders, `.code-puppy/` first, then `.agents/`, then `.claude/` (Claude Code's
layout): `agents/*.md` (a sub-agent: frontmatter `name`, `description`, `model`, `tools`/`allowed-tools`,
`permission_mode`; the body is its instructions), `commands/**/*.md` (a slash command: `review.md` is `/review`,
`frontend/review.md` is `/frontend:review`) and `skills/NAME/SKILL.md` (Agent Skills). The user's folders are
`agents/`, `commands/` and `skills/` in code-puppy's config directory, and, unless `CODE_PUPPY_HOME` relocates
everything, `~/.agents/`, `~/.claude/` and Codex's `~/.codex/prompts` and `~/.codex/skills`.

Nothing here imports pydantic-ai: the chat lists commands before its heavy imports finish. Frontmatter is read by a
small reader for the shapes these files use (`key: value`, block and inline lists, indented continuation lines),
which also takes the unquoted colons real Claude Code descriptions are full of. A file it cannot read is one
`Problem` naming it, and the rest still load.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar, cast

from code_puppy.options import BY_REACH
from code_puppy.paths import code_puppy_home, config_dir

Scope = Literal["project", "user"]
ModelCheck = Callable[[str], "str | None"]
"""Why a definition's `model` cannot be used, or None when it can."""
T = TypeVar("T")
PROJECT_LAYOUTS = (".code-puppy", ".agents", ".claude")
"""Project folders, highest precedence first."""

CLAUDE_TOOLS: dict[str, tuple[str, ...]] = {
    "read": ("read_file",),
    "write": ("write_file", "create_directory"),
    "edit": ("edit_file",),
    "multiedit": ("edit_file",),
    "notebookedit": ("edit_file",),
    "grep": ("grep",),
    "glob": ("list_files",),
    "ls": ("list_files",),
    "bash": ("shell",),
    "task": ("delegate_task",),
    "agent": ("delegate_task",),
    "todowrite": ("write_plan", "read_plan", "add_task", "update_task_status", "update_task_statuses", "remove_task"),
}
"""Claude Code's tool names (case-insensitive) as code-puppy's tools."""
OWN_TOOLS = frozenset(
    {"read_file", "write_file", "edit_file", "create_directory", "list_files", "grep", "shell", "delegate_task"}
)
"""code-puppy's own tool names, accepted as they are. Spelled out rather than read from `code_puppy.tools`, which
imports pydantic-ai: the chat reads file commands before that is loaded (a test keeps the two in step)."""
UNAVAILABLE_TOOLS = frozenset({"webfetch", "websearch", "todoread", "bashoutput", "killshell", "skill"})
"""Claude Code tools code-puppy has no counterpart for (or always offers), dropped without a note."""
_BASH_PATTERN = re.compile(r"^bash\((.*)\)$", re.IGNORECASE | re.DOTALL)
_KEY = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.-]*)\s*:(.*)$")


class FrontmatterError(ValueError):
    """Frontmatter that cannot be read; the message says where."""


@dataclass(frozen=True)
class Problem:
    """One file that was skipped, or part of it dropped, and why: shown as one line."""

    path: Path
    message: str

    def __str__(self) -> str:
        return f"{_display(self.path)}: {self.message}"


@dataclass(frozen=True)
class ToolGrant:
    """What a definition's `tools` list lets it use: None for everything the user's mode allows."""

    tools: frozenset[str] | None = None
    """code-puppy tool names; MCP tools are named `mcp__SERVER__TOOL` (or `mcp__SERVER` for all of one server)."""
    shell_patterns: tuple[str, ...] | None = None
    """With `shell` granted through `Bash(...)` only: the allow-list patterns every command must match."""

    def describe(self) -> str:
        if self.tools is None:
            return "all tools"
        names = sorted(self.tools)
        if self.shell_patterns is not None and "shell" in self.tools:
            names[names.index("shell")] = f"shell({', '.join(self.shell_patterns)})"
        return ", ".join(names) or "no tools"


@dataclass(frozen=True)
class AgentDefinition:
    """A sub-agent from a markdown file."""

    name: str
    description: str
    instructions: str
    path: Path
    scope: Scope
    model: str | None = None
    """As written (`sonnet`, `inherit`, `openai:gpt-5.1`, a `[models]` name); None when unset."""
    grant: ToolGrant = field(default_factory=ToolGrant)
    permission_mode: str | None = None
    """A mode this agent runs in at most (it never loosens the user's)."""
    hooks: dict[str, Any] | None = field(default=None, hash=False)
    """Its frontmatter `hooks:` (Claude Code's shape), run for its runs by the bundled shell_hooks plugin."""


@dataclass(frozen=True)
class SkillInfo:
    """A skill's listing: its name and description, read cheaply (the harness validates it in full)."""

    name: str
    description: str
    path: Path
    scope: Scope


@dataclass
class Loaded(Generic[T]):
    """What a folder scan found, and the problems it reported."""

    items: list[T] = field(default_factory=list[T])
    problems: list[Problem] = field(default_factory=list[Problem])
    notes: list[str] = field(default_factory=list[str])
    """Shadowed definitions: one line each."""


def folders(project_root: Path, kind: str) -> list[tuple[Path, Scope]]:
    """Where definitions of `kind` (`agents`, `commands`, `skills`) live, highest precedence first."""
    project: Scope = "project"
    user: Scope = "user"
    found: list[tuple[Path, Scope]] = [(project_root / layout / kind, project) for layout in PROJECT_LAYOUTS]
    found.append((config_dir() / kind, user))
    if code_puppy_home() is None:
        home = Path.home()
        found.extend((home / layout / kind, user) for layout in (".agents", ".claude"))
        if kind == "skills":
            found.append((home / ".codex" / "skills", user))
    seen: set[Path] = set()
    unique: list[tuple[Path, Scope]] = []
    for folder, scope in found:
        key = folder.resolve() if folder.exists() else folder
        if key not in seen:
            seen.add(key)
            unique.append((folder, scope))
    return unique


def codex_prompts() -> Path | None:
    """Codex's custom prompts folder, read as user commands named `prompts:NAME` (as Codex names them)."""
    return None if code_puppy_home() is not None else Path.home() / ".codex" / "prompts"


def read_frontmatter(
    path: Path, problems: list[Problem], *, required: bool = False
) -> tuple[dict[str, str | list[str]], str] | None:
    """`split_frontmatter` of the file at `path`; None, with its problem recorded, when it cannot be read or parsed."""
    try:
        return split_frontmatter(path.read_text(encoding="utf-8"), required=required)
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem(path, f"cannot be read ({exc.__class__.__name__}); skipped"))
    except FrontmatterError as exc:
        problems.append(Problem(path, f"broken frontmatter: {exc}; skipped"))
    return None


def split_frontmatter(text: str, *, required: bool = False) -> tuple[dict[str, str | list[str]], str]:
    """The frontmatter's keys and the body after it.

    Raises:
        FrontmatterError: An unclosed block, a line that is not `key: value`, or (when `required`) none at all.
    """
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        if required:
            raise FrontmatterError("no frontmatter (a `---` block with at least `description:`)")
        return {}, text.strip()
    closing = next((index for index in range(1, len(lines)) if lines[index].strip() == "---"), None)
    if closing is None:
        raise FrontmatterError("the frontmatter's `---` block is not closed")
    fields: dict[str, str | list[str]] = {}
    current: str | None = None
    for number, raw in enumerate(lines[1:closing], start=2):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        stripped = raw.strip()
        if current is not None and raw[0] in " \t":
            value = fields[current]
            if stripped.startswith("- ") and isinstance(value, list):
                value.append(_unquote(stripped[2:].strip()))
            elif isinstance(value, str):
                fields[current] = f"{value} {stripped}".strip() if value not in ("|", ">") else stripped
            elif not value:
                fields[current] = stripped
            else:
                raise FrontmatterError(f"line {number}: cannot read `{stripped[:40]}`")
            continue
        match = _KEY.match(raw)
        if match is None:
            raise FrontmatterError(f"line {number}: expected `key: value`, found `{stripped[:40]}`")
        key, value = match[1], match[2].strip()
        current = key
        if not value:
            fields[key] = []
        elif value.startswith("[") and value.endswith("]"):
            fields[key] = [_unquote(item.strip()) for item in value[1:-1].split(",") if item.strip()]
        else:
            fields[key] = _unquote(value)
    return fields, "\n".join(lines[closing + 1 :]).strip()


def parse_tools(raw: str | list[str] | None, *, allow_mcp: bool = True) -> tuple[ToolGrant, list[str]]:
    """A `tools`/`allowed-tools` value as a grant, and the names it did not know (None/empty: all tools)."""
    if raw is None or raw == [] or raw == "*":
        return ToolGrant(), []
    items = raw if isinstance(raw, list) else _split_tools(raw)
    tools: set[str] = set()
    patterns: list[str] = []
    whole_shell = False
    unknown: list[str] = []
    for item in items:
        name = item.strip()
        key = name.casefold()
        if match := _BASH_PATTERN.match(name):
            tools.add("shell")
            patterns += _shell_patterns(match[1].strip())
        elif key in CLAUDE_TOOLS:
            tools.update(CLAUDE_TOOLS[key])
            whole_shell = whole_shell or key == "bash"
        elif name in OWN_TOOLS:
            tools.add(name)
            whole_shell = whole_shell or name == "shell"
        elif allow_mcp and name.startswith("mcp__"):
            tools.add(name)
        elif key not in UNAVAILABLE_TOOLS and name:
            unknown.append(name)
    shell_patterns = tuple(patterns) if patterns and not whole_shell else None
    return ToolGrant(frozenset(tools), shell_patterns), unknown


def _split_tools(raw: str) -> list[str]:
    """`Read, Grep, Bash(git diff:*, git log:*)`: commas inside parentheses belong to the pattern."""
    items: list[str] = []
    depth = 0
    current = ""
    for character in raw:
        if character == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        depth += (character == "(") - (character == ")")
        current += character
    return [item.strip() for item in [*items, current] if item.strip()]


def _shell_patterns(spec: str) -> list[str]:
    """Claude Code's `git:*` (git and anything after it), `npm run test` (exactly) or a `*` glob, as allow-list
    patterns (`fnmatch`, matched against every segment of a command)."""
    patterns: list[str] = []
    for part in (piece.strip() for piece in spec.split(",")):
        if not part:
            continue
        if part.endswith(":*"):
            prefix = part[:-2].strip()
            patterns += [prefix, f"{prefix} *"]
        elif part == "*":
            patterns.append("*")
        else:
            patterns.append(part)
    return patterns


def load_agents(project_root: Path, *, model_known: ModelCheck | None = None) -> Loaded[AgentDefinition]:
    """Every agent definition, one per name: the project's over the user's, `.code-puppy/` over `.agents/` over
    `.claude/`; each shadowed one is a note. `model_known` says why a `model` cannot be used (None when it can)."""
    loaded: Loaded[AgentDefinition] = Loaded()
    chosen: dict[str, AgentDefinition] = {}
    for folder, scope in folders(project_root, "agents"):
        for path in _markdown_files(folder, recursive=False):
            definition = _read_agent(path, scope, loaded.problems, model_known)
            if definition is None:
                continue
            if (winner := chosen.get(definition.name)) is not None:
                loaded.notes.append(
                    f"agent '{definition.name}' in {_display(path)} is shadowed by {_display(winner.path)}"
                )
                continue
            chosen[definition.name] = definition
    loaded.items = list(chosen.values())
    return loaded


def _read_agent(
    path: Path, scope: Scope, problems: list[Problem], model_known: ModelCheck | None
) -> AgentDefinition | None:
    if (read := read_frontmatter(path, problems, required=True)) is None:
        return None
    fields, body = read
    name = _text(fields.get("name")) or path.stem
    description = _text(fields.get("description"))
    if not description:
        problems.append(Problem(path, "no `description:` in its frontmatter; skipped"))
        return None
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]*", name) or name == "self":
        problems.append(Problem(path, f"'{name}' cannot be an agent's name (letters, digits, - _ . :); skipped"))
        return None
    model = _text(fields.get("model")) or None
    if model is not None and model_known is not None and (why := model_known(model)) is not None:
        problems.append(Problem(path, f"{why}; skipped"))
        return None
    raw_tools = fields.get("tools", fields.get("allowed-tools"))
    grant, unknown = parse_tools(raw_tools)
    for name_unknown in unknown:
        problems.append(Problem(path, f"unknown tool '{name_unknown}' dropped"))
    mode = _text(fields.get("permission_mode", fields.get("permissionMode"))) or None
    if mode is not None and mode not in BY_REACH:
        modes = ", ".join(BY_REACH)
        problems.append(Problem(path, f"unknown permission_mode '{mode}' ({modes}); skipped"))
        return None
    return AgentDefinition(
        name=name,
        description=" ".join(description.split()),
        instructions=body,
        path=path,
        scope=scope,
        model=model,
        grant=grant,
        permission_mode=mode,
        hooks=_frontmatter_hooks(path) if "hooks" in fields else None,
    )


def _frontmatter_hooks(path: Path) -> dict[str, Any] | None:
    """The `hooks:` mapping of a file's frontmatter, read as YAML (it nests); None when there is none to read."""
    import yaml

    try:
        block = path.read_text(encoding="utf-8").lstrip("\ufeff").split("\n---", 1)[0].removeprefix("---")
        data = yaml.safe_load(block)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    hooks: object = cast(dict[str, Any], data).get("hooks") if isinstance(data, dict) else None
    return cast(dict[str, Any], hooks) if isinstance(hooks, dict) else None


def load_skill_infos(project_root: Path) -> Loaded[SkillInfo]:
    """Each skill folder's name and description, one per name (as `load_agents` chooses)."""
    loaded: Loaded[SkillInfo] = Loaded()
    chosen: dict[str, SkillInfo] = {}
    for folder, scope in folders(project_root, "skills"):
        for skill_file in skill_files(folder):
            name = skill_file.parent.name
            if (read := read_frontmatter(skill_file, loaded.problems, required=True)) is None:
                continue
            fields = read[0]
            if (winner := chosen.get(name)) is not None:
                loaded.notes.append(f"skill '{name}' in {_display(skill_file)} is shadowed by {_display(winner.path)}")
                continue
            chosen[name] = SkillInfo(name, " ".join(_text(fields.get("description")).split()), skill_file, scope)
    loaded.items = list(chosen.values())
    return loaded


def skill_files(folder: Path) -> Iterator[Path]:
    """The `SKILL.md` of each skill folder directly inside `folder`, by name."""
    try:
        children = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError:
        return
    for child in children:
        if child.is_dir() and (skill := Path(child.path) / "SKILL.md").is_file():
            yield skill


def stricter_mode(user: str, definition: str | None) -> str:
    """The stricter of the user's mode and a definition's: a definition tightens, never loosens."""
    if definition is None:
        return user
    return min(user, definition, key=BY_REACH.index)


def _markdown_files(folder: Path, *, recursive: bool) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(folder.rglob("*.md") if recursive else folder.glob("*.md"))


def _text(value: str | list[str] | None) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else " ".join(value)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1].replace("\\n", "\n") if value[0] == '"' else value[1:-1]
    return value


def _display(path: Path) -> str:
    """`path` relative to the working directory when it is inside it, else with `~` for the home directory."""
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        pass
    try:
        return "~/" + path.relative_to(Path.home()).as_posix()
    except ValueError:
        return str(path)
