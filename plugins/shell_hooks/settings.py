"""Where hooks are configured: `[plugins.shell_hooks]` in config.toml, Claude Code's settings files (the user's,
and a trusted project's), and a running file-defined agent's frontmatter `hooks:`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

CLAUDE_SETTINGS = (".claude/settings.json", ".claude/settings.local.json")
"""A project's Claude Code settings files, relative to its root."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Command(_Strict):
    type: Literal["command"] = "command"
    command: str
    timeout: float = Field(default=60, gt=0)
    """Seconds before the command is killed."""


class Matcher(_Strict):
    matcher: str = ""
    hooks: list[Command]


class Config(_Strict):
    PreToolUse: list[Matcher] = []
    PostToolUse: list[Matcher] = []
    PostToolUseFailure: list[Matcher] = []
    UserPromptSubmit: list[Matcher] = []
    Stop: list[Matcher] = []
    SubagentStart: list[Matcher] = []
    SubagentStop: list[Matcher] = []
    SessionStart: list[Matcher] = []
    SessionEnd: list[Matcher] = []
    PreCompact: list[Matcher] = []
    Notification: list[Matcher] = []
    PermissionRequest: list[Matcher] = []


EVENTS = tuple(Config.model_fields)
"""The events code-puppy runs hooks for."""
_claude: dict[Path, Config] = {}
"""Hooks from Claude Code's settings files, by project directory; read once."""
_named: set[str] = set()
"""The unsupported events already named to the user, so each is named once."""


def claude_config(project_dir: Path) -> Config:
    """The hooks of Claude Code's settings files for this project: the user's, and the project's once trusted."""
    if project_dir in _claude:
        return _claude[project_dir]
    from code_puppy.paths import code_puppy_home
    from code_puppy.trust import project_trust

    files = [] if code_puppy_home() is not None else [Path.home() / ".claude" / "settings.json"]
    trust = project_trust(project_dir)
    for relative in CLAUDE_SETTINGS:
        if not (project_dir / relative).is_file():
            continue
        if trust.trusts(relative):
            files.append(project_dir / relative)
        elif _has_hooks(project_dir / relative):
            why = trust.why_not(relative)
            print(f"code-puppy: note: {relative}: its hooks do not run: {why} (`code-puppy trust`)", file=sys.stderr)
    merged: dict[str, list[Matcher]] = {}
    for path in files:
        for name, matchers in _read_claude_hooks(path).items():
            merged.setdefault(name, []).extend(matchers)
    _claude[project_dir] = Config.model_validate(merged)
    return _claude[project_dir]


def agent_config(hooks: Any, where: str) -> Config:
    """A file-defined agent's frontmatter `hooks:` (Claude Code's shape); a bad one is one line and runs nothing."""
    try:
        return Config.model_validate(_known_events(hooks, where))
    except (ValidationError, AttributeError, TypeError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"code-puppy: warning: {where}: its hooks cannot be read ({first}); ignored", file=sys.stderr)
        return Config()


def _has_hooks(path: Path) -> bool:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and bool(data.get("hooks"))  # pyright: ignore[reportUnknownMemberType]


def _read_claude_hooks(path: Path) -> dict[str, list[Matcher]]:
    """The `hooks` of one Claude Code settings file, for the events code-puppy has; a bad file is one line."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        hooks = data.get("hooks", {}) if isinstance(data, dict) else {}
        return _known_events(hooks, str(path))
    except (OSError, ValueError, ValidationError, AttributeError, TypeError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"code-puppy: warning: {path}: its hooks cannot be read ({first}); ignored", file=sys.stderr)
        return {}


def _known_events(hooks: Any, where: str) -> dict[str, list[Matcher]]:
    """Claude Code's `hooks` object, for the events code-puppy has; each other event named once, as not run."""
    if not isinstance(hooks, dict):
        return {}
    known: dict[str, list[Matcher]] = {}
    for name, matchers in hooks.items():  # pyright: ignore[reportUnknownVariableType]
        if name in EVENTS:
            known[str(name)] = [Matcher.model_validate(_known_keys(matcher, where)) for matcher in matchers]  # pyright: ignore[reportUnknownVariableType]
        elif name not in _named:
            _named.add(str(name))
            print(f"code-puppy: note: {where}: {name} hooks do not run: code-puppy has no such event", file=sys.stderr)
    return known


def _known_keys(matcher: Any, where: str) -> dict[str, Any]:
    """A Claude Code matcher group without the keys code-puppy does not act on, and without the hooks that are not
    commands (`prompt`, `http`, `agent`, `mcp_tool`: each kind named once, as not run)."""
    hooks: list[dict[str, Any]] = []
    for hook in matcher["hooks"]:
        kind = hook.get("type", "command")
        if kind == "command":
            hooks.append({key: hook[key] for key in ("type", "command", "timeout") if key in hook})
        elif f"type {kind}" not in _named:
            _named.add(f"type {kind}")
            note = f"code-puppy: note: {where}: `{kind}` hooks do not run: code-puppy runs command hooks"
            print(note, file=sys.stderr)
    return {"matcher": matcher.get("matcher", "") or "", "hooks": hooks}
