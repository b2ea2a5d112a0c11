"""shell_hooks: Claude-Code-compatible command hooks, configured in config.toml.

    [[plugins.shell_hooks.PreToolUse]]
    matcher = "shell|write_file"     # a regex matched against the whole tool name; Claude Code's names (Bash,
                                     # Write, Edit, Read, Grep, Glob) work too; "" or "*" matches every tool
    hooks = [{ type = "command", command = "python3 .hooks/guard.py", timeout = 30 }]

Events: PreToolUse, PostToolUse, UserPromptSubmit, Stop. Each matching command runs through the shell in the project
directory (also in `$CLAUDE_PROJECT_DIR` and `$CODE_PUPPY_PROJECT_DIR`) with the event as JSON on stdin:
`session_id`, `transcript_path` (null), `cwd`, `hook_event_name`, plus `tool_name`/`tool_input` (PreToolUse,
PostToolUse), `tool_response` (PostToolUse), `prompt` (UserPromptSubmit), `stop_hook_active` (Stop).

Exit 0 lets things go on (UserPromptSubmit: stdout is added to the prompt as context); exit 2 blocks with stderr as
the reason: PreToolUse blocks the call and the model is told, UserPromptSubmit blocks the prompt, Stop sends the
reason to the model as a follow-up prompt, PostToolUse shows it to the user (the call already ran). Exit 0 with
`{"decision": "block", "reason": …}` on stdout blocks the same way, as does PreToolUse's
`{"hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": …}}`. Any other exit code or a
timeout (default 60 s) is reported in one line and changes nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

import code_puppy
from code_puppy.plugins.options import plugin_options
from code_puppy.plugins.process import Completed, run_shell

CLAUDE_TOOL_NAMES = {
    "Bash": "shell",
    "Read": "read_file",
    "Write": "write_file",
    "Edit": "edit_file",
    "MultiEdit": "edit_file",
    "Grep": "grep",
    "Glob": "list_files",
    "LS": "list_files",
    "Task": "delegate_task",
}
"""Claude Code's tool names, so that matchers written for it select the same code-puppy tools."""


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
    UserPromptSubmit: list[Matcher] = []
    Stop: list[Matcher] = []


_config = Config()
_stop_hook_active = False
"""Whether the current run is the follow-up a Stop hook asked for (Claude Code's `stop_hook_active`)."""


@code_puppy.hookimpl
def startup(settings: Any) -> None:
    global _config
    _config = plugin_options(settings, "shell_hooks", Config)


@code_puppy.hookimpl
async def user_prompt_submit(prompt: str, session: Any) -> str | None:
    global _stop_hook_active
    _stop_hook_active = False
    context: list[str] = []
    for command, done in await _run("UserPromptSubmit", session, None, {"prompt": prompt}):
        if (reason := _block_reason(command, done)) is not None:
            raise code_puppy.PromptBlocked(reason)
        if done.returncode == 0 and done.stdout.strip():
            output = _json(done.stdout)
            extra = output.get("hookSpecificOutput", {}).get("additionalContext") if output else done.stdout
            if isinstance(extra, str) and extra.strip():
                context.append(extra.strip())
    return "\n\n".join([prompt, *context]) if context else None


@code_puppy.hookimpl
async def pre_tool_call(tool_name: str, args: dict[str, Any], session: Any) -> str | None:
    event = {"tool_name": tool_name, "tool_input": args}
    for command, done in await _run("PreToolUse", session, tool_name, event):
        if (reason := _block_reason(command, done)) is not None:
            return reason
    return None


@code_puppy.hookimpl
async def post_tool_call(tool_name: str, args: dict[str, Any], result: Any, session: Any) -> None:
    event = {"tool_name": tool_name, "tool_input": args, "tool_response": result}
    for command, done in await _run("PostToolUse", session, tool_name, event):
        if (reason := _block_reason(command, done)) is not None:
            _report("PostToolUse", command, f"says (after the call ran): {reason}")


@code_puppy.hookimpl
async def turn_end(session: Any) -> str | None:
    global _stop_hook_active
    results = await _run("Stop", session, None, {"stop_hook_active": _stop_hook_active})
    reasons = [reason for command, done in results if (reason := _block_reason(command, done)) is not None]
    _stop_hook_active = bool(reasons)
    return "\n\n".join(reasons) or None


async def _run(
    event_name: str, session: Any, tool_name: str | None, fields: dict[str, Any]
) -> list[tuple[str, Completed]]:
    """Run the event's matching commands at the same time; (command, how it ended) in config order."""
    commands = [
        command
        for matcher in getattr(_config, event_name)
        if tool_name is None or _matches(matcher.matcher, tool_name)
        for command in matcher.hooks
    ]
    if not commands:
        return []
    project = str(session.project_dir)
    event = {"session_id": session.id, "transcript_path": None, "cwd": project, "hook_event_name": event_name}
    stdin = json.dumps(event | fields, default=str)
    env = os.environ | {"CLAUDE_PROJECT_DIR": project, "CODE_PUPPY_PROJECT_DIR": project}
    runs = [run_shell(c.command, cwd=session.project_dir, timeout=c.timeout, stdin=stdin, env=env) for c in commands]
    async with session.tracked():  # what a hook changes is part of the turn's checkpoint, so a rewind undoes it
        results = list(zip(commands, await asyncio.gather(*runs), strict=True))
    for command, done in results:
        if done.returncode is None:
            _report(event_name, command.command, f"timed out after {command.timeout:g}s")
        elif done.returncode not in (0, 2):
            first = done.stderr.strip().splitlines()[0] if done.stderr.strip() else "no output"
            _report(event_name, command.command, f"exited {done.returncode}: {first}")
    return [(command.command, done) for command, done in results]


def _matches(pattern: str, tool_name: str) -> bool:
    if pattern in ("", "*"):
        return True
    names = [tool_name, *(claude for claude, ours in CLAUDE_TOOL_NAMES.items() if ours == tool_name)]
    try:
        return any(re.fullmatch(pattern, name) for name in names)
    except re.error:
        return pattern in names


def _block_reason(command: str, done: Completed) -> str | None:
    """Why the hook blocks (exit 2: its stderr; exit 0: a JSON decision), or None."""
    if done.returncode == 2:
        return done.stderr.strip() or f"blocked by the hook `{command}`"
    if done.returncode != 0 or not (output := _json(done.stdout)):
        return None
    specific = output.get("hookSpecificOutput")
    if isinstance(specific, dict) and specific.get("permissionDecision") == "deny":
        return str(specific.get("permissionDecisionReason") or f"denied by the hook `{command}`")
    if output.get("decision") == "block":
        return str(output.get("reason") or f"blocked by the hook `{command}`")
    return None


def _json(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _report(event_name: str, command: str, what: str) -> None:
    print(f"code-puppy: shell_hooks: {event_name} hook `{command}` {what}", file=sys.stderr, flush=True)
