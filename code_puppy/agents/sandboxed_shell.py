"""`SandboxedShell`: the `shell` tool's commands inside the OS sandbox in `auto` mode, and the end of every command
the tool started once the process is done with its project.

The harness runs each command string under a detached supervisor (`sh -c COMMAND`), which writes its output log and
exit status on the host. Wrapping the string (`bwrap … -- /bin/sh -c COMMAND`) confines only the command and keeps
the harness's output handling. The supervisors outlive runs by design, so a background command can be read in a
later turn; `end_commands` kills them (and so their sandboxes) when the chat or the headless invocation ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai import RunContext, ToolDefinition
from pydantic_ai.capabilities import AbstractCapability, on_event
from pydantic_ai.messages import ToolCallPart
from pydantic_ai_harness.shell import CommandFinishedEvent, CommandStartedEvent

from code_puppy.agents.permissions import PermissionPolicy
from code_puppy.sandbox import READ_ONLY_IN_PROJECT, ProjectSandbox


@dataclass
class SandboxedShell(AbstractCapability[Any]):
    """Wraps `shell` commands in the sandbox while the policy's mode is `auto`; remembers every command started."""

    policy: PermissionPolicy
    sandbox: ProjectSandbox
    _supervisors: set[int] = field(default_factory=set[int], init=False, repr=False)
    _written: dict[tuple[str | None, str], Any] = field(
        default_factory=dict[tuple[str | None, str], Any], init=False, repr=False
    )
    """Each wrapped call's command as the model wrote it, until its after hook puts it back."""
    _outputs: list[Path] = field(default_factory=list[Path], init=False, repr=False)
    """The output folders of earlier commands, readable inside (the sandbox's /tmp is its own)."""

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    def get_instructions(self) -> Any:
        return self._instructions

    def _instructions(self, ctx: RunContext[Any]) -> str:
        if self.policy.mode != "auto":
            return ""
        config = self.sandbox.config
        writable = ", ".join(["the project directory", "/tmp (private to the sandbox)", *config.writable])
        network = "The network is available." if config.network else "There is no network (no downloads, no APIs)."
        return (
            f"Shell commands run in an OS sandbox. They can write only: {writable}; {', '.join(READ_ONLY_IN_PROJECT)} "
            "are read-only. " + network + " Credentials (~/.ssh, "
            "cloud and registry config) are hidden. A command that fails with 'Permission denied', 'Read-only file "
            "system' or a network error was probably stopped by the sandbox: do not retry it unchanged; find another "
            "way inside the project, or tell the user what it needs."
        )

    async def before_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: dict[str, Any]
    ) -> dict[str, Any]:
        if call.tool_name != "shell" or self.policy.mode != "auto":
            return args
        command = self.sandbox.get().wrap(
            str(args.get("command", "")), cwd=self.sandbox.project_root, also_readable=self._outputs
        )
        self._written[(ctx.run_id, call.tool_call_id)] = args.get("command")
        return {**args, "command": command}

    async def after_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: dict[str, Any], result: Any
    ) -> Any:
        # The after hooks of the capabilities outside this one (plugins' post_tool_call) get these same args: they
        # see the command as the model wrote it, not the bwrap command line. Dicts are passed on, not copied.
        if (written := self._written.pop((ctx.run_id, call.tool_call_id), None)) is not None:
            args["command"] = written
        return result

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
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        self._supervisors.clear()
