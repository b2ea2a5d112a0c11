"""Approvals in `ask` mode: the user answers y / n / always-for-this-session, seeing the command or the diff.

Bound as pydantic-ai's `RequestInput(ask)`: the permission policy raises `ApprovalRequired(metadata={'scope',
'summary'})`, the run waits in `ask`, and the answer goes back as `DeferredToolResults`.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic_ai import RunContext
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolDenied
from rich.padding import Padding
from rich.syntax import Syntax
from rich.text import Text

from code_puppy.chat.chat_sink import diff_text
from code_puppy.permissions.policy import PermissionPolicy
from code_puppy.sandbox.sandboxed_shell import ESCALATE
from code_puppy.terminal_text import printable
from code_puppy.tools import EDIT_TOOL_NAMES
from code_puppy.workspace.proposed_edits import proposed_edit

Answer = Literal["yes", "no", "always"]


class Confirm(Protocol):
    """Shows renderables above the prompt, asks the question in the prompt, and returns the user's answer ("always"
    only when `always` offers it)."""

    def __call__(self, items: list[Any], question: str, *, always: bool = True) -> Awaitable[Answer]: ...


def proposed_diff(root: Path, tool_name: str, args: dict[str, Any]) -> str | None:
    """The unified diff a `write_file` or `edit_file` call would make (`proposed_edit`), or None."""
    edit = proposed_edit(root, tool_name, args)
    if edit is None:
        return None
    old = edit.old or ""
    lines = difflib.unified_diff(
        old.splitlines(), edit.new.splitlines(), f"a/{edit.relative}", f"b/{edit.relative}", lineterm=""
    )
    return "\n".join(lines)


@dataclass
class Approver:
    """Answers the calls that wait for approval in one model step, asking the user about each in turn.

    Calls whose scope the user allowed "always" (this one or an earlier step) pass without asking. Project-relative
    paths whose diff was shown go into `diff_shown`, so the change is not shown twice when it is made.
    """

    policy: PermissionPolicy
    project_root: Path
    confirm: Confirm
    diff_shown: Callable[[], set[str]]
    """The running job's set of paths already shown (the sink's `diff_shown`)."""

    async def __call__(
        self, ctx: RunContext[Any], requests: DeferredToolRequests, token: str
    ) -> DeferredToolResults | None:
        approvals: dict[str, bool | ToolDenied] = {}
        for call in requests.approvals:
            metadata = requests.metadata.get(call.tool_call_id, {})
            if metadata.get("sandbox") == ESCALATE:
                approvals[call.tool_call_id] = await self._escalate(call, metadata)
                continue
            scope = metadata.get("scope")
            if scope is not None and scope in self.policy.session_allowed:
                approvals[call.tool_call_id] = True
                continue
            answer = await self.confirm(self._view(call, metadata), "Allow?  y yes · n no · a always this session")
            if answer == "always" and scope is not None:
                self.policy.session_allowed.add(scope)
            approvals[call.tool_call_id] = (
                True if answer != "no" else ToolDenied(f"The user denied this call ({self._summary(call, metadata)}).")
            )
        # Questions and external calls have no answerer in the chat.
        calls = {call.tool_call_id: ToolDenied("No one can answer this call here.") for call in requests.calls}
        return requests.build_results(approvals=approvals, calls=calls)

    async def _escalate(self, call: ToolCallPart, metadata: dict[str, Any]) -> bool | ToolDenied:
        """Whether a command may run outside the sandbox: once, never "always"."""
        title = Text("⚠ ", style="yellow bold").append(
            printable(f"{call.tool_name} wants to {metadata['summary']}", spelled=True), style="bold"
        )
        if await self.confirm([title], "Run it outside the sandbox?  y yes, once · n no", always=False) == "yes":
            return True
        if denied := metadata.get("denied"):
            return ToolDenied(f"The user did not let it run outside the sandbox. Inside, it failed:\n{denied}")
        return ToolDenied("The user did not let it run outside the sandbox, so it did not run.")

    def _summary(self, call: ToolCallPart, metadata: dict[str, Any]) -> str:
        return str(metadata.get("summary") or self.policy.summary(call.tool_name, call.args_as_dict()))

    def _view(self, call: ToolCallPart, metadata: dict[str, Any]) -> list[Any]:
        """The title, then the command, the diff or the arguments, every model-supplied string spelled (`printable`):
        an escape sequence in a command could otherwise repaint it as a harmless one."""
        args = call.args_as_dict()
        title = Text("⚠ ", style="yellow bold")
        command = args.get("command")
        if isinstance(command, str):
            outside = args.get("unsandboxed") is True and self.policy.sandboxing
            where = f" outside the sandbox ({args.get('reason') or 'no reason given'})" if outside else ""
            title.append(printable(f"{call.tool_name} wants to run{where}:", spelled=True), style="bold")
            syntax = Syntax(
                printable(command, spelled=True), "bash", theme="ansi_dark", word_wrap=True, background_color="default"
            )
            view: list[Any] = [title, Padding(syntax, (0, 0, 0, 2))]
        else:
            title.append(
                printable(f"{call.tool_name} wants to {self._summary(call, metadata)}", spelled=True), style="bold"
            )
            view = [title]
        diff = proposed_diff(self.project_root, call.tool_name, args)
        if diff:
            view.append(diff_text(printable(diff, spelled=True)))
            path = str(args.get("path"))
            self.diff_shown().add((self.project_root / path).resolve().relative_to(self.project_root).as_posix())
        elif not isinstance(command, str) and call.tool_name not in EDIT_TOOL_NAMES and args:
            # An MCP or plugin tool: its summary names only the tool, so the arguments are what the user judges.
            shown = printable(json.dumps(args, ensure_ascii=False, indent=2), spelled=True)
            view.append(
                Padding(
                    Syntax(shown, "json", theme="ansi_dark", word_wrap=True, background_color="default"), (0, 0, 0, 2)
                )
            )
        return view
