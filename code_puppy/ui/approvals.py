"""Approvals in `ask` mode: the user answers y / n / always-for-this-session, seeing the command or the diff.

Bound as pydantic-ai's `RequestInput(ask)`: the permission policy raises `ApprovalRequired(metadata={'scope',
'summary'})`, the run waits in `ask`, and the answer goes back as `DeferredToolResults`.
"""

from __future__ import annotations

import difflib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import TypeAdapter, ValidationError
from pydantic_ai import RunContext
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai_harness.filesystem import Replacement
from rich.padding import Padding
from rich.syntax import Syntax
from rich.text import Text

from code_puppy.agents.permissions import PermissionPolicy
from code_puppy.agents.project_files import BINARY_SAMPLE_BYTES
from code_puppy.agents.sandboxed_shell import ESCALATE
from code_puppy.ui.chat_sink import diff_text

Answer = Literal["yes", "no", "always"]


class Confirm(Protocol):
    """Shows renderables above the prompt, asks the question in the prompt, and returns the user's answer ("always"
    only when `always` offers it)."""

    def __call__(self, items: list[Any], question: str, *, always: bool = True) -> Awaitable[Answer]: ...


def proposed_diff(root: Path, tool_name: str, args: dict[str, Any]) -> str | None:
    """The unified diff a `write_file` or `edit_file` call would make, from its arguments and the file as it is.

    None when there is nothing to show: another tool, a path outside the project, or an edit the tool will refuse
    (it changes nothing then, and its result tells the model why).
    """
    path = args.get("path")
    if tool_name not in ("write_file", "edit_file") or not isinstance(path, str):
        return None
    target = (root / path).resolve()
    try:
        relative = target.relative_to(root).as_posix()
        data = target.read_bytes() if target.is_file() else None
    except (ValueError, OSError):
        return None
    if tool_name == "write_file":
        old = data.decode(errors="replace") if data is not None else ""
        new = str(args.get("content", ""))
    else:
        if data is None or b"\x00" in data[:BINARY_SAMPLE_BYTES]:
            return None
        try:
            old = data.decode()  # bytes as they are: an edit matches `\r\n` as written, as the tool does
        except UnicodeDecodeError:
            return None
        new = _edited(old, args)
        if new is None:
            return None
    lines = difflib.unified_diff(old.splitlines(), new.splitlines(), f"a/{relative}", f"b/{relative}", lineterm="")
    return "\n".join(lines)


_REPLACEMENTS: TypeAdapter[list[Replacement] | None] = TypeAdapter(list[Replacement] | None)


def _edited(text: str, args: dict[str, Any]) -> str | None:
    """`text` as the harness's `edit_file` would leave it given `args`, or None when the tool would refuse them.

    The approval is asked before the tool runs, and the harness computes an edit only inside the tool (its public
    `FileSystemToolset.edit_file` takes one pair and writes the file), so its rules are followed here: one
    `old_text`/`new_text` pair or a non-empty `replacements` list, not both; replacements applied in order, each
    `old_text` non-empty and found exactly once in the text the previous ones left.
    """
    old_text, new_text = args.get("old_text"), args.get("new_text")
    try:
        replacements = _REPLACEMENTS.validate_python(args.get("replacements"))
    except ValidationError:
        return None  # pydantic-ai rejects the arguments before the tool runs
    if replacements is None:
        if not isinstance(old_text, str) or not isinstance(new_text, str):
            return None
        replacements = [Replacement(old_text=old_text, new_text=new_text)]
    elif old_text is not None or new_text is not None or not replacements:
        return None
    for replacement in replacements:
        if not replacement.old_text or text.count(replacement.old_text) != 1:
            return None
        text = text.replace(replacement.old_text, replacement.new_text, 1)
    return text


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
        title = Text("⚠ ", style="yellow bold").append(f"{call.tool_name} wants to {metadata['summary']}", style="bold")
        if await self.confirm([title], "Run it outside the sandbox?  y yes, once · n no", always=False) == "yes":
            return True
        if denied := metadata.get("denied"):
            return ToolDenied(f"The user did not let it run outside the sandbox. Inside, it failed:\n{denied}")
        return ToolDenied("The user did not let it run outside the sandbox, so it did not run.")

    def _summary(self, call: ToolCallPart, metadata: dict[str, Any]) -> str:
        return str(metadata.get("summary") or self.policy.summary(call.tool_name, call.args_as_dict()))

    def _view(self, call: ToolCallPart, metadata: dict[str, Any]) -> list[Any]:
        args = call.args_as_dict()
        title = Text("⚠ ", style="yellow bold")
        command = args.get("command")
        if isinstance(command, str):
            outside = args.get("unsandboxed") is True and self.policy.sandboxing
            where = f" outside the sandbox ({args.get('reason') or 'no reason given'})" if outside else ""
            title.append(f"{call.tool_name} wants to run{where}:", style="bold")
            syntax = Syntax(command, "bash", theme="ansi_dark", word_wrap=True, background_color="default")
            view: list[Any] = [title, Padding(syntax, (0, 0, 0, 2))]
        else:
            title.append(f"{call.tool_name} wants to {self._summary(call, metadata)}", style="bold")
            view = [title]
        diff = proposed_diff(self.project_root, call.tool_name, args)
        if diff:
            view.append(diff_text(diff))
            path = str(args.get("path"))
            self.diff_shown().add((self.project_root / path).resolve().relative_to(self.project_root).as_posix())
        return view
