"""verify_loop: after a turn, run a check command; while it fails, hand its output back to the model as a follow-up.

    [plugins.verify_loop]
    command = "pytest -q"     # runs through the shell in the project directory, as the agent's own commands run (in
                              # the sandbox in `auto` mode, without secrets); nothing happens without it
    max_attempts = 3          # follow-ups per user turn while the check keeps failing
    timeout = 600             # seconds before the check is killed (counts as a failure)
    when = "changed"          # "changed": only after runs that called a tool able to change files; "always"
    tail_lines = 60           # how much of the failing output the model gets

The follow-up runs through `turn_end`, so the continuation loop bounds it by `[plugins] max_continuations` too.
"""

from __future__ import annotations

import sys
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

import code_puppy
from code_puppy.plugins.options import plugin_options
from code_puppy.tools import ALWAYS_ALLOWED_TOOL_NAMES


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str | None = None
    max_attempts: int = Field(default=3, ge=0)
    timeout: float = Field(default=600, gt=0)
    when: Literal["changed", "always"] = "changed"
    tail_lines: int = Field(default=60, gt=0)


_config = Config()
_attempts = 0
"""Follow-ups sent in this user turn."""
_changed = False
"""Whether a tool that can change files ran since the last check."""


@code_puppy.hookimpl
def startup(settings: Any) -> None:
    global _config
    _config = plugin_options(settings, "verify_loop", Config)


@code_puppy.hookimpl
def user_prompt_submit() -> None:
    global _attempts
    _attempts = 0


@code_puppy.hookimpl
def post_tool_call(tool_name: str) -> None:
    global _changed
    if tool_name not in ALWAYS_ALLOWED_TOOL_NAMES:
        _changed = True


@code_puppy.hookimpl
async def turn_end(session: Any) -> str | None:
    global _attempts, _changed
    command = _config.command
    if command is None or (_config.when == "changed" and not _changed):
        return None
    _changed = False
    # It runs code the model wrote: as the model's own commands run, sandboxed when they are.
    done = await session.run_agent_command(command, timeout=_config.timeout, merge_stderr=True)
    if done.returncode == 0:
        _attempts = 0
        return None
    if _attempts >= _config.max_attempts:
        print(
            f"code-puppy: verify_loop: `{command}` still fails after {_attempts} follow-ups; stopping there",
            file=sys.stderr,
            flush=True,
        )
        return None
    _attempts += 1
    if done.returncode is None:
        outcome, output = f"timed out after {_config.timeout:g}s", ""
    else:
        outcome, output = f"failed (exit {done.returncode})", done.stdout.rstrip()
    tail = "\n".join(output.splitlines()[-_config.tail_lines :]) or "(no output)"
    return (
        f"The check `{command}` {outcome} after your changes. Find and fix the cause, then finish; do not skip or "
        f"weaken the check. The last lines of its output:\n\n```\n{tail}\n```"
    )
