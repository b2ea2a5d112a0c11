"""Project trust: whether code-puppy may run what a project's own files configure.

`trusted_projects.json` in the config directory (`$CODE_PUPPY_HOME` when set) is a JSON list. An entry is either a
project's absolute path, which trusts the project's configuration (MCP servers, history processors, `[permissions]`,
`[plugins.NAME]` tables), or an
object `{"path": ..., "plugins_sha256": ...}`, which trusts it too and also the content of its
`.code-puppy/plugins/` folder as it was when recorded: once that content changes, the user is asked again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal, cast

from code_puppy.paths import config_dir

TRUSTED_PROJECTS_FILE = "trusted_projects.json"
PluginsTrust = Literal["trusted", "untrusted", "changed"]


def project_plugins_dir(project_root: Path) -> Path:
    """The folder of a project's own plugins."""
    return project_root / ".code-puppy" / "plugins"


def project_is_trusted(project_root: Path) -> bool:
    """Whether the user listed `project_root` as trusted; an unreadable or malformed file trusts nothing."""
    return _entry(project_root) is not None


def plugins_trust(project_root: Path) -> PluginsTrust:
    """Whether the project's plugins folder is trusted as it is now, was trusted with other content, or never was."""
    entry = _entry(project_root)
    if not isinstance(entry, dict) or "plugins_sha256" not in entry:
        return "untrusted"
    return "trusted" if entry["plugins_sha256"] == plugins_digest(project_root) else "changed"


def trust_project(project_root: Path) -> str:
    """Trust the project and the current content of its plugins folder; returns the recorded SHA-256."""
    root = project_root.resolve()
    digest = plugins_digest(root)
    entries = [entry for entry in _entries() if _path_of(entry) != root]
    entries.append({"path": str(root), "plugins_sha256": digest})
    path = config_dir() / TRUSTED_PROJECTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")
    temporary.replace(path)
    return digest


def plugins_digest(project_root: Path) -> str:
    """SHA-256 over the plugins folder's files (relative paths and contents; bytecode caches left out)."""
    folder = project_plugins_dir(project_root)
    digest = hashlib.sha256()
    files = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.relative_to(folder).parts)
    for file in files:
        digest.update(file.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


def _entries() -> list[Any]:
    try:
        listed = json.loads((config_dir() / TRUSTED_PROJECTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return listed if isinstance(listed, list) else []  # pyright: ignore[reportUnknownVariableType]


def _path_of(entry: Any) -> Path | None:
    path: Any = cast(dict[str, Any], entry).get("path") if isinstance(entry, dict) else entry
    return Path(path).expanduser().resolve() if isinstance(path, str) else None


def _entry(project_root: Path) -> Any:
    """The newest entry naming `project_root`, or None."""
    root = project_root.resolve()
    matching = [entry for entry in _entries() if _path_of(entry) == root]
    return matching[-1] if matching else None
