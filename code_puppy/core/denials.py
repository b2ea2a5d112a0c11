"""The tool calls a run was not allowed to make, counted from its events, and the closing line that says so."""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pydantic_ai.messages import AgentStreamEvent, FunctionToolResultEvent

from code_puppy.options import PermissionMode
from code_puppy.tools import EDIT_TOOL_NAMES, POLICY_TOOL_NAMES, SHELL_TOOL_NAMES

Kind = Literal["edit", "command", "other tool", "read"]
_ORDER: tuple[Kind, ...] = ("edit", "command", "other tool", "read")

_WAYS_OUT: dict[tuple[Kind, ...], str] = {
    ("edit",): "--permission-mode accept-edits or auto",
    ("command",): "--allow PATTERN or --permission-mode auto",
    ("edit", "command"): "--permission-mode auto, or accept-edits with --allow PATTERN",
    ("other tool",): "--allow mcp__SERVER for an MCP server's, or --permission-mode yolo",
}
"""How a headless run lets each kind of call through, for the kinds a mode denies by itself."""
_READ_ONLY_WAYS_OUT: dict[tuple[Kind, ...], str] = {
    ("command",): "--permission-mode auto",
    ("edit", "command"): "--permission-mode auto",
    ("other tool",): "--permission-mode yolo",
}
"""read-only mode offers no edit or command tool at all, so an allow-list does not help."""
_MODE_DENIES: dict[PermissionMode, frozenset[Kind]] = {
    "read-only": frozenset({"edit", "command", "other tool"}),
    "ask": frozenset({"edit", "command", "other tool"}),
    "accept-edits": frozenset({"command", "other tool"}),
    "auto": frozenset({"other tool"}),
    "yolo": frozenset(),
}
"""The kinds of calls each mode denies when nobody can approve them (edits of agent configuration and paths outside
the project aside, which say so in their own lines)."""


class DeniedCalls:
    """Counts the calls whose result came back `denied`: in a headless run, the permission mode's denials (nobody can
    approve), a permission rule's, a plugin's `pre_tool_call` block and a file-defined agent's narrowing."""

    def __init__(self) -> None:
        self.kinds: Counter[Kind] = Counter()

    @property
    def count(self) -> int:
        return self.kinds.total()

    def note(self, event: AgentStreamEvent) -> None:
        if isinstance(event, FunctionToolResultEvent) and getattr(event.part, "outcome", None) == "denied":
            self.kinds[_kind(event.part.tool_name)] += 1

    def closing_line(self, mode: PermissionMode) -> str | None:
        """`3 calls were denied in ask mode (1 edit, 2 commands); allow them with …`, None when none was."""
        if not self.count:
            return None
        counted = ", ".join(f"{n} {kind}{'s' if n != 1 else ''}" for kind, n in sorted(self.kinds.items(), key=_order))
        head = f"{self.count} call{'s were' if self.count != 1 else ' was'} denied in {mode} mode ({counted})"
        denied_by_mode: list[Kind] = [kind for kind in _ORDER if kind in self.kinds and kind in _MODE_DENIES[mode]]
        others = sum(n for kind, n in self.kinds.items() if kind not in denied_by_mode)
        groups: list[tuple[Kind, ...]] = [(kind,) for kind in denied_by_mode]
        if "edit" in denied_by_mode and "command" in denied_by_mode:
            groups = [group for group in groups if group not in (("edit",), ("command",))]
            groups.insert(0, ("edit", "command"))
        alone = "it" if self.count == 1 else "them"
        table = {**_WAYS_OUT, **_READ_ONLY_WAYS_OUT} if mode == "read-only" else _WAYS_OUT
        ways = [
            f"allow {alone if len(groups) == 1 and not others else _plural(group)} with {table[group]}"
            for group in groups
        ]
        if others:
            which = alone if not ways else f"the other {'one' if others == 1 else others}"
            by = "a permission rule, a plugin, a protected file or the project's bounds"
            ways.append(f"{by} denied {which} (each result says which)")
        return f"{head}; {'; '.join(ways)}"


def _kind(tool_name: str) -> Kind:
    """An edit, a command, a read (a built-in tool no mode denies: reading, searching, the plan), or another tool:
    an MCP server's or a plugin's, which every mode but yolo denies unless allowed (an MCP tool is named by its
    server's prefix, not `mcp__`, so the two are not told apart here)."""
    if tool_name in EDIT_TOOL_NAMES:
        return "edit"
    if tool_name in SHELL_TOOL_NAMES:
        return "command"
    return "read" if tool_name in POLICY_TOOL_NAMES else "other tool"


def _order(item: tuple[Kind, int]) -> int:
    return _ORDER.index(item[0])


def _plural(group: tuple[Kind, ...]) -> str:
    return " and ".join(f"{kind}s" for kind in group)
