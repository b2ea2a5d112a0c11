"""Agents, commands and skills defined in files, in the formats other coding agents already use (issue 15).

Read from the project and the user's folders, `.code-puppy/` first, then `.agents/`, then `.claude/` (Claude Code's
layout): `agents/**/*.md` (a sub-agent, in any sub-folder, named by its frontmatter `name`: `description`, `model`,
`tools`/`allowed-tools`, `disallowedTools`, `permission_mode`; the body is its instructions), `commands/**/*.md` (a
slash command: `review.md` is `/review`, `frontend/review.md` is `/frontend:review`) and `skills/NAME/SKILL.md` (Agent
Skills). The user's folders are `agents/`, `commands/` and `skills/` in code-puppy's config directory, and, unless
`CODE_PUPPY_HOME` relocates everything, `~/.agents/`, `~/.claude/` and Codex's `~/.codex/prompts` and `~/.codex/skills`.

Nothing here imports pydantic-ai: the chat lists commands before its heavy imports finish. Frontmatter is read as YAML,
leniently where YAML refuses (`frontmatter.py`). A file that cannot be read is one `Problem` naming it, and the rest
still load.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar, cast

from code_puppy.definitions.frontmatter import FrontmatterError, split_frontmatter, split_items
from code_puppy.options import BY_REACH
from code_puppy.paths import code_puppy_home, config_dir

Scope = Literal["project", "user"]
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
NOT_DENIED = frozenset({"multiedit", "notebookedit", "notebookread", "enterplanmode", "exitplanmode"})
"""Claude Code tools a `disallowedTools` list may name that take nothing from code-puppy: it has no notebook or plan
mode tools, and its `edit_file` is Claude Code's `Edit` (denying `MultiEdit` alone leaves single edits)."""
_BASH_PATTERN = re.compile(r"^bash\((.*)\)$", re.IGNORECASE | re.DOTALL)


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
    denied: frozenset[str] = frozenset()
    """`disallowedTools`: never offered, whatever `tools` grants (MCP names as in `tools`)."""

    def without(self, denied: frozenset[str]) -> ToolGrant:
        """This grant with `denied` taken away."""
        if not denied:
            return self
        tools = None if self.tools is None else self.tools - denied
        patterns = self.shell_patterns if tools is None or "shell" in tools else None
        return ToolGrant(tools, patterns, self.denied | denied)

    def describe(self) -> str:
        if self.tools is None:
            return f"all tools except {', '.join(sorted(self.denied))}" if self.denied else "all tools"
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


def parse_tools(raw: str | list[str] | None, *, allow_mcp: bool = True) -> tuple[ToolGrant, list[str]]:
    """A `tools`/`allowed-tools` value as a grant, and the names it did not know (None/empty: all tools)."""
    if raw is None or raw == [] or raw == "*":
        return ToolGrant(), []
    items = raw if isinstance(raw, list) else split_items(raw)
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


def load_agents(project_root: Path) -> Loaded[AgentDefinition]:
    """Every agent definition, one per name: the project's over the user's, `.code-puppy/` over `.agents/` over
    `.claude/`, and within one folder a file nearer the top over one deeper in its sub-folders (Claude Code reads them
    all; the folder is not part of the name); each shadowed one is a note. Markdown files without frontmatter (a
    collection's README) are not agents: one note per folder names them. Models are not checked here: the run falls
    back to the session's model for one it cannot use, and says so (`Project`)."""
    loaded: Loaded[AgentDefinition] = Loaded()
    chosen: dict[str, AgentDefinition] = {}
    for folder, scope in folders(project_root, "agents"):
        not_agents: list[Path] = []
        for path in _markdown_files(folder, recursive=True):
            definition = _read_agent(path, scope, loaded.problems, not_agents)
            if definition is None:
                continue
            if (winner := chosen.get(definition.name)) is not None:
                loaded.notes.append(
                    f"agent '{definition.name}' in {_display(path)} is shadowed by {_display(winner.path)}"
                )
                continue
            chosen[definition.name] = definition
        if not_agents:
            names = [path.relative_to(folder).as_posix() for path in not_agents]
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            loaded.notes.append(f"{_display(folder)}: {shown} without frontmatter, not read as agents")
    loaded.items = list(chosen.values())
    return loaded


def _read_agent(path: Path, scope: Scope, problems: list[Problem], not_agents: list[Path]) -> AgentDefinition | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem(path, f"cannot be read ({exc.__class__.__name__}); skipped"))
        return None
    if not text.lstrip("\ufeff").startswith("---"):
        not_agents.append(path)
        return None
    try:
        fields, body = split_frontmatter(text, required=True)
    except FrontmatterError as exc:
        problems.append(Problem(path, f"broken frontmatter: {exc}; skipped"))
        return None
    name = _text(fields.get("name")) or path.stem
    description = _text(fields.get("description"))
    if not description:
        problems.append(Problem(path, "no `description:` in its frontmatter; skipped"))
        return None
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]*", name) or name == "self":
        problems.append(Problem(path, f"'{name}' cannot be an agent's name (letters, digits, - _ . :); skipped"))
        return None
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
        model=_text(fields.get("model")) or None,
        grant=_agent_grant(path, fields, problems),
        permission_mode=mode,
        hooks=_frontmatter_hooks(text) if re.search(r"(?m)^hooks:", text) else None,
    )


def _agent_grant(path: Path, fields: dict[str, str | list[str]], problems: list[Problem]) -> ToolGrant:
    """`tools` (absent: all tools; `[]`: none at all) less `disallowedTools`; each unknown name one problem."""
    raw_tools = fields.get("tools", fields.get("allowed-tools"))
    grant, unknown = (ToolGrant(frozenset()), []) if raw_tools == [] else parse_tools(raw_tools)
    for name in unknown:
        problems.append(Problem(path, f"unknown tool '{name}' dropped"))
    raw_denied = fields.get("disallowedTools", fields.get("disallowed-tools"))
    if raw_denied is None or raw_denied == []:
        return grant
    items = raw_denied if isinstance(raw_denied, list) else split_items(raw_denied)
    denied, unknown = parse_tools([item for item in items if item.strip().casefold() not in NOT_DENIED])
    for name in unknown:
        problems.append(Problem(path, f"unknown tool '{name}' in disallowedTools ignored"))
    if denied.shell_patterns is not None:
        patterns = ", ".join(denied.shell_patterns)
        problems.append(Problem(path, f"disallowedTools names commands ({patterns}): the whole shell is taken away"))
    return grant.without(denied.tools or frozenset())


def _frontmatter_hooks(text: str) -> dict[str, Any] | None:
    """The `hooks:` mapping of a file's frontmatter, read as YAML (it nests); None when there is none to read."""
    import yaml

    try:
        data = yaml.safe_load(text.lstrip("\ufeff").split("\n---", 1)[0].removeprefix("---"))
    except yaml.YAMLError:
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
    """The markdown files in `folder` (and its sub-folders when `recursive`): shallower first, then by path."""
    if not folder.is_dir():
        return []
    found = folder.rglob("*.md") if recursive else folder.glob("*.md")
    return sorted((path for path in found if path.is_file()), key=lambda path: (len(path.parts), path.parts))


def _text(value: str | list[str] | None) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else " ".join(value)


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
