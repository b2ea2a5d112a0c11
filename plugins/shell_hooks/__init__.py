"""shell_hooks: Claude-Code-compatible command hooks, configured in config.toml.

    [[plugins.shell_hooks.PreToolUse]]
    matcher = "shell|write_file"     # a regex matched against the whole tool name; Claude Code's names (Bash,
                                     # Write, Edit, Read, Grep, Glob) work too; "" or "*" matches every tool
    hooks = [{ type = "command", command = "python3 .hooks/guard.py", timeout = 30 }]

Events: PreToolUse, PostToolUse, UserPromptSubmit, Stop. Each matching command runs through the shell in the project
directory (also in `$CLAUDE_PROJECT_DIR` and `$CODE_PUPPY_PROJECT_DIR`) with the event as JSON on stdin:
`session_id`, `transcript_path` (null), `cwd`, `hook_event_name`, plus `tool_name`/`tool_input` (PreToolUse,
PostToolUse), `tool_response` (PostToolUse), `prompt` (UserPromptSubmit), `stop_hook_active` (Stop).

Hooks in Claude Code's own files are read too, so a repository set up for Claude Code keeps its hooks: the user's
`~/.claude/settings.json` (unless `CODE_PUPPY_HOME` relocates everything) and the project's `.claude/settings.json`
and `.claude/settings.local.json`, the project's only once `code-puppy trust` recorded them as they are (they run
commands). Those hooks get the event as Claude Code sends it: its tool names (`Bash`, `Write`, `Edit`, `Read`, …) in
`tool_name`, its field names in `tool_input` (`file_path`, `old_string`/`new_string`, `content`, `command`), and
`transcript_path` naming a JSONL export of the session (one pydantic-ai message per line).

Exit 0 lets things go on (UserPromptSubmit: stdout is added to the prompt as context); exit 2 blocks with stderr as
the reason: PreToolUse blocks the call and the model is told, UserPromptSubmit blocks the prompt, Stop sends the
reason to the model as a follow-up prompt, PostToolUse shows it to the user (the call already ran). Exit 0 with
`{"decision": "block", "reason": …}` on stdout blocks the same way, as does PreToolUse's
`{"hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": …}}`. Any other exit code (a crash)
or a timeout (default 60 s) is reported in one line, with the last line of stderr, and blocks nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

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
CLAUDE_NAME_OF = {"shell": "Bash", "read_file": "Read", "write_file": "Write", "edit_file": "Edit", "grep": "Grep"}
CLAUDE_NAME_OF |= {"list_files": "Glob", "delegate_task": "Task", "create_directory": "Bash"}
"""The name a hook from Claude Code's files is told for each code-puppy tool."""
CLAUDE_FIELDS = {"path": "file_path", "old_text": "old_string", "new_text": "new_string"}
"""code-puppy's file-tool argument names, as Claude Code's hooks read them."""
CLAUDE_SETTINGS = (".claude/settings.json", ".claude/settings.local.json")
"""A project's Claude Code settings files, relative to its root."""


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


@dataclass(frozen=True)
class Hook:
    command: Command
    claude: bool
    """From Claude Code's settings files: sent Claude Code's tool and field names."""


_config = Config()
_claude: dict[Path, Config] = {}
"""Hooks from Claude Code's settings files, by project directory; read once."""
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
            extra = output.get("hookSpecificOutput", {}).get("additionalContext") if output is not None else done.stdout
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
    hooks = [
        Hook(command, claude)
        for config, claude in ((_config, False), (_claude_config(Path(session.project_dir)), True))
        for matcher in getattr(config, event_name)
        if tool_name is None or _matches(matcher.matcher, tool_name)
        for command in matcher.hooks
    ]
    if not hooks:
        return []
    project = str(session.project_dir)
    event = {"session_id": session.id, "transcript_path": None, "cwd": project, "hook_event_name": event_name}
    ours = json.dumps(event | fields, default=str)
    theirs = ours
    if any(hook.claude for hook in hooks):
        theirs = json.dumps(event | _as_claude(fields) | {"transcript_path": _transcript(session)}, default=str)
    env = os.environ | {"CLAUDE_PROJECT_DIR": project, "CODE_PUPPY_PROJECT_DIR": project}
    runs = [
        run_shell(
            hook.command.command,
            cwd=session.project_dir,
            timeout=hook.command.timeout,
            stdin=theirs if hook.claude else ours,
            env=env,
        )
        for hook in hooks
    ]
    commands = [hook.command for hook in hooks]
    async with session.tracked():  # what a hook changes is part of the turn's checkpoint, so a rewind undoes it
        results = list(zip(commands, await asyncio.gather(*runs), strict=True))
    for command, done in results:
        if done.returncode is None:
            _report(event_name, command.command, f"timed out after {command.timeout:g}s")
        elif done.returncode not in (0, 2):
            # A crash's last line says what went wrong (a Python traceback's first says nothing).
            last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output"
            _report(event_name, command.command, f"exited {done.returncode}: {last}")
    return [(command.command, done) for command, done in results]


def _claude_config(project_dir: Path) -> Config:
    """The hooks of Claude Code's settings files for this project: the user's, and the project's once trusted."""
    if project_dir in _claude:
        return _claude[project_dir]
    from code_puppy.paths import code_puppy_home
    from code_puppy.trust import project_trust

    files = [] if code_puppy_home() is not None else [Path.home() / ".claude" / "settings.json"]
    trust = project_trust(project_dir)
    for relative in CLAUDE_SETTINGS:
        if not (project_dir / relative).is_file():
            continue
        if trust.trusts(relative):
            files.append(project_dir / relative)
        elif _has_hooks(project_dir / relative):
            why = trust.why_not(relative)
            print(f"code-puppy: note: {relative}: its hooks do not run: {why} (`code-puppy trust`)", file=sys.stderr)
    merged: dict[str, list[Matcher]] = {}
    for path in files:
        for name, matchers in _read_claude_hooks(path).items():
            merged.setdefault(name, []).extend(matchers)
    _claude[project_dir] = Config.model_validate(merged)
    return _claude[project_dir]


def _has_hooks(path: Path) -> bool:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and bool(data.get("hooks"))  # pyright: ignore[reportUnknownMemberType]


def _read_claude_hooks(path: Path) -> dict[str, list[Matcher]]:
    """The `hooks` of one Claude Code settings file, for the events code-puppy has; a bad file is one line."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        hooks = data.get("hooks", {}) if isinstance(data, dict) else {}
        events = Config.model_fields
        return {
            name: [Matcher.model_validate(_known_keys(matcher)) for matcher in matchers]
            for name, matchers in (hooks.items() if isinstance(hooks, dict) else [])
            if name in events
        }
    except (OSError, ValueError, ValidationError, AttributeError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"code-puppy: warning: {path}: its hooks cannot be read ({first}); ignored", file=sys.stderr)
        return {}


def _known_keys(matcher: Any) -> dict[str, Any]:
    """A Claude Code matcher group without the keys code-puppy does not act on (a hook's `type` other than
    `command` is rejected by validation)."""
    hooks = [{key: hook[key] for key in ("type", "command", "timeout") if key in hook} for hook in matcher["hooks"]]
    return {"matcher": matcher.get("matcher", ""), "hooks": hooks}


def _as_claude(fields: dict[str, Any]) -> dict[str, Any]:
    """An event's fields as Claude Code names them."""
    if "tool_name" not in fields:
        return fields
    name = fields["tool_name"]
    tool_input = fields.get("tool_input") or {}
    renamed = (
        tool_input if name == "grep" else {CLAUDE_FIELDS.get(key, key): value for key, value in tool_input.items()}
    )
    return fields | {"tool_name": CLAUDE_NAME_OF.get(name, name), "tool_input": renamed}


def _transcript(session: Any) -> str | None:
    """A JSONL export of the session so far, for hooks that read `transcript_path`."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    from code_puppy.paths import data_dir

    path = data_dir() / "transcripts" / f"{session.id}.jsonl"
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        lines = [
            json.dumps(message) for message in ModelMessagesTypeAdapter.dump_python(list(session.messages), mode="json")
        ]
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    except OSError:
        return None
    return str(path)


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
    shown = " ".join(command.split())  # a multi-line command on one line too
    print(f"code-puppy: shell_hooks: {event_name} hook `{shown}` {what}", file=sys.stderr, flush=True)
