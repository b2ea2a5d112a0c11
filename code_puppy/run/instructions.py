"""The system prompt, sent as `instructions=` so history processors and compaction can never drop it.

It mentions a tool only when the model is offered it (`offered`): an agent or command without the shell is not told
to run tests or start commands, one without the file tools is not told to edit with them (a wasted round trip per
promise otherwise).
"""

from __future__ import annotations

import datetime
import platform
from collections.abc import Callable
from pathlib import Path

OPENING = """\
You are code-puppy, a coding agent working in the user's terminal on the project below. You read, search, change and \
test its code with your tools, and you keep working until the task is done or you are blocked.

How to work:
- Read before you change: find the code involved, the project's conventions and any instructions it keeps \
(AGENTS.md, CLAUDE.md). Fix causes, not symptoms; keep each change focused and as small as it can be."""
TOOL_LINES: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("read_file", "edit_file", "shell"),
        "- Prefer the file tools for reading and editing files; use the shell for building, testing and everything "
        "else.",
    ),
    (
        ("shell",),
        "- After changing code, run the project's relevant tests, linters and type checks, and fix what they report.",
    ),
)
"""Lines that name tools, each with the tools it needs offered."""
ASKING = """\
- Ask the user only for what you cannot find out yourself: missing requirements, credentials, a decision with \
consequences, or approval for something that cannot be undone. Decide small ambiguities yourself and say so."""
BACKGROUND = """\
- A command that keeps running (a server, a watcher) is started in the background and checked until it is ready; \
stop it when it is no longer needed."""
CLOSING = "Answer in Markdown, briefly: what you did, what you verified and how, and what is left or uncertain."
INSTRUCTIONS = "\n".join([OPENING, *(line for _, line in TOOL_LINES), ASKING, BACKGROUND, "", CLOSING])
"""code-puppy's instructions with every tool offered."""


def build_instructions(
    project_root: Path,
    *,
    persona: str | None = None,
    name: str | None = None,
    offered: Callable[[str], bool] | None = None,
) -> str:
    """The instructions for one agent; the date is day-precise so the prompt-cache prefix stays stable all day.

    A file-defined agent (`name`) brings its own `persona` in place of code-puppy's; the environment stays. `offered`
    says whether the model has a tool (None: every tool).
    """
    today = datetime.date.today().isoformat()
    environment = f"Project root: {project_root}\nPlatform: {platform.system()}\nToday's date: {today}"
    if name is not None:
        role = f"You are the agent '{name}', working in the user's terminal on the project below."
        return f"{role}\n\n{persona or ''}\n\n{environment}"
    if offered is None:
        return f"{INSTRUCTIONS}\n\n{environment}"
    has = offered
    lines = [line for tools, line in TOOL_LINES if all(has(tool) for tool in tools)]
    background = [BACKGROUND] if has("shell") else []
    return "\n".join([OPENING, *lines, ASKING, *background, "", CLOSING]) + f"\n\n{environment}"
