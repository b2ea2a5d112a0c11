"""The permission policy over the coding tools (DESIGN §3 "Permissions")."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic_ai import RunContext, ToolDefinition
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ApprovalRequired, SkipToolExecution
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import ToolDenied

from code_puppy.options import PermissionMode
from code_puppy.paths import AGENT_CONFIG_DIRS, AGENT_CONFIG_FILES, GIT_CONFIG, WORKTREES_DIR, config_dir, in_worktrees
from code_puppy.permissions.claude_rules import ClaudeRules
from code_puppy.plugins import ToolDecision
from code_puppy.run.deps import deps_of
from code_puppy.tools import (
    ALWAYS_ALLOWED_TOOL_NAMES,
    EDIT_TOOL_NAMES,
    MCP_PERMISSION_KEY,
    SHELL_TOOL_NAMES,
)
from code_puppy.trust import TRUSTED_PROJECTS_FILE

if TYPE_CHECKING:
    from code_puppy.sessions.session import Session

Decision = Literal["allow", "ask", "deny"]
PreToolCall = Callable[[str, dict[str, Any], "Session", str], Awaitable[ToolDecision | None]]
"""Plugins' `pre_tool_call` for one call (tool name, arguments, the run's session, the call's id): their decision (a
denial's reason is what the model is told), or None."""

_UNSAFE_SHELL = re.compile(r"[<>`\n\r]|\$\(|(?<![&|])&(?![&|])|[()]")
"""Redirection, command substitution, background jobs and subshells: never matched by an allow-list entry."""
SEGMENT_SPLIT = re.compile(r"&&|\|\||;|\|")
"""Where a command line splits into the simple commands an allow-list entry must each match."""


def mcp_allowed(permission: str, allow: Sequence[str]) -> bool:
    """Whether an allow-list entry names the MCP tool `mcp__SERVER__TOOL`: exactly, as `mcp__SERVER`, or by pattern."""
    return any(
        entry.startswith("mcp__") and (fnmatch.fnmatchcase(permission, entry) or permission.startswith(entry + "__"))
        for entry in allow
    )


def allowed_by_list(command: str, allow: Sequence[str]) -> bool:
    """Whether every segment of `command` matches an allow-list entry (`ls && rm -rf x` is not `ls`)."""
    if not allow or _UNSAFE_SHELL.search(command):
        return False
    segments = [" ".join(segment.split()) for segment in SEGMENT_SPLIT.split(command)]
    return all(segment and any(fnmatch.fnmatchcase(segment, pattern) for pattern in allow) for segment in segments)


@dataclass
class PermissionPolicy(AbstractCapability[Any]):
    """Decides before each tool call whether it runs, asks the user, or is denied with a reason for the model.

    Bound on the agent (not per run) so that delegated sub-agent runs are gated the same way. A call asks only when
    the run has someone to answer (`RunDeps.ask`); otherwise what would ask is denied with the reason.
    Denials reach the model as a `ToolDenied` tool result, never as a retry that could abort the run.
    """

    project_root: Path
    """File tools never touch paths outside it."""
    _: KW_ONLY
    mode: PermissionMode = "ask"
    """ask | accept-edits | auto | yolo | read-only; switch it on the live object to change the mode mid-session.
    `auto` is accept-edits whose shell commands all run, inside the sandbox (`SandboxedShell`)."""
    allow: Sequence[str] = ()
    """Shell commands that run without asking (every segment of a compound command must match), and MCP tools
    named `mcp__SERVER__TOOL` or `mcp__SERVER` (all of a server's tools)."""
    rules: ClaudeRules = field(default_factory=ClaudeRules)
    """Claude Code's permission rules (`.claude/settings.json`): deny and ask rules come before the mode, in every
    mode; allow rules for commands and MCP tools are in `allow`, the file tools' ones let a call that would ask run."""
    session_allowed: set[str] = field(default_factory=set[str])
    """Approval scopes the user allowed "always for this session"."""
    granted_tools: frozenset[str] = frozenset()
    """For the turn of a trusted file command: the tools its `allowed-tools` let run without asking (code-puppy's names
    and `mcp__…` entries); the shell only through `granted_commands`. Never more than the mode allows otherwise:
    nothing in read-only mode, no edit outside the project, agent config still asks."""
    granted_commands: Sequence[str] = ()
    """For a trusted file command's turn: the allow-list patterns its `Bash(…)` entries add (`*`: a bare `Bash`)."""
    pre_tool_call: PreToolCall | None = None
    """Plugins' `pre_tool_call`, asked before the mode decision, in every mode: a returned reason blocks the call."""
    sandbox_modes: Collection[str] = ()
    """The modes whose shell commands run in the sandbox (`[sandbox] modes`; `auto` always, `yolo` never)."""
    unsandboxed: Sequence[str] = ()
    """Allow-list patterns whose commands run outside the sandbox even in those modes (`sandbox = false`)."""
    _asked_plugins: set[tuple[str | None, str]] = field(
        default_factory=set[tuple[str | None, str]], init=False, repr=False
    )
    _hooked: dict[tuple[str | None, str], ToolDecision] = field(
        default_factory=dict[tuple[str | None, str], ToolDecision], init=False, repr=False
    )
    """The plugins' decisions on calls waiting for the user's answer: this hook runs again once it is given."""

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    def get_instructions(self) -> Any:
        return self._mode_instructions

    def _mode_instructions(self, ctx: RunContext[Any]) -> str:
        if self.mode == "read-only":
            return "Permission mode: read-only. You can read and search files but not change anything or run commands."
        if self.mode == "yolo":
            return "Permission mode: yolo. File changes and commands run without asking."
        if self.mode == "auto":
            return (
                "Permission mode: auto. File changes inside the project run, except to files that configure "
                "code-puppy or other agents (.code-puppy/, .claude/, .agents/, .mcp.json, .git/hooks, .git/config), "
                "which need the user's approval; every shell command runs without asking, inside a sandbox."
            )
        if self.mode == "accept-edits":
            return (
                "Permission mode: accept-edits. File changes inside the project run, except to files that configure "
                "code-puppy or other agents (.code-puppy/, .claude/, .agents/, .mcp.json, .git/hooks, .git/config), "
                "which need the user's approval; commands run only if allow-listed."
            )
        if _interactive(ctx):
            return "Permission mode: ask. File changes and commands outside the allow-list ask the user first."
        return (
            "Permission mode: ask, non-interactive. Nobody can approve tool calls, so file changes and commands "
            "outside the allow-list are denied. If you need one, say what you would do instead of retrying."
        )

    async def prepare_tools(self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]) -> list[ToolDefinition]:
        # A tool a bare deny rule names (`Bash`, `mcp__prod`) is never offered: every call of it would be denied.
        tool_defs = [td for td in tool_defs if not self.rules.denies_outright(td.name, _mcp_permission(td))]
        if self.mode != "read-only":
            return tool_defs
        return [
            tool_def
            for tool_def in tool_defs
            if tool_def.name in ALWAYS_ALLOWED_TOOL_NAMES and _mcp_permission(tool_def) is None
        ]

    async def before_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: dict[str, Any]
    ) -> dict[str, Any]:
        # Once per call: this hook runs again after the user approves a call, and a tool that needs approval by
        # itself reaches it only then.
        deps = deps_of(ctx)
        key = (ctx.run_id, call.tool_call_id)
        hooked = self._hooked.pop(key, None)
        if self.pre_tool_call is not None and deps is not None and key not in self._asked_plugins:
            self._asked_plugins.add(key)
            hooked = await self.pre_tool_call(call.tool_name, args, deps.session, call.tool_call_id)
            if hooked is not None and hooked.permission == "deny":
                raise SkipToolExecution(ToolDenied(hooked.reason))
        if hooked is not None and hooked.args is not None:
            args = _taken(hooked.args, tool_def)
        if ctx.tool_call_approved:
            return args
        mcp_permission = _mcp_permission(tool_def)
        decision, reason = self.decide(call.tool_name, args, mcp_permission=mcp_permission)
        if hooked is not None and hooked.permission == "allow" and decision == "ask" and not reason:
            decision = "allow"  # the mode's own question only: a protected path's or a risky option's stays
        elif hooked is not None and hooked.permission == "ask" and decision == "allow":
            decision = "ask"
            why = f" ({hooked.reason})" if hooked.reason else ""
            reason = (
                f"A hook asks for the user's approval of `{call.tool_name}`{why}, and this run is non-interactive, so "
                "it was denied. Do not retry it; say what you would have done."
            )
        if decision == "allow":
            return args
        if decision == "ask" and _interactive(ctx):
            summary = self.summary(call.tool_name, args, mcp_permission)
            if hooked is not None and hooked.permission == "ask":  # asked each time: no "always" covers it
                self._hooked[key] = hooked
                why = f" ({hooked.reason})" if hooked.reason else ""
                raise ApprovalRequired(metadata={"scope": None, "summary": f"{summary}; a hook asks{why}"})
            scope = self.scope(call.tool_name, args, mcp_permission)
            if scope in self.session_allowed:
                return args
            if hooked is not None:
                self._hooked[key] = hooked
            raise ApprovalRequired(metadata={"scope": scope, "summary": summary})
        if decision == "ask" and not reason:
            reason = (
                f"`{call.tool_name}` needs the user's approval in '{self.mode}' mode and this run is non-interactive, "
                "so it was denied. Do not retry it; say what you would have done, or the user can re-run with "
                + (
                    f"--allow {mcp_permission} or --permission-mode yolo."
                    if mcp_permission
                    else "--permission-mode accept-edits, --allow PATTERN or --permission-mode yolo."
                )
            )
        raise SkipToolExecution(ToolDenied(reason))

    def decide(
        self, tool_name: str, args: dict[str, Any], *, mcp_permission: str | None = None
    ) -> tuple[Decision, str]:
        """The policy's verdict for one call, and the reason the model is told when it is denied (for "ask", when
        nobody can answer; empty for the general reason).

        `mcp_permission` marks an MCP tool (`mcp__SERVER__TOOL`): never read-only, so it runs only in yolo mode or
        when the allow-list names it, asks in ask mode and is denied in accept-edits mode.

        Claude Code's rules (`rules`) come first: a deny rule denies, in every mode; an ask rule asks, unless the mode
        denies the call anyway; a file tool's allow rule lets a call run that would only have asked.
        """
        decision, reason = self._decide_by_mode(tool_name, args, mcp_permission)
        verdict = self.rules.verdict(tool_name, args, mcp_permission)
        what = f"`{tool_name}` on {_call_subject(args)}" if _call_subject(args) else f"`{tool_name}`"
        if verdict is not None and verdict[0] == "deny":
            rule = verdict[1]
            return "deny", f"{what} is denied by the permission rule `{rule.text}` in {rule.source}. Do not retry it."
        if decision == "deny":
            return decision, reason
        if verdict is not None:
            rule = verdict[1]
            return "ask", (
                f"{what} needs the user's approval (the permission rule `{rule.text}` in {rule.source} asks for it), "
                "and this run is non-interactive, so it was denied. Do not retry it; say what you would have done."
            )
        if decision == "ask" and not reason and self.rules.allows(tool_name, args) is not None:
            return "allow", ""
        return decision, reason

    def _decide_by_mode(self, tool_name: str, args: dict[str, Any], mcp_permission: str | None) -> tuple[Decision, str]:
        """`decide` without Claude Code's rules: the mode, the project's bounds and code-puppy's own allow-list."""
        if mcp_permission is not None:
            return self._decide_mcp(tool_name, mcp_permission)
        if tool_name in ALWAYS_ALLOWED_TOOL_NAMES:
            return "allow", ""
        if self.mode == "read-only":
            return "deny", f"`{tool_name}` is not available in read-only mode."
        if tool_name in EDIT_TOOL_NAMES and not self._inside_project(args.get("path")):
            where = f"in {WORKTREES_DIR}/, other agents' worktrees" if self._in_worktrees(args["path"]) else ""
            return (
                "deny",
                f"`{args.get('path')}` is outside the project ({where or self.project_root}); it cannot be changed.",
            )
        if self.mode == "yolo":
            return "allow", ""
        if tool_name in EDIT_TOOL_NAMES and (config := self.agent_config(args.get("path"))):
            return "ask", (
                f"`{args.get('path')}` ({config}) configures code-puppy or another agent, so changing it needs the "
                "user's approval in every permission mode but yolo, and this run is non-interactive: it was denied. "
                "Do not retry it; say what you would change, so the user can make the change."
            )
        if self.mode == "auto" and tool_name == "shell":
            return "allow", ""  # inside the sandbox
        if tool_name in self.granted_tools and tool_name not in SHELL_TOOL_NAMES:
            return "allow", ""
        if tool_name in SHELL_TOOL_NAMES:
            return self._decide_command(args)
        if tool_name in EDIT_TOOL_NAMES and self.mode in ("accept-edits", "auto"):
            return "allow", ""
        if self.mode in ("accept-edits", "auto"):
            return (
                "deny",
                f"`{tool_name}` is not a file edit, and {self.mode} mode only allows edits. Do not retry it.",
            )
        return "ask", ""

    def _decide_mcp(self, tool_name: str, mcp_permission: str) -> tuple[Decision, str]:
        """`decide` for an MCP tool: never read-only, so it runs only in yolo mode or when the allow-list names it."""
        if self.mode == "read-only":
            return "deny", f"`{tool_name}` is not available in read-only mode."
        if self.mode == "yolo" or mcp_allowed(mcp_permission, [*self.allow, *self.granted_tools]):
            return "allow", ""
        if self.mode in ("accept-edits", "auto"):
            return "deny", (
                f"`{tool_name}` is an MCP tool that is not allow-listed ({mcp_permission}), and {self.mode} mode "
                "only allows file edits. Do not retry it."
            )
        return "ask", ""

    def _decide_command(self, args: dict[str, Any]) -> tuple[Decision, str]:
        """`decide` for a tool that runs a command string, outside `auto`'s sandbox: the allow-list decides."""
        command = str(args.get("command", ""))
        if allowed_by_list(command, [*self.allow, *self.granted_commands]):
            from code_puppy.permissions.risky_options import risky_option  # only for allow-listed commands

            if (risk := risky_option(command, self.project_root)) is None:
                return "allow", ""
            refused = (
                f"`{command}` matches the shell allow-list, but {risk}, and an allow-list entry covers a command "
                "only without such options."
            )
            if self.mode in ("accept-edits", "auto"):
                return "deny", f"{refused} Do not retry it."
            return "ask", (
                f"{refused} It needs the user's approval and this run is non-interactive, so it was denied. "
                "Do not retry it; say what you would have run."
            )
        if self.mode in ("accept-edits", "auto"):
            return "deny", (
                f"`{args.get('command')}` is not on the shell allow-list, and {self.mode} mode only runs "
                "allow-listed commands. Do not retry it."
            )
        return "ask", ""

    def sandboxes(self, command: str) -> bool:
        """Whether the `shell` tool runs `command` in the sandbox in the current mode."""
        if not self.sandboxing:
            return False
        if not allowed_by_list(command, self.unsandboxed):
            return True
        from code_puppy.permissions.risky_options import risky_option

        return risky_option(command, self.project_root) is not None

    @property
    def sandboxing(self) -> bool:
        """Whether the current mode runs shell commands in the sandbox at all."""
        return self.mode == "auto" or (self.mode not in ("yolo", "read-only") and self.mode in self.sandbox_modes)

    def scope(self, tool_name: str, args: dict[str, Any], mcp_permission: str | None = None) -> str:
        """What "always allow for this session" covers: one exact command, one tool for edits, or one agent config
        path for that tool (never covered by the tool's own scope); a call a Claude Code ask rule asks about, only
        that call (never covered by another scope)."""
        if (verdict := self.rules.verdict(tool_name, args, mcp_permission)) is not None:
            return f"rule:{verdict[1].text}:{tool_name}:{_call_subject(args)}"
        if tool_name in SHELL_TOOL_NAMES:
            return f"shell:{' '.join(str(args.get('command', '')).split())}"
        if tool_name in EDIT_TOOL_NAMES and (config := self.agent_config(args.get("path"))):
            return f"config:{tool_name}:{config}"
        return f"tool:{tool_name}"

    def summary(self, tool_name: str, args: dict[str, Any], mcp_permission: str | None = None) -> str:
        """One line naming what the call would do, for the approval prompt."""
        if (verdict := self.rules.verdict(tool_name, args, mcp_permission)) is not None:
            what = f"{tool_name} {_call_subject(args)}".strip()
            return f"{what} (the permission rule `{verdict[1].text}` in {verdict[1].source} asks for it)"
        if tool_name in SHELL_TOOL_NAMES:
            return f"run `{args.get('command')}`"
        if tool_name in EDIT_TOOL_NAMES and self.agent_config(args.get("path")):
            return (
                f"{tool_name.replace('_', ' ')} {args.get('path')}, which configures code-puppy or another agent "
                "(always asked, in every mode but yolo)"
            )
        if tool_name in EDIT_TOOL_NAMES:
            return f"{tool_name.replace('_', ' ')} {args.get('path')}"
        return f"call {tool_name}"

    def agent_config(self, path: object) -> str | None:
        """Where `path` lands when that configures code-puppy or another agent (project-relative, symlinks resolved),
        else None.

        Any depth counts, since a sub-folder can be a project (or a repository) of its own; names are compared
        case-insensitively for case-insensitive file systems. code-puppy's own config folder counts when it lies
        inside the project.
        """
        if not isinstance(path, str) or not path:
            return None
        target = (self.project_root / Path(path).expanduser()).resolve()
        home = config_dir().resolve()
        owned = ("config.toml", "plugins", TRUSTED_PROJECTS_FILE, "agents", "commands", "skills")
        for own in (home / name for name in owned):
            if target == own or own in target.parents:
                return str(target)
        try:
            relative = target.relative_to(self.project_root)
        except ValueError:
            return None
        parts = [part.casefold() for part in relative.parts]
        configures = any(
            part in AGENT_CONFIG_DIRS or (part == ".git" and index + 1 < len(parts) and parts[index + 1] in GIT_CONFIG)
            for index, part in enumerate(parts)
        )
        if configures or (parts and parts[-1] in AGENT_CONFIG_FILES):
            return relative.as_posix()
        # A config folder that is itself a symlink (`.claude -> dotfiles/claude`) makes its target the config.
        for name in (*AGENT_CONFIG_DIRS, *AGENT_CONFIG_FILES, *(f".git/{name}" for name in GIT_CONFIG)):
            location = (self.project_root / name).resolve()
            if location != self.project_root / name and (target == location or location in target.parents):
                return relative.as_posix()
        return None

    def _inside_project(self, path: object) -> bool:
        if not isinstance(path, str):
            return True  # the tool itself rejects a missing path
        target = (self.project_root / Path(path).expanduser()).resolve()
        inside = target == self.project_root or self.project_root in target.parents
        return inside and not self._in_worktrees(path)

    def _in_worktrees(self, path: str) -> bool:
        """Whether `path` lies in one of the project's worktrees: other agents' checkouts, not part of this project."""
        return in_worktrees(self.project_root, (self.project_root / Path(path).expanduser()).resolve())


def _call_subject(args: dict[str, Any]) -> str:
    """What a call acts on, for a rule's reason: its command or its path."""
    subject = args.get("command", args.get("path"))
    return f"`{subject}`" if isinstance(subject, str) else ""


def _interactive(ctx: RunContext[Any]) -> bool:
    """Whether someone can answer this run's approvals."""
    return (deps := deps_of(ctx)) is not None and deps.ask is not None


def _mcp_permission(tool_def: ToolDefinition) -> str | None:
    permission = (tool_def.metadata or {}).get(MCP_PERMISSION_KEY)
    return permission if isinstance(permission, str) else None


def _taken(args: dict[str, Any], tool_def: ToolDefinition) -> dict[str, Any]:
    """A hook's arguments for a call, without the keys the tool does not take."""
    properties = tool_def.parameters_json_schema.get("properties")
    return {key: value for key, value in args.items() if not isinstance(properties, dict) or key in properties}
