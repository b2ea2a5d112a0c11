"""Atomic history groups: the units a history processor may keep, drop or replace whole.

reference/history-processing.md §2. A group is a half-open range `[entry_start, entry_end)` of the messages: a
complete user/assistant cycle with its tool exchanges. A new group starts at a `ModelRequest` that follows a
`ModelResponse`, holds no tool result, and holds a user prompt or a request-side summary (`CompactionPart`);
anything else (tool results, steering text sent with them, retry feedback, system or instruction parts,
consecutive requests) continues the current group, so tool calls and their results never fall apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryPromptPart,  # pyright: ignore[reportDeprecated]  # legacy, still constructible (§6 case 8)
    SystemPromptPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from code_puppy.history.tokens import message_tokens
from code_puppy.sessions.catalog import title_of

CURRENT_REQUEST = "current_request"
"""The last group: it holds the request about to be sent."""
UNFINISHED = "unfinished"
"""A group with an unanswered tool call, an incomplete or suspended response, or an interrupted request."""
SYSTEM_PROMPT = "system_prompt"
"""A group holding a conversation-scope system prompt, which pydantic-ai never sends again once dropped."""
PROVIDER_COMPACTION = "provider_compaction"
"""A group holding a provider's own compaction record (a `CompactionPart` in a response)."""
SIGNED_REASONING = "signed_reasoning"
"""The newest closed group, when it holds signed or provider-opaque reasoning the provider needs replayed."""


@dataclass(frozen=True)
class HistoryOrigin:
    """Where a group came from, read from message fields, never from text: one per tool exchange."""

    run_id: str | None
    """The run that produced the exchange (or the group, when it has no tool exchange)."""
    tool_name: str | None = None
    tool_call_id: str | None = None


@dataclass(frozen=True)
class HistoryGroup:
    """One atomic group of a history."""

    index: int
    entry_start: int
    """The index of the group's first message."""
    entry_end: int
    """One past the index of the group's last message (half-open)."""
    closed: bool
    """A finished cycle: not the last group, ends with a response, and every tool call in it has its result."""
    protected_reasons: tuple[str, ...]
    """Why the group must be kept exactly (`CURRENT_REQUEST`, `UNFINISHED`, `SYSTEM_PROMPT`, ...), in that order."""
    origins: tuple[HistoryOrigin, ...]
    estimated_tokens: int
    """The group's share of `estimated_tokens` (`tokens.py`)."""

    @property
    def protected(self) -> bool:
        return bool(self.protected_reasons)

    @property
    def eligible(self) -> bool:
        """Whether a processor may drop or replace it: closed and not protected."""
        return self.closed and not self.protected_reasons


def is_tool_result(part: ModelRequestPart) -> bool:
    """A `ToolReturnPart` (any outcome, typed subclasses too) or a legacy tool-bound `RetryPromptPart`."""
    legacy = isinstance(part, RetryPromptPart)  # pyright: ignore[reportDeprecated]
    return isinstance(part, ToolReturnPart) or (legacy and getattr(part, "tool_name", None) is not None)


def unanswered_calls(messages: Sequence[ModelMessage]) -> list[tuple[int, ToolCallPart]]:
    """Regular tool calls without a result in the requests between their response and the next response."""
    unanswered: list[tuple[int, ToolCallPart]] = []
    pending: dict[str, tuple[int, ToolCallPart]] = {}
    for index, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            unanswered.extend(pending.values())  # a later response shadows an unanswered earlier call
            pending = {p.tool_call_id: (index, p) for p in message.parts if isinstance(p, ToolCallPart)}
        else:
            for part in message.parts:
                if is_tool_result(part):
                    pending.pop(_call_id(part), None)
    return [*unanswered, *pending.values()]


def orphan_results(messages: Sequence[ModelMessage]) -> list[tuple[int, ModelRequestPart]]:
    """Tool results whose `tool_call_id` no earlier regular tool call has (pydantic-ai would drop them)."""
    seen: set[str] = set()
    orphans: list[tuple[int, ModelRequestPart]] = []
    for index, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            seen.update(p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart))
            continue
        orphans += [(index, p) for p in message.parts if is_tool_result(p) and _call_id(p) not in seen]
    return orphans


def partition(messages: Sequence[ModelMessage]) -> tuple[HistoryGroup, ...]:
    """The groups of a history that ends with the request about to be sent (a processor's input)."""
    bounds: list[tuple[int, int]] = []
    start = 0
    for index in range(1, len(messages)):
        if _opens_group(messages[index - 1], messages[index]):
            bounds.append((start, index))
            start = index
    if messages:
        bounds.append((start, len(messages)))
    last = len(bounds) - 1
    closed = [index != last and _is_closed(messages[s:e]) for index, (s, e) in enumerate(bounds)]
    newest_closed = max((index for index, done in enumerate(closed) if done), default=None)
    groups: list[HistoryGroup] = []
    for index, (s, e) in enumerate(bounds):
        members = messages[s:e]
        reasons: list[str] = []
        if index == last:
            reasons.append(CURRENT_REQUEST)
        elif not closed[index]:
            reasons.append(UNFINISHED)
        if any(isinstance(p, SystemPromptPart) and p.scope == "conversation" for m in members for p in m.parts):
            reasons.append(SYSTEM_PROMPT)
        if any(isinstance(m, ModelResponse) and isinstance(p, CompactionPart) for m in members for p in m.parts):
            reasons.append(PROVIDER_COMPACTION)
        if index == newest_closed and any(_signed(p) for m in members for p in m.parts):
            reasons.append(SIGNED_REASONING)
        groups.append(
            HistoryGroup(
                index=index,
                entry_start=s,
                entry_end=e,
                closed=closed[index],
                protected_reasons=tuple(reasons),
                origins=_origins(members),
                estimated_tokens=sum(message_tokens(m) for m in members),
            )
        )
    return tuple(groups)


def stored_groups(messages: Sequence[ModelMessage]) -> tuple[HistoryGroup, ...]:
    """The groups of a stored history as processors will see them on the next turn, without the new prompt."""
    prompt = ModelRequest(parts=[UserPromptPart("")])
    groups = partition([*messages, prompt])
    last = groups[-1]
    if last.entry_start == len(messages):
        return groups[:-1]
    # The history ends with a request (a run that failed before its answer): the next prompt joins its group.
    trimmed = replace(last, entry_end=len(messages), estimated_tokens=last.estimated_tokens - message_tokens(prompt))
    return (*groups[:-1], trimmed)


def keep_recent(messages: Sequence[ModelMessage], groups: Sequence[HistoryGroup], n: int) -> list[ModelMessage]:
    """The last `n` eligible groups plus every protected or unfinished group, in their original order.

    Raises:
        TypeError: If `n` is a bool or not an int.
        ValueError: If `n` is negative.
    """
    if isinstance(n, bool) or not isinstance(n, int):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f"keep_recent_groups(n) takes an int, not {type(n).__name__}")
    if n < 0:
        raise ValueError(f"keep_recent_groups(n) takes n >= 0, not {n}")
    eligible = [group.index for group in groups if group.eligible]
    kept = set(eligible[max(len(eligible) - n, 0) :])
    return [
        message
        for group in groups
        if group.index in kept or not group.eligible
        for message in messages[group.entry_start : group.entry_end]
    ]


def describe_groups(messages: Sequence[ModelMessage]) -> list[str]:
    """One line per group of a stored history, for `sessions show --groups` and `/history`."""
    groups = stored_groups(messages)
    lines = [f"{len(groups)} groups · ~{sum(g.estimated_tokens for g in groups)} tokens (estimated_tokens)"]
    for group in groups:
        state = "closed" if group.closed else "open"
        reasons = f" · protected: {', '.join(group.protected_reasons)}" if group.protected else ""
        tools = ", ".join(o.tool_name for o in group.origins if o.tool_name is not None)
        lines.append(
            f"group {group.index} · messages {group.entry_start}-{group.entry_end - 1} · {state} · "
            f"~{group.estimated_tokens} tokens{reasons}{f' · tools: {tools}' if tools else ''}"
        )
        if prompt := title_of(messages[group.entry_start : group.entry_end], limit=80):
            lines.append(f"  › {prompt}")
    return lines


def _call_id(part: ModelRequestPart) -> str:
    return getattr(part, "tool_call_id", "")


def _opens_group(previous: ModelMessage, message: ModelMessage) -> bool:
    if not (isinstance(message, ModelRequest) and isinstance(previous, ModelResponse)):
        return False
    if any(is_tool_result(part) for part in message.parts):
        return False
    return any(isinstance(part, UserPromptPart | CompactionPart) for part in message.parts)


def _is_closed(members: Sequence[ModelMessage]) -> bool:
    if not isinstance(members[-1], ModelResponse) or unanswered_calls(members):
        return False
    native_calls = {
        (index, p.tool_call_id)
        for index, m in enumerate(members)
        for p in m.parts
        if isinstance(m, ModelResponse) and isinstance(p, NativeToolCallPart)
    }
    native_returns = {
        (index, p.tool_call_id)
        for index, m in enumerate(members)
        for p in m.parts
        if isinstance(m, ModelResponse) and isinstance(p, NativeToolReturnPart)
    }
    if native_calls - native_returns:  # a native result belongs in the response that made the call
        return False
    return not any(
        (isinstance(m, ModelResponse) and m.state in ("incomplete", "suspended"))
        or (isinstance(m, ModelRequest) and m.state == "interrupted")
        for m in members
    )


def _signed(part: object) -> bool:
    return isinstance(part, ThinkingPart) and bool(part.signature or part.provider_details)


def _origins(members: Sequence[ModelMessage]) -> tuple[HistoryOrigin, ...]:
    origins = tuple(
        HistoryOrigin(message.run_id, part.tool_name, part.tool_call_id)
        for message in members
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, ToolCallPart | NativeToolCallPart)
    )
    return origins or (HistoryOrigin(next((m.run_id for m in members if m.run_id is not None), None)),)
