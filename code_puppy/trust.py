"""Project trust: whether code-puppy may act on what a project's own files configure (MCP servers for now).

A project is trusted when `trusted_projects.json` in the config directory (`$CODE_PUPPY_HOME` when set) is a JSON
list holding the project's absolute path. Until the trust prompt exists, users add paths to that file by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

from code_puppy.config import config_dir

TRUSTED_PROJECTS_FILE = "trusted_projects.json"


def project_is_trusted(project_root: Path) -> bool:
    """Whether the user listed `project_root` as trusted; an unreadable or malformed file trusts nothing."""
    try:
        listed = json.loads((config_dir() / TRUSTED_PROJECTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(listed, list):
        return False
    root = project_root.resolve()
    return any(isinstance(path, str) and Path(path).expanduser().resolve() == root for path in listed)  # pyright: ignore[reportUnknownVariableType]
