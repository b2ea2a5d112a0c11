"""The system prompt, sent as `instructions=` so history processors and compaction can never drop it."""

from __future__ import annotations

import datetime
import platform
from pathlib import Path

from pydantic_ai_harness.coder._instructions import INSTRUCTIONS as HARNESS_INSTRUCTIONS

_CODE_PUPPY = """\
You are code-puppy, a coding agent working in the user's terminal on the project below. Read before you \
change; keep edits focused; run the project's tests when you change code. Answer in Markdown, briefly: \
say what you did and what you verified."""


def build_instructions(project_root: Path) -> str:
    """The instructions for one agent; the date is day-precise so the prompt-cache prefix stays stable all day."""
    today = datetime.date.today().isoformat()
    environment = f"Project root: {project_root}\nPlatform: {platform.system()}\nToday's date: {today}"
    return f"{_CODE_PUPPY}\n\n{HARNESS_INSTRUCTIONS}\n{environment}"
