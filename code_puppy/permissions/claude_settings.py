"""Claude Code's settings files as code-puppy reads them: which files, in which order, and which of them the user
trusts. Every reader of those files (the permission rules here, the bundled shell_hooks plugin's hooks) takes them
from `claude_settings_files`, so that they agree on what is read and when.

The user's `~/.claude/settings.json` is read unless `CODE_PUPPY_HOME` relocates everything (a relocated code-puppy
does not reach into the user's own home); then the project's `.claude/settings.json` and `.claude/settings.local.json`,
later files adding to earlier ones as in Claude Code. A project file is `trusted` only when its bytes, as read here,
are the ones `code-puppy trust` recorded (`code_puppy.trust`), so it cannot change between the check and the use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from code_puppy.paths import code_puppy_home
from code_puppy.trust import project_trust, trusted_content

CLAUDE_SETTINGS = (".claude/settings.json", ".claude/settings.local.json")
"""A project's Claude Code settings files, relative to its root, in the order they are read."""
USER_SETTINGS = "~/.claude/settings.json"
"""The user's Claude Code settings file, as notes name it."""


@dataclass(frozen=True)
class ClaudeSettingsFile:
    """One Claude Code settings file as read."""

    path: Path
    shown: str
    """How notes name it: `~/.claude/settings.json`, or project-relative (`.claude/settings.json`)."""
    data: dict[str, Any]
    """Its top-level JSON object."""
    trusted: bool
    """The user's own file, or a project file trusted as it is now: what widens what code-puppy does may come from
    it (hooks that run commands, allow rules, a default mode)."""
    why_not: str = ""
    """Why a project file is not trusted, as the start of a one-line note; empty when it is."""


def claude_settings_files(project_root: Path) -> tuple[list[ClaudeSettingsFile], list[str]]:
    """The Claude Code settings files of this project and user that exist, in reading order, and one warning line for
    each that cannot be read (not JSON, not an object); those are left out."""
    candidates: list[tuple[Path, str, bool]] = []
    if code_puppy_home() is None:
        candidates.append((Path.home() / ".claude" / "settings.json", USER_SETTINGS, False))
    candidates += [(project_root / relative, relative, True) for relative in CLAUDE_SETTINGS]
    files: list[ClaudeSettingsFile] = []
    warnings: list[str] = []
    for path, shown, in_project in candidates:
        if not path.is_file():
            continue
        try:
            content = path.read_bytes()
            data: Any = json.loads(content)
        except (OSError, ValueError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            warnings.append(f"{shown} cannot be read ({first}); code-puppy ignores it")
            continue
        if not isinstance(data, dict):
            warnings.append(f"{shown} is not a JSON object; code-puppy ignores it")
            continue
        trusted = not in_project or trusted_content(project_root, shown, content)
        why_not = "" if trusted else project_trust(project_root).why_not(shown)
        files.append(ClaudeSettingsFile(path, shown, cast(dict[str, Any], data), trusted, why_not))
    return files, warnings
