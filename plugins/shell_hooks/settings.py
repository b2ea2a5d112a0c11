"""Where hooks are configured: `[plugins.shell_hooks]` in config.toml, Claude Code's settings files (the user's,
and a trusted project's), and a running file-defined agent's frontmatter `hooks:`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError


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
    from code_puppy.permissions.claude_settings import claude_settings_files

    files, _ = claude_settings_files(project_dir)  # a file that cannot be read is named by the permission rules
    merged: dict[str, list[Matcher]] = {}
    for file in files:
        if not file.data.get("hooks"):
            continue
        if not file.trusted:
            note = f"code-puppy: note: {file.shown}: its hooks do not run: {file.why_not} (`code-puppy trust`)"
            print(note, file=sys.stderr)
            continue
        for name, matchers in _read_claude_hooks(file.data["hooks"], file.shown).items():
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


def _read_claude_hooks(hooks: Any, where: str) -> dict[str, list[Matcher]]:
    """The `hooks` of one Claude Code settings file, for the events code-puppy has; a bad one is one line."""
    try:
        return _known_events(hooks, where)
    except (ValidationError, AttributeError, TypeError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"code-puppy: warning: {where}: its hooks cannot be read ({first}); ignored", file=sys.stderr)
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
