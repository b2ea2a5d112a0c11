"""`SandboxedShell`: the `shell` tool's commands inside the OS sandbox in `auto` mode, and the end of every command
the tool started once the process is done with its project.

The harness runs each command string under a detached supervisor (`sh -c COMMAND`), which writes its output log and
exit status on the host. Wrapping the string (`bwrap … -- /bin/sh -c COMMAND`) confines only the command and keeps
the harness's output handling. The supervisors outlive runs by design, so a background command can be read in a
later turn; `end_commands` kills them (and so their sandboxes) when the chat or the headless invocation ends.

Escalation, in the chat only: a command that failed the way the sandbox makes commands fail, or one the model asked to
run `unsandboxed` (with a reason), waits for the user's yes (once) or no as an approval; the approved call runs again
outside. Headless runs never leave the sandbox: the model is told so.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic_ai import RunContext, ToolDefinition
from pydantic_ai.capabilities import AbstractCapability, WrapToolExecuteHandler, on_event
from pydantic_ai.exceptions import ApprovalRequired, SkipToolExecution
from pydantic_ai.messages import ToolCallPart
from pydantic_ai_harness.shell import CommandFinishedEvent, CommandStartedEvent

from code_puppy.permissions.policy import PermissionPolicy
from code_puppy.run.deps import deps_of
from code_puppy.sandbox import READ_ONLY_IN_PROJECT, ProjectSandbox, SandboxUnavailable

ESCALATE = "escalate"
"""`ApprovalRequired.metadata["sandbox"]` of a question about running a command outside the sandbox."""
_SANDBOX_FAILURE = re.compile(
    r"read-only file system|permission denied|operation not permitted|network is unreachable|connection refused|"
    r"could not resolve|temporary failure in name resolution|name or service not known|no address associated",
    re.IGNORECASE,
)
"""What a command says when the sandbox stopped it: a write outside, a hidden path, no network."""
_KILL = re.compile(
    r"\s*kill(?:\s+(?:-s\s+(?P<name>[A-Z0-9]+)|-(?P<short>[A-Z]+|[0-9]{1,2})))?(?:\s+--)?(?P<targets>(?:\s+-?[0-9]+)+)\s*"
)
"""`kill [-SIGNAL | -s SIGNAL] [--] [-]PID…`, and nothing else: no other word, quote or shell syntax."""
_UNSANDBOXED_SCHEMA: dict[str, Any] = {
    "unsandboxed": {
        "type": "boolean",
        "description": "Ask the user to run this command outside the sandbox (only when it cannot work inside).",
    },
    "reason": {"type": "string", "description": "With `unsandboxed`: why the command needs to run outside."},
}


CallKey = tuple[str | None, str]
"""A tool call: its run's id and its own (a provider may repeat call ids across runs)."""


@dataclass
class SandboxedShell(AbstractCapability[Any]):
    """Wraps `shell` commands in the sandbox when the policy says so; asks before running one outside; remembers
    every command started."""

    policy: PermissionPolicy
    sandbox: ProjectSandbox
    _supervisors: set[int] = field(default_factory=set[int], init=False, repr=False)
    _written: dict[CallKey, Any] = field(default_factory=dict[CallKey, Any], init=False, repr=False)
    """Each wrapped call's command as the model wrote it, until its after hook puts it back."""
    _requested: dict[CallKey, str] = field(default_factory=dict[CallKey, str], init=False, repr=False)
    """The reason of each call the model asked to run `unsandboxed`."""
    _escalated: set[CallKey] = field(default_factory=set[CallKey], init=False, repr=False)
    """Calls asked about running outside: once approved, they do."""
    _guarded: set[CallKey] = field(default_factory=set[CallKey], init=False, repr=False)
    """Calls whose command runs under the sandbox's guard (`ProjectSandbox.hold`), until it is released."""
    _outputs: list[Path] = field(default_factory=list[Path], init=False, repr=False)
    """The output folders of earlier commands, readable inside (the sandbox's /tmp is its own)."""

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    def get_instructions(self) -> Any:
        return self._instructions

    def _instructions(self, ctx: RunContext[Any]) -> str:
        if not self.policy.sandboxing:
            return ""
        config = self.sandbox.config
        try:
            landlock = self.sandbox.get().mechanism == "landlock"
        except SandboxUnavailable:
            landlock = False  # the command says so when it runs
        tmp = "$TMPDIR (private to the sandbox; /tmp is read-only)" if landlock else "/tmp (private to the sandbox)"
        writable = ", ".join(["the project directory", tmp, *config.writable])
        network = "The network is available." if config.network else "There is no network (no downloads, no APIs)."
        if _interactive(ctx):
            outside = (
                "If a command cannot work inside, call `shell` with `unsandboxed: true` and a `reason`: the user is "
                "asked whether it may run outside."
            )
        else:
            outside = "Nobody can let a command run outside the sandbox in this run."
        return (
            f"Shell commands run in an OS sandbox. They can write only: {writable}; {', '.join(READ_ONLY_IN_PROJECT)} "
            "are read-only. " + network + " Credentials (~/.ssh, "
            "cloud and registry config) are hidden. A command that fails with 'Permission denied', 'Read-only file "
            "system' or a network error was probably stopped by the sandbox: do not retry it unchanged; find another "
            f"way inside the project, or tell the user what it needs. {outside}"
        )

    async def prepare_tools(self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]) -> list[ToolDefinition]:
        if not self.policy.sandboxing:
            return tool_defs
        return [_with_unsandboxed(tool_def) if tool_def.name == "shell" else tool_def for tool_def in tool_defs]

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        handler: WrapToolExecuteHandler,
    ) -> Any:
        try:
            return await handler(args)
        finally:
            key = (ctx.run_id, call.tool_call_id)
            if key in self._guarded:  # cancelled, or stopped by a later before hook: put back all the same
                self._guarded.discard(key)
                self.sandbox.release()

    async def before_tool_validate(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: str | dict[str, Any]
    ) -> str | dict[str, Any]:
        if call.tool_name != "shell":
            return args
        parsed = _as_dict(args)
        if parsed is None or ("unsandboxed" not in parsed and "reason" not in parsed):
            return args
        unsandboxed, reason = parsed.pop("unsandboxed", False), parsed.pop("reason", None)
        if unsandboxed is True and self.policy.sandboxing:
            self._requested[(ctx.run_id, call.tool_call_id)] = str(reason or "no reason given")
        return parsed

    async def before_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: dict[str, Any]
    ) -> dict[str, Any]:
        command = str(args.get("command", ""))
        if call.tool_name != "shell" or not self.policy.sandboxes(command):
            return args
        if (stopped := self._stop_own(command)) is not None:
            raise SkipToolExecution(stopped)
        key = (ctx.run_id, call.tool_call_id)
        if ctx.tool_call_approved and (key in self._escalated or key in self._requested):
            # The user's yes covered running it outside: this class's question, or the policy's, which showed the
            # model's request to run it outside.
            self._escalated.discard(key)
            self._requested.pop(key, None)
            return args
        if key in self._requested and _interactive(ctx):
            self._escalated.add(key)
            raise ApprovalRequired(
                metadata={
                    "sandbox": ESCALATE,
                    "summary": f"run `{command}` outside the sandbox ({self._requested[key]})",
                }
            )
        sandbox = self.sandbox.get()
        wrapped = sandbox.wrap(command, cwd=self.sandbox.project_root, also_readable=self._outputs)
        self._written[key] = args.get("command")
        self.sandbox.hold()
        self._guarded.add(key)
        return {**args, "command": wrapped}

    async def after_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: dict[str, Any], result: Any
    ) -> Any:
        key = (ctx.run_id, call.tool_call_id)
        written = self._written.pop(key, None)
        if written is None:
            return result
        # The after hooks of the capabilities outside this one (plugins' post_tool_call) get these same args: they
        # see the command as the model wrote it, not the bwrap command line. Dicts are passed on, not copied.
        args["command"] = written
        if key in self._guarded:
            self._guarded.discard(key)
            if note := self.sandbox.release():
                result = f"{result}\n[{note}]"
        if self._requested.pop(key, None) is not None:  # asked for outside, in a run nobody can answer
            return f"{result}\n[This command ran inside the sandbox: nobody can let it run outside in this run.]"
        if (
            isinstance(result, str)
            and _interactive(ctx)
            and not ctx.tool_call_approved  # an approved call cannot wait for approval again
            and key not in self._escalated
            and _sandbox_failure(result)
        ):
            self._escalated.add(key)
            raise ApprovalRequired(
                metadata={
                    "sandbox": ESCALATE,
                    "summary": f"run `{written}` again outside the sandbox (it failed inside)",
                    "denied": result,
                }
            )
        return result

    def _stop_own(self, command: str) -> str | None:
        """Send the signal when `command` is exactly `kill [-SIGNAL | -s SIGNAL] [--] [-]PID…` naming only commands
        this tool started and that still run (the way the harness tells the model to stop one); what the model is
        told, or None for any other command. Inside the sandbox the kill could not reach them (their PIDs are in
        another namespace, or out of Landlock's scope); sent from here, it can reach nothing else."""
        match = _KILL.fullmatch(command)
        if match is None:
            return None
        name = match["name"] or match["short"] or "TERM"
        try:
            sent = signal.Signals(int(name)) if name.isdigit() else signal.Signals[f"SIG{name.removeprefix('SIG')}"]
        except (KeyError, ValueError):
            return None
        targets = [int(word) for word in match["targets"].split()]
        if not all(abs(target) in self._supervisors and _is_supervisor(abs(target)) for target in targets):
            return None
        for target in targets:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(-target, sent) if target < 0 else os.kill(target, sent)
        return f"Sent {sent.name} to {', '.join(map(str, targets))}."

    @on_event(CommandStartedEvent)
    async def _command_started(self, ctx: RunContext[Any], event: CommandStartedEvent) -> None:
        self._supervisors.add(event.pid)

    @on_event(CommandFinishedEvent)
    async def _command_finished(self, ctx: RunContext[Any], event: CommandFinishedEvent) -> None:
        self._outputs.append(Path(event.status_path).parent)

    def end_commands(self) -> None:
        """Kill every command the `shell` tool started, with all its process group (a sandboxed command's whole
        sandbox goes with it: bwrap dies with its parent, and the sandbox with bwrap)."""
        for pid in self._supervisors:
            if _is_supervisor(pid):  # not a reused PID
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
        self._supervisors.clear()


def _is_supervisor(pid: int) -> bool:
    """Whether `pid`, a supervisor this tool started, still names its process group: the supervisor itself, or a
    group it left behind (the kernel gives no new process the PID of a group still in use). False when the PID went
    to another process."""
    try:
        return b"_supervisor.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # gone (or no procfs to tell): what is left of its group, if anything, is its own


def _interactive(ctx: RunContext[Any]) -> bool:
    """Whether someone can answer this run's approvals."""
    return (deps := deps_of(ctx)) is not None and deps.ask is not None


def _with_unsandboxed(tool_def: ToolDefinition) -> ToolDefinition:
    """The `shell` tool with the `unsandboxed` request, run alone: a sandboxed command's put-back is then its own (no
    other command's write is put back and told in its result) and never undoes a file tool's approved edit."""
    schema = tool_def.parameters_json_schema
    properties = {**schema.get("properties", {}), **_UNSANDBOXED_SCHEMA}
    return replace(tool_def, parameters_json_schema={**schema, "properties": properties}, sequential=True)


def _as_dict(args: str | dict[str, Any]) -> dict[str, Any] | None:
    if isinstance(args, dict):
        return dict(args)
    try:
        parsed = json.loads(args or "{}")
    except ValueError:
        return None  # validation reports it
    return parsed if isinstance(parsed, dict) else None  # pyright: ignore[reportUnknownVariableType]


def _sandbox_failure(result: str) -> bool:
    """Whether a finished foreground command failed, saying what the sandbox makes commands say.

    The harness's result is the output's tail, then the PID and paths, then the status JSON on its last line.
    """
    output, _, status = result.rpartition("\nPID: ")
    try:
        exit_code = json.loads(status.rsplit("\n", 1)[-1]).get("exit_code")
    except (ValueError, AttributeError):
        return False
    return isinstance(exit_code, int) and exit_code != 0 and _SANDBOX_FAILURE.search(output) is not None
