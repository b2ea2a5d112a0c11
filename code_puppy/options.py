"""`RunOptions`: what the command line asked of a session, the same for the chat and a headless run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the chat imports this before pydantic is loaded
    from code_puppy.config import PermissionMode


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    project_root: Path
    model: str | None = None
    permission_mode: PermissionMode | None = None
    allow: tuple[str, ...] = ()
    max_requests: int | None = None
    max_budget_usd: float | None = None
    continue_last: bool = False
    resume: str | None = None
    """A session to continue (`-r`): an id, a name, or a unique id prefix."""
    fork: bool = False
    """Continue a fork of the `-r`/`-c` session instead of the session itself (`--fork`)."""
    name: str | None = None
    """What to call the session (`--name`)."""
    no_mcp: bool = False
    no_plugins: bool = False
    debug: bool = False
    agent: str | None = None
    """A file-defined agent in charge from the start (`--agent NAME`)."""
