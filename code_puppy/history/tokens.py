"""A cheap, conservative token estimate of a history (reference/history-processing.md §4).

`estimate_history_tokens` counts the messages only, group by group (`HistoryGroup.estimated_tokens`, Kedi's
`estimated_tokens`): the system parts the history holds count, the separately sent instructions and tool schemas do
not. `estimate_request_tokens` is the whole request: the harness's `estimate_context_tokens` with `text_tokens` as
its tokenizer, which anchors on the provider-reported usage of the latest response (instructions and tool schemas
included) and estimates only the messages after it, plus the tool schemas while no response has reported usage.

The harness keeps its anchor when a processor or compaction rewrites the history before it: the estimate is then
too high until the next response re-anchors it. That is the cheap failure mode (compacting a little early), where an
underestimate on dense content lets the history overflow the window. No tokenizer and no I/O; the constants are
unverified guesses, kept here to calibrate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic_ai.messages import (
    BaseToolCallPart,
    BaseToolReturnPart,
    CachePoint,
    CapabilityLoadDeltaPart,
    CompactionPart,
    FilePart,
    InstructionBaselinePart,
    InstructionDeltaPart,
    ModelMessage,
    ModelResponse,
    ModelSettingsDeltaPart,
    RetryFeedbackPart,
    SpeechPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolAvailabilityDeltaPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai_harness.compaction import estimate_context_tokens

from code_puppy.sessions.store import message_adapter

BYTES_PER_TOKEN = 3
"""UTF-8 bytes per token: between code_puppy's 2.5 characters and the harness's 4, and byte-based so CJK and emoji
are not undercounted."""
PART_OVERHEAD = 4
"""Tokens added per part (role markers, ids, separators)."""
MESSAGE_OVERHEAD = 4
"""Tokens added per message."""
MEDIA_ITEM_TOKENS = 1_000
"""Tokens counted for each image, audio, video, document or file item, whatever its size."""
UNKNOWN_PART_CHARS = 100_000
"""How much of an unknown part's `repr` is counted."""

_BOOKKEEPING_PARTS = (InstructionDeltaPart, InstructionBaselinePart, ModelSettingsDeltaPart, CapabilityLoadDeltaPart)
_MEDIA_KINDS = frozenset({"image-url", "audio-url", "document-url", "video-url", "binary", "uploaded-file"})


def serialize(message: ModelMessage) -> bytes:
    """A message in its stored JSON form: what "unchanged" and "an exact copy" compare."""
    return message_adapter.dump_json(message)


def text_tokens(text: str) -> int:
    """`ceil(utf8_bytes / BYTES_PER_TOKEN)`."""
    return -(-len(text.encode("utf-8", "surrogatepass")) // BYTES_PER_TOKEN)


def message_tokens(message: ModelMessage) -> int:
    """The estimate of one message: its parts' text, a fixed cost per media item, and per-part overheads."""
    total = MESSAGE_OVERHEAD
    for part in message.parts:
        total += PART_OVERHEAD + _part_tokens(part)
    return total


def estimate_history_tokens(messages: Iterable[ModelMessage]) -> int:
    """The history alone: deterministic, never lower when a message is added, at least a quarter-token per char."""
    return sum(message_tokens(message) for message in messages)


def estimate_request_tokens(messages: Sequence[ModelMessage], parameters: ModelRequestParameters | None = None) -> int:
    """The context the next request with `messages` fills: what a session's "context used" shows.

    With `parameters`, the tool schemas count too: a usage anchor holds those it was sent with, so after it only the
    ones the history revealed since are added (by the harness); without an anchor, all of them. A stored history has
    no `parameters`: its estimate leaves out the tools that no anchor covers.
    """
    # The harness's `has_context_usage_anchor` is not exported (it lives in its private `_shared` module); this is
    # the anchor `estimate_context_tokens` documents: a response with reported input usage.
    if parameters is None or any(isinstance(m, ModelResponse) and m.usage.input_tokens for m in messages):
        return estimate_context_tokens(messages, text_tokens, model_request_parameters=parameters)
    tools = sum(
        PART_OVERHEAD + text_tokens(f"{tool.name} {tool.description or ''} {json.dumps(tool.parameters_json_schema)}")
        for tool in parameters.tool_defs.values()
    )
    return estimate_context_tokens(messages, text_tokens) + tools


def _part_tokens(part: Any) -> int:
    if isinstance(part, UserPromptPart):
        if isinstance(part.content, str):
            return text_tokens(part.content)
        return sum(_content_tokens(item) for item in part.content)
    if isinstance(part, SystemPromptPart | TextPart | ThinkingPart):
        return text_tokens(part.content)
    if isinstance(part, BaseToolReturnPart):
        return text_tokens(part.tool_name) + text_tokens(part.model_response_str())
    if isinstance(part, RetryFeedbackPart):
        return text_tokens(part.model_response())
    if isinstance(part, BaseToolCallPart):
        return text_tokens(part.tool_name) + text_tokens(part.args_as_json_str())
    if isinstance(part, CompactionPart):
        return text_tokens(part.content or "")
    if isinstance(part, SpeechPart):
        return text_tokens(part.transcript or "")
    if isinstance(part, FilePart):
        return MEDIA_ITEM_TOKENS
    if isinstance(part, ToolAvailabilityDeltaPart):
        return text_tokens(" ".join(part.tools_added))
    if isinstance(part, _BOOKKEEPING_PARTS):
        return 0  # instructions are counted once per request; settings and loads are bookkeeping
    return _unknown_tokens(part)


def _content_tokens(item: Any) -> int:
    if isinstance(item, str):
        return text_tokens(item)
    if isinstance(item, TextContent):
        return text_tokens(item.content)
    if isinstance(item, CachePoint):
        return 0
    if getattr(item, "kind", None) in _MEDIA_KINDS:
        return MEDIA_ITEM_TOKENS
    return _unknown_tokens(item)


def _unknown_tokens(value: object) -> int:
    """Conservative for what this module does not know: the start of its `repr`, counted like text."""
    return -(-len(repr(value)[:UNKNOWN_PART_CHARS]) // BYTES_PER_TOKEN)
