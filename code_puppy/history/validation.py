"""Validation of a history processor's output: rules V1-V12 of reference/history-processing.md §3.

A processor may keep whole groups (exact copies, in their original order, each at most once) and put summary
messages (plain user text, a request-side `CompactionPart`, or plain assistant text) before the current group.
Everything protected or unfinished stays. Messages are compared in their stored JSON form, so a deep copy counts
as the same message and an edited timestamp does not.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn, Protocol, cast

from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)

from code_puppy.history.errors import HistoryProcessingValidationError
from code_puppy.history.groups import HistoryGroup, orphan_results, unanswered_calls
from code_puppy.history.tokens import serialize


@dataclass(frozen=True)
class Accepted:
    """A validated edit: the new history and its messages' stored forms."""

    messages: list[ModelMessage]
    """The original message objects for kept groups, deep copies of the processor's summary messages."""
    serialized: list[bytes]


def validate_output(
    output: object,
    inputs: Sequence[ModelMessage],
    serialized: Sequence[bytes],
    groups: Sequence[HistoryGroup],
    *,
    processor: str,
) -> Accepted | None:
    """Check `output` against the processor's input; `None` when it is the input unchanged (a no-op).

    Raises:
        HistoryProcessingValidationError: Naming the rule, the group and what to do instead.
    """

    def fail(rule: str, sentence: str, *, group: int | None = None, at: int | None = None) -> NoReturn:
        raise HistoryProcessingValidationError(rule, sentence, processor=processor, group=group, output_index=at)

    out = _as_messages(output, fail)
    try:
        out_serialized = [serialize(message) for message in out]
    except Exception as exc:  # e.g. a part holding an object pydantic cannot serialize
        fail("V1", f"the output cannot be serialized ({type(exc).__name__}: {exc})")
    if out_serialized == list(serialized):
        return None
    if not isinstance(out[-1], ModelRequest) or out_serialized[-1] != serialized[-1]:
        what = "a ModelResponse" if isinstance(out[-1], ModelResponse) else "a different request"
        fail("V2", f"it must end with the current request, unchanged, but ends with {what}", at=len(out) - 1)
    _check_pairing(out, inputs, fail)
    segments = _segments(out, out_serialized, inputs, serialized, groups, fail)
    matched = [group for group, _ in segments if group is not None]
    for position, group in enumerate(matched):
        if group in matched[:position]:
            fail("V5", f"it keeps {_name(groups[group])} twice; keep each group at most once", group=group)
        if position and group < matched[position - 1]:
            fail("V6", f"it moves {_name(groups[group])} after a later group; keep groups in order", group=group)
    for group in groups:
        if not group.eligible and group.index not in matched:
            why = ", ".join(group.protected_reasons)
            fail("V4", f"it drops {_name(group)}, which is protected ({why}) and must be kept", group=group.index)
    if segments[-1][0] != groups[-1].index:
        fail("V7", "the current request's group must come last, after any summary", at=segments[-1][1])
    if isinstance(out[0], ModelResponse) and not isinstance(inputs[0], ModelResponse):
        fail("V12", "it starts with a ModelResponse; start with a request (a summary is a user-text request)", at=0)
    accepted: list[ModelMessage] = []
    for group, start in segments:
        if group is None:
            accepted.append(copy.deepcopy(out[start]))
        else:
            accepted.extend(inputs[groups[group].entry_start : groups[group].entry_end])
    return Accepted(accepted, out_serialized)


def is_summary(message: ModelMessage) -> bool:
    """A message a processor may add (V3b): user text or a request-side `CompactionPart`, or plain assistant text."""
    if message.state != "complete" or not message.parts:
        return False
    if isinstance(message, ModelRequest):
        return all(
            (isinstance(p, UserPromptPart) and isinstance(p.content, str))
            or (isinstance(p, CompactionPart) and p.id is None and p.provider_name is None and not p.provider_details)
            for p in message.parts
        )
    provider_fields = (
        message.model_name,
        message.model_id,
        message.provider_name,
        message.provider_url,
        message.provider_response_id,
        message.provider_details,
        message.history_digest,
    )
    return all(field is None for field in provider_fields) and all(
        isinstance(p, TextPart) and p.id is None and p.provider_name is None and not p.provider_details
        for p in message.parts
    )


class _Fail(Protocol):
    def __call__(self, rule: str, sentence: str, *, group: int | None = ..., at: int | None = ...) -> NoReturn: ...


def _as_messages(output: object, fail: _Fail) -> list[ModelMessage]:
    if isinstance(output, str | bytes | bytearray | Mapping) or not isinstance(output, Sequence):
        kind = type(cast(object, output)).__name__
        fail("V1", f"it returned an object of type {kind}, not a list of ModelRequest and ModelResponse messages")
    items = list(cast(Sequence[object], output))
    if not items:
        fail("V1", "it returned an empty history; return at least the current request")
    for index, item in enumerate(items):
        if not isinstance(item, ModelRequest | ModelResponse):
            fail(
                "V1",
                f"item {index} is of type {type(item).__name__}, not a ModelRequest or ModelResponse "
                "(serialized dictionaries are not accepted)",
                at=index,
            )
    return items  # pyright: ignore[reportReturnType]


def _check_pairing(out: Sequence[ModelMessage], inputs: Sequence[ModelMessage], fail: _Fail) -> None:
    """V8 and V9, for pairings the input had: pydantic-ai would silently drop or patch what these catch."""
    input_orphans = {getattr(part, "tool_call_id", "") for _, part in orphan_results(inputs)}
    for index, part in orphan_results(out):
        call_id = getattr(part, "tool_call_id", "")
        if call_id not in input_orphans:
            fail(
                "V8",
                f"message {index} holds the result of tool call {call_id!r} ({getattr(part, 'tool_name', '?')}) "
                "without the call; keep or drop whole groups (ctx.groups)",
                at=index,
            )
    input_unanswered = {part.tool_call_id for _, part in unanswered_calls(inputs)}
    for index, part in unanswered_calls(out):
        if part.tool_call_id not in input_unanswered:
            fail(
                "V9",
                f"message {index} calls {part.tool_name} (id {part.tool_call_id!r}) without its result; "
                "keep or drop whole groups (ctx.groups)",
                at=index,
            )
    ids = [p.tool_call_id for m in out if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, ToolCallPart)]
    input_ids = [
        p.tool_call_id for m in inputs if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, ToolCallPart)
    ]
    for call_id in sorted({i for i in ids if ids.count(i) > max(1, input_ids.count(i))}):
        fail("V9", f"tool call id {call_id!r} appears in more calls than it did; keep each group once")


def _segments(
    out: Sequence[ModelMessage],
    out_serialized: Sequence[bytes],
    inputs: Sequence[ModelMessage],
    serialized: Sequence[bytes],
    groups: Sequence[HistoryGroup],
    fail: _Fail,
) -> list[tuple[int | None, int]]:
    """V3, V3b, V10: split `out` into exact copies of input groups and summary messages, as (group, start)."""
    starts: dict[bytes, list[HistoryGroup]] = {}
    for group in groups:
        starts.setdefault(serialized[group.entry_start], []).append(group)
    owner = {form: group for group in groups for form in serialized[group.entry_start : group.entry_end]}
    segments: list[tuple[int | None, int]] = []
    used: set[int] = set()
    last = -1
    index = 0
    while index < len(out):
        candidates = [
            g
            for g in starts.get(out_serialized[index], [])
            if list(out_serialized[index : index + g.entry_end - g.entry_start])
            == list(serialized[g.entry_start : g.entry_end])
        ]
        if candidates:
            fresh = [g for g in candidates if g.index > last and g.index not in used]
            chosen = (fresh or [g for g in candidates if g.index not in used] or candidates)[0]
            segments.append((chosen.index, index))
            used.add(chosen.index)
            last = max(last, chosen.index)
            index += chosen.entry_end - chosen.entry_start
            continue
        message = out[index]
        if (group := owner.get(out_serialized[index])) is not None:
            fail(
                "V3",
                f"message {index} is a copy from {_name(group)}, but not the whole group; "
                "keep or replace whole groups (ctx.groups)",
                group=group.index,
                at=index,
            )
        elif isinstance(message, ModelResponse) and not is_summary(message):
            fail(
                "V10",
                f"message {index} is a ModelResponse no model produced here ({_kinds(message)}); "
                "a summary response may hold only TextParts without id or provider fields",
                at=index,
            )
        elif not is_summary(message):
            fail(
                "V3b",
                f"message {index} is a new request with {_kinds(message)}; a summary request may hold only "
                "UserPromptPart text and CompactionPart",
                at=index,
            )
        segments.append((None, index))
        index += 1
    return segments


def _name(group: HistoryGroup) -> str:
    return f"group {group.index} (messages {group.entry_start}-{group.entry_end - 1})"


def _kinds(message: ModelMessage) -> str:
    kinds = sorted({part.part_kind for part in message.parts})
    return ", ".join(kinds) if kinds else f"no parts, state {message.state!r}"
