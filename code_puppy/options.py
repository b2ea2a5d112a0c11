"""`RunOptions`: what the command line asked of a session, the same for the chat and a headless run; the permission
modes. Imports nothing heavy: the command line reads the modes before pydantic is loaded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

PermissionMode = Literal["ask", "accept-edits", "auto", "yolo", "read-only"]
"""What tools may do without asking (README "Permissions"). A new mode is added here, in `BY_REACH`, in the
permission policy's table (`permissions/policy.py`) and in the editors' descriptions (`acp/live.py`)."""
PERMISSION_MODES: tuple[PermissionMode, ...] = get_args(PermissionMode)
"""Every mode, as the command line and the config offer them."""
BY_REACH: tuple[PermissionMode, ...] = ("read-only", "ask", "accept-edits", "auto", "yolo")
"""The modes from the one that lets the least run unasked to the one that lets the most: a file-defined agent or
command narrows the user's mode along it, never widens it."""
assert sorted(BY_REACH) == sorted(PERMISSION_MODES)
CLAUDE_MODES: dict[str, PermissionMode] = {
    "default": "ask",
    "acceptEdits": "accept-edits",
    "plan": "read-only",
    "bypassPermissions": "yolo",
}
"""Claude Code's permission modes, as code-puppy's: `--permission-mode acceptEdits` means `accept-edits`."""


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
    allowed_tools: tuple[str, ...] = ()
    """Claude Code permission rules that let calls run without asking (`--allowedTools`, `Bash(git diff:*)`)."""
    disallowed_tools: tuple[str, ...] = ()
    """Claude Code permission rules that deny calls; a bare tool name takes the tool away (`--disallowedTools`)."""
    append_system_prompt: str | None = None
    """Text added to the instructions of every request (`--append-system-prompt`)."""
    first_prompt: str | None = None
    """What the chat sends as its first turn (`code-puppy "fix the bug"`)."""
    durable: bool = False
    """Run the headless turn as a durable run (`--durable`; `[run] durable` too)."""
    durable_run: str | None = None
    """The interrupted durable run this invocation resumes (`code-puppy runs resume ID`)."""
