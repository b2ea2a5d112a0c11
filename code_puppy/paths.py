"""Where code-puppy keeps things (DESIGN §3 "Locations"), without importing pydantic: the chat needs them before
its prompt shows, and `config.py` re-exports them."""

from __future__ import annotations

import os
from pathlib import Path


def code_puppy_home() -> Path | None:
    """The `CODE_PUPPY_HOME` root, when set."""
    home = os.environ.get("CODE_PUPPY_HOME")
    return Path(home).expanduser() if home else None


def config_dir() -> Path:
    """Where config.toml and user plugins live."""
    if home := code_puppy_home():
        return home
    import platformdirs

    return Path(platformdirs.user_config_dir("code-puppy"))


def data_dir() -> Path:
    """Where sessions.db and prompt history live."""
    if home := code_puppy_home():
        return home
    import platformdirs

    return Path(platformdirs.user_data_dir("code-puppy"))


def find_project_root(start: Path) -> Path:
    """The nearest ancestor holding `.git` or `.code-puppy`, else `start` itself."""
    start = start.resolve()
    for directory in (start, *start.parents):
        if (directory / ".git").exists() or (directory / ".code-puppy").is_dir():
            return directory
    return start
