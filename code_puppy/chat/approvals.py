"""Approvals in the chat: the user answers y / n / always-for-this-session in the prompt, seeing the command or the
diff; the loop around the questions is the core's (`core/approvals.py`)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic_ai import RunContext
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults
from rich.padding import Padding
from rich.syntax import Syntax
from rich.text import Text

from code_puppy.chat.chat_sink import diff_text
from code_puppy.core.approvals import Question, Verdict, answer_approvals
from code_puppy.permissions.policy import PermissionPolicy
from code_puppy.terminal_text import printable
from code_puppy.tools import EDIT_TOOL_NAMES
from code_puppy.workspace.proposed_edits import proposed_edit

Answer = Literal["yes", "no", "always"]
"""What the chat's prompt answers (the keys y, n, a)."""


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
        return await answer_approvals(self.policy, requests, self._ask)

    async def _ask(self, question: Question) -> Verdict:
        if question.escalate:
            title = Text("⚠ ", style="yellow bold").append(
                printable(f"{question.call.tool_name} wants to {question.summary}", spelled=True), style="bold"
            )
            return await self.confirm([title], "Run it outside the sandbox?  y yes, once · n no", always=False)
        return await self.confirm(self._view(question), "Allow?  y yes · n no · a always this session")

    def _view(self, question: Question) -> list[Any]:
        """The title, then the command, the diff or the arguments, every model-supplied string spelled (`printable`):
        an escape sequence in a command could otherwise repaint it as a harmless one."""
        call = question.call
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
            title.append(printable(f"{call.tool_name} wants to {question.summary}", spelled=True), style="bold")
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
