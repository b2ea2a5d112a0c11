"""An event as Claude Code sends it to a hook from its settings files, and a hook's `updatedInput` back in
code-puppy's names."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

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
    "Agent": "delegate_task",
}
"""Claude Code's tool names, so that matchers written for it select the same code-puppy tools."""
CLAUDE_NAME_OF = {"shell": "Bash", "read_file": "Read", "write_file": "Write", "edit_file": "Edit", "grep": "Grep"}
CLAUDE_NAME_OF |= {"list_files": "Glob", "delegate_task": "Task"}
"""The name a hook from Claude Code's files is told for each code-puppy tool; the others (`create_directory`, MCP
tools, plan tools) keep their own: Claude Code has no such tool, and a `Bash` hook would look for a `command`."""
CLAUDE_FIELDS = {"path": "file_path", "old_text": "old_string", "new_text": "new_string"}
"""code-puppy's file-tool argument names, as Claude Code's hooks read them."""
CLAUDE_MODES = {"ask": "default", "accept-edits": "acceptEdits", "yolo": "bypassPermissions", "read-only": "plan"}
"""code-puppy's permission modes as Claude Code names its own (`auto` keeps its name)."""
DELEGATE_FIELDS = {"agent_name": "subagent_type", "task": "prompt"}
"""`delegate_task`'s arguments, as Claude Code's `Task` tool names them."""
_HANDLES = re.compile(r"^PID: \d+ \(", re.MULTILINE)
"""Where the shell tool's result stops being the command's output."""


def claude_event(fields: dict[str, Any], project_dir: Path) -> dict[str, Any]:
    """An event's fields as Claude Code names and shapes them: its tool names, `tool_input.file_path` absolute, and a
    `tool_response` object (`{"filePath": …}` for a write or an edit, `{"stdout": …, "stderr": …}` for a command)."""
    if "tool_name" not in fields:
        return fields
    name = fields["tool_name"]
    ours: dict[str, Any] = fields.get("tool_input") or {}
    theirs = claude_input(name, ours, project_dir)
    event = fields | {"tool_name": CLAUDE_NAME_OF.get(name, name), "tool_input": theirs}
    if "tool_response" in fields:
        event["tool_response"] = claude_response(name, theirs, fields["tool_response"])
    return event


def claude_input(name: str, args: dict[str, Any], project_dir: Path) -> dict[str, Any]:
    if name == "delegate_task":
        return {DELEGATE_FIELDS.get(key, key): value for key, value in args.items()} | {
            "description": str(args.get("task", ""))[:60]
        }
    if name == "shell":  # Claude Code's Bash: a timeout in milliseconds, a flag for the background
        timeout = args.get("timeout")
        bash = {"command": args.get("command")} | ({"timeout": int(timeout * 1000)} if timeout else {})
        return bash | ({"run_in_background": True} if args.get("mode") == "background" else {})
    if name in ("grep", "list_files"):
        return dict(args)
    renamed = {CLAUDE_FIELDS.get(key, key): value for key, value in args.items()}
    if isinstance(renamed.get("file_path"), str):
        renamed["file_path"] = str(project_dir / Path(renamed["file_path"]).expanduser())
    return renamed


def claude_response(name: str, tool_input: dict[str, Any], result: Any) -> Any:
    """A tool's result in the shape Claude Code's hooks read for the tool it maps to; any other as it is."""
    text = result if isinstance(result, str) else str(getattr(result, "return_value", result))
    if name == "write_file":
        return {"type": "update", "filePath": tool_input.get("file_path"), "content": tool_input.get("content")} | {
            "success": True,
            "message": text,
        }
    if name == "edit_file":
        keys = ("old_string", "new_string")
        return {"filePath": tool_input.get("file_path"), **{_camel(key): tool_input.get(key) for key in keys}} | {
            "success": True,
            "message": text,
        }
    if name == "read_file":
        return {"type": "text", "file": {"filePath": tool_input.get("file_path"), "content": text}}
    if name == "shell":
        return shell_response(text)
    return result


def shell_response(text: str) -> dict[str, Any]:
    """The `shell` tool's result (the output's tail, stdout and stderr interleaved as a terminal shows them, then
    the command's PID, files and status JSON) as Claude Code's Bash result: the output is `stdout`."""
    handles = _HANDLES.search(text)
    output = text[: handles.start()] if handles else text
    status: dict[str, Any] = {}
    if handles:
        try:
            status = json.loads(text.rsplit("\n", 1)[-1])
        except ValueError:
            status = {}
    interrupted = bool(status.get("timed_out") or status.get("killed")) if isinstance(status, dict) else False  # pyright: ignore[reportUnnecessaryIsInstance]
    return {"stdout": output, "stderr": "", "interrupted": interrupted, "isImage": False}


def ours(name: str, updated: dict[str, Any], project_dir: Path) -> dict[str, Any]:
    """A Claude Code hook's `updatedInput` in code-puppy's argument names (a path inside the project relative)."""
    if name == "delegate_task":
        back = {value: key for key, value in DELEGATE_FIELDS.items()}
        return {back.get(key, key): value for key, value in updated.items() if key != "description"}
    if name == "shell":
        timeout = updated.get("timeout")
        shell = {"command": updated.get("command")} | ({"timeout": timeout / 1000} if timeout else {})
        return shell | ({"mode": "background"} if updated.get("run_in_background") else {})
    if name in ("grep", "list_files"):
        return dict(updated)
    back = {value: key for key, value in CLAUDE_FIELDS.items()}
    renamed = {back.get(key, key): value for key, value in updated.items()}
    if isinstance(path := renamed.get("path"), str) and Path(path).is_absolute():
        resolved = Path(path)
        renamed["path"] = str(resolved.relative_to(project_dir)) if resolved.is_relative_to(project_dir) else path
    return renamed


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(word.title() for word in rest)
