"""shell_hooks: Claude-Code-compatible command hooks, configured in config.toml.

    [[plugins.shell_hooks.PreToolUse]]
    matcher = "shell|write_file"     # a regex matched against the whole tool name; Claude Code's names (Bash,
                                     # Write, Edit, Read, Grep, Glob) work too; "" or "*" matches every tool
    hooks = [{ type = "command", command = "python3 .hooks/guard.py", timeout = 30 }]

Events: PreToolUse, PostToolUse, PostToolUseFailure, UserPromptSubmit, Stop, SubagentStart, SubagentStop,
SessionStart, SessionEnd, PreCompact, Notification, PermissionRequest. Each matching command runs through the shell in
the project directory (also in `$CLAUDE_PROJECT_DIR` and `$CODE_PUPPY_PROJECT_DIR`) with the event as JSON on stdin.

Hooks in Claude Code's own files are read too, so a repository set up for Claude Code keeps its hooks: the user's
`~/.claude/settings.json` (unless `CODE_PUPPY_HOME` relocates everything), the project's `.claude/settings.json` and
`.claude/settings.local.json` (only once `code-puppy trust` recorded them as they are: they run commands), and the
`hooks:` of the file-defined agent running. Those hooks get the event as Claude Code sends it (`claude.py`) and a
`transcript_path` in Claude Code's JSONL shape (`transcript.py`). The plugins README says what each output does.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import code_puppy
from code_puppy.plugins import Context, ToolDecision, TurnStopped
from code_puppy.plugins.options import plugin_options
from code_puppy.plugins.process import Completed, run_shell

from .claude import CLAUDE_MODES, CLAUDE_NAME_OF, CLAUDE_TOOL_NAMES, claude_event, ours
from .settings import Command, Config, agent_config, claude_config
from .transcript import transcript_path

_config = Config()
_stop_hook_active = False
"""Whether the current run is the follow-up a Stop hook asked for (Claude Code's `stop_hook_active`)."""


@dataclass(frozen=True)
class Hook:
    command: Command
    claude: bool
    """From Claude Code's files (or an agent's frontmatter): sent Claude Code's tool and field names."""


@dataclass(frozen=True)
class Ran:
    """How one hook command ended, and what it asked for."""

    command: str
    claude: bool
    done: Completed

    @property
    def output(self) -> dict[str, Any]:
        """Its JSON output (exit 0 only), or an empty object."""
        value = self.json
        return value if isinstance(value, dict) else {}  # pyright: ignore[reportUnknownVariableType]

    @property
    def json(self) -> object:
        """What it printed on exit 0, read as JSON; None when it is not JSON."""
        if self.done.returncode != 0:
            return None
        try:
            return json.loads(self.done.stdout)
        except ValueError:
            return None

    @property
    def specific(self) -> dict[str, Any]:
        specific = self.output.get("hookSpecificOutput")
        return specific if isinstance(specific, dict) else {}  # pyright: ignore[reportUnknownVariableType]

    @property
    def blocked(self) -> str | None:
        """Why it blocks (exit 2: its stderr; exit 0: a JSON decision, PreToolUse's `deny` too), or None."""
        if self.done.returncode == 2:
            return self.done.stderr.strip() or f"blocked by the hook `{self.command}`"
        if self.specific.get("permissionDecision") == "deny":
            return str(self.specific.get("permissionDecisionReason") or f"denied by the hook `{self.command}`")
        if self.output.get("decision") == "block":
            return str(self.output.get("reason") or f"blocked by the hook `{self.command}`")
        return None

    @property
    def stop(self) -> str | None:
        """What the user is told when the hook ends the turn (`"continue": false`), or None."""
        if self.output.get("continue") is False:
            return str(self.output.get("stopReason") or f"the hook `{self.command}` stopped the turn")
        return None

    @property
    def context(self) -> str | None:
        """Text for the model: `hookSpecificOutput.additionalContext`."""
        extra = self.specific.get("additionalContext")
        return extra.strip() if isinstance(extra, str) and extra.strip() else None

    @property
    def printed(self) -> str | None:
        """Plain (non-JSON) text a successful hook printed."""
        text = self.done.stdout.strip()
        return text if self.done.returncode == 0 and text and self.json is None else None


@code_puppy.hookimpl
def startup(settings: Any) -> None:
    global _config
    _config = plugin_options(settings, "shell_hooks", Config)


@code_puppy.hookimpl
async def session_start(source: str, session: Any) -> Context | None:
    fields = {"source": source, "model": session.model}
    context = [text for ran in await _run("SessionStart", session, source, fields) if (text := _context(ran))]
    return Context("\n\n".join(context)) if context else None


@code_puppy.hookimpl
async def session_end(session: Any) -> None:
    await _run("SessionEnd", session, "other", {"reason": "other"})


@code_puppy.hookimpl
async def user_prompt_submit(prompt: str, session: Any) -> Context | None:
    global _stop_hook_active
    _stop_hook_active = False
    context: list[str] = []
    for ran in await _run("UserPromptSubmit", session, None, {"prompt": prompt}):
        if (reason := ran.stop or ran.blocked) is not None:
            raise code_puppy.PromptBlocked(reason)
        if text := _context(ran):
            context.append(text)
    return Context("\n\n".join(context)) if context else None


@code_puppy.hookimpl
async def pre_tool_call(tool_name: str, args: dict[str, Any], tool_call_id: str, session: Any) -> ToolDecision | None:
    permission: str | None = None
    reason = ""
    updated: dict[str, Any] | None = None
    for ran in await _run("PreToolUse", session, tool_name, _tool_fields(tool_name, args, tool_call_id)):
        if ran.stop is not None:
            return ToolDecision(stop=ran.stop)
        if (blocked := ran.blocked) is not None:
            return ToolDecision("deny", blocked)
        legacy = {"approve": "allow"}.get(str(ran.output.get("decision", "")))  # Claude Code's older spelling
        decided = ran.specific.get("permissionDecision") or legacy
        if decided in ("allow", "ask") and permission != "ask":
            permission, reason = decided, str(ran.specific.get("permissionDecisionReason") or "")
        if isinstance(new := ran.specific.get("updatedInput"), dict):
            changed: dict[str, Any] = new  # pyright: ignore[reportUnknownVariableType]
            updated = ours(tool_name, changed, Path(session.project_dir)) if ran.claude else changed
    if permission is None and updated is None:
        return None
    return ToolDecision(permission, reason, args | updated if updated is not None else None)  # pyright: ignore[reportArgumentType]


@code_puppy.hookimpl
async def post_tool_call(
    tool_name: str, args: dict[str, Any], result: Any, tool_call_id: str, session: Any
) -> str | None:
    fields = _tool_fields(tool_name, args, tool_call_id) | {"tool_response": result}
    feedback: list[str] = []
    for ran in await _run("PostToolUse", session, tool_name, fields):
        if ran.stop is not None:
            raise TurnStopped(ran.stop)
        if (reason := ran.blocked) is not None:
            _report("PostToolUse", ran.command, f"says (after the call ran; the model is told): {reason}")
            feedback.append(f"PostToolUse hook `{_one_line(ran.command)}` says: {reason}")
        if text := ran.context:
            feedback.append(text)
    return "\n\n".join(feedback) or None


@code_puppy.hookimpl
async def tool_call_failed(tool_name: str, args: dict[str, Any], error: str, tool_call_id: str, session: Any) -> None:
    fields = _tool_fields(tool_name, args, tool_call_id) | {"error": error, "is_interrupt": False}
    await _run("PostToolUseFailure", session, tool_name, fields)


@code_puppy.hookimpl
async def permission_request(
    tool_name: str, args: dict[str, Any], summary: str, tool_call_id: str, session: Any
) -> ToolDecision | None:
    notice = {"message": f"code-puppy needs your permission: {summary}", "notification_type": "permission_prompt"}
    request = _tool_fields(tool_name, args, tool_call_id) | {"permission_suggestions": []}
    await _run("Notification", session, "permission_prompt", notice | {"title": "Permission needed"})
    for ran in await _run("PermissionRequest", session, tool_name, request):
        decision = ran.specific.get("decision")
        behavior = decision.get("behavior") if isinstance(decision, dict) else None  # pyright: ignore[reportUnknownMemberType]
        if behavior == "allow":
            return ToolDecision("allow")
        if behavior == "deny" or ran.blocked is not None:
            message = decision.get("message") if isinstance(decision, dict) else None  # pyright: ignore[reportUnknownMemberType]
            return ToolDecision("deny", str(message or ran.blocked or f"denied by the hook `{ran.command}`"))
    return None


@code_puppy.hookimpl
async def subagent_start(agent_name: str, tool_call_id: str, session: Any) -> None:
    await _run("SubagentStart", session, agent_name, {"agent_id": tool_call_id, "agent_type": agent_name})


@code_puppy.hookimpl
async def subagent_stop(agent_name: str, result: str | None, tool_call_id: str, session: Any) -> None:
    fields = {"agent_id": tool_call_id, "agent_type": agent_name, "stop_hook_active": False}
    for ran in await _run("SubagentStop", session, agent_name, fields | {"last_assistant_message": result}):
        if (reason := ran.blocked) is not None:  # the agent's run is over: Claude Code would go on with it
            _report("SubagentStop", ran.command, f"says (after the agent finished): {reason}")


@code_puppy.hookimpl
async def pre_compact(trigger: str, instructions: str | None, session: Any) -> None:
    await _run("PreCompact", session, trigger, {"trigger": trigger, "custom_instructions": instructions or ""})


@code_puppy.hookimpl
async def turn_end(session: Any) -> str | None:
    global _stop_hook_active
    results = await _run("Stop", session, None, {"stop_hook_active": _stop_hook_active})
    stopped = any(ran.stop is not None for ran in results)
    reasons = [reason for ran in results if (reason := ran.blocked) is not None]
    _stop_hook_active = bool(reasons) and not stopped
    return None if stopped else "\n\n".join(reasons) or None


def _tool_fields(tool_name: str, args: dict[str, Any], tool_call_id: str) -> dict[str, Any]:
    return {"tool_name": tool_name, "tool_input": args, "tool_use_id": tool_call_id}


def _context(ran: Ran) -> str | None:
    return ran.context or ran.printed


async def _run(event_name: str, session: Any, target: str | None, fields: dict[str, Any]) -> list[Ran]:
    """Run the event's matching commands at the same time; how each ended, in config order. `target` is what a
    matcher matches (a tool name, a session's source, an agent's name); None runs every command of the event."""
    project = Path(session.project_dir)
    hooks = [
        Hook(command, claude)
        for config, claude in _configs(project)
        for matcher in getattr(config, event_name)
        if target is None or _matches(matcher.matcher, target, tool="tool_name" in fields)
        for command in matcher.hooks
    ]
    if not hooks:
        return []
    event = {"session_id": session.id, "transcript_path": None, "cwd": str(project)}
    event |= {"permission_mode": session.permission_mode, "hook_event_name": event_name}
    ours_ = json.dumps(event | fields, default=str)
    theirs = ours_
    if any(hook.claude for hook in hooks):
        claude = claude_event(fields, project) | {"transcript_path": transcript_path(session)}
        mode = CLAUDE_MODES.get(session.permission_mode, session.permission_mode)
        theirs = json.dumps(event | claude | {"permission_mode": mode}, default=str)
    env = os.environ | {"CLAUDE_PROJECT_DIR": str(project), "CODE_PUPPY_PROJECT_DIR": str(project)}
    runs = [
        run_shell(
            hook.command.command,
            cwd=project,
            timeout=hook.command.timeout,
            stdin=theirs if hook.claude else ours_,
            env=env,
        )
        for hook in hooks
    ]
    async with session.tracked():  # what a hook changes is part of the turn's checkpoint, so a rewind undoes it
        results = [
            Ran(hook.command.command, hook.claude, done)
            for hook, done in zip(hooks, await asyncio.gather(*runs), strict=True)
        ]
    for hook, ran in zip(hooks, results, strict=True):
        if ran.done.returncode is None:
            _report(event_name, ran.command, f"timed out after {hook.command.timeout:g}s")
        elif ran.done.returncode not in (0, 2):
            # A crash's last line says what went wrong (a Python traceback's first says nothing).
            last = ran.done.stderr.strip().splitlines()[-1] if ran.done.stderr.strip() else "no output"
            _report(event_name, ran.command, f"exited {ran.done.returncode}: {last}")
    return results


def _configs(project: Path) -> list[tuple[Config, bool]]:
    """Every source of hooks for this moment: ours, Claude Code's files, and the running agent's frontmatter."""
    configs = [(_config, False), (claude_config(project), True)]
    from code_puppy.definitions.agent_scope import running_agent

    if (agent := running_agent()) is not None and agent.hooks:
        configs.append((_agent_config(agent, project), True))
    return configs


_agents: dict[Path, Config] = {}
"""Each running agent's hooks, by its file; read once."""


def _agent_config(agent: Any, project: Path) -> Config:
    """An agent's frontmatter hooks: a user's as they are, a project's only as `code-puppy trust` recorded its file."""
    if agent.path not in _agents:
        where = f"{agent.path} (agent {agent.name})"
        _agents[agent.path] = Config()
        if agent.scope != "project" or _trusted(agent.path, project, where):
            _agents[agent.path] = agent_config(agent.hooks, where)
    return _agents[agent.path]


def _trusted(path: Path, project: Path, where: str) -> bool:
    from code_puppy.trust import project_trust

    relative = path.resolve().relative_to(project.resolve()).as_posix()
    trust = project_trust(project)
    if not trust.trusts(relative):
        why = trust.why_not(relative)
        print(f"code-puppy: note: {where}: its hooks do not run: {why} (`code-puppy trust`)", file=sys.stderr)
        return False
    return True


def _matches(pattern: str, target: str, *, tool: bool) -> bool:
    if pattern in ("", "*"):
        return True
    names = [target]
    if tool:
        names += [claude for claude, ours in CLAUDE_TOOL_NAMES.items() if ours == target]
        names += [CLAUDE_NAME_OF[target]] if target in CLAUDE_NAME_OF else []
    try:
        return any(re.fullmatch(pattern, name) for name in names)
    except re.error:
        return pattern in names


def _one_line(command: str) -> str:
    return " ".join(command.split())


def _report(event_name: str, command: str, what: str) -> None:
    print(f"code-puppy: shell_hooks: {event_name} hook `{_one_line(command)}` {what}", file=sys.stderr, flush=True)
