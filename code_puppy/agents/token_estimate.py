"""A cheap, conservative token estimate of a history (reference/history-processing.md §4).

`estimate_history_tokens` counts the messages only (Kedi's `estimated_tokens`: system parts the history holds
count, the separately sent instructions and tool schemas do not). `estimate_request_tokens` is the whole
request: it anchors on the provider-reported usage of the latest response when the history before that response
is still the one it was produced from, and otherwise adds the instructions (once) and the tool schemas to the
history estimate. No tokenizer and no I/O; the constants are unverified guesses, kept here to calibrate.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import ConfigDict, TypeAdapter
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
    ModelRequest,
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
from pydantic_ai.tools import ToolDefinition

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
PREFIX_DIGEST_KEY = "code_puppy.prefix_digest"
"""`ModelResponse.metadata` key holding the digest of the history the response was produced from."""

_BOOKKEEPING_PARTS = (InstructionDeltaPart, InstructionBaselinePart, ModelSettingsDeltaPart, CapabilityLoadDeltaPart)
_MEDIA_KINDS = frozenset({"image-url", "audio-url", "document-url", "video-url", "binary", "uploaded-file"})

_message_adapter: TypeAdapter[ModelMessage] = TypeAdapter(
    ModelMessage, config=ConfigDict(defer_build=True, ser_json_bytes="base64", val_json_bytes="base64")
)
"""`ModelMessagesTypeAdapter`'s settings, for one message: how messages are stored and compared."""


def serialize(message: ModelMessage) -> bytes:
    """A message in its stored JSON form: what "unchanged" and "an exact copy" compare."""
    return _message_adapter.dump_json(message)


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


def estimate_request_tokens(messages: Sequence[ModelMessage], tools: Iterable[ToolDefinition] = ()) -> int:
    """The request this history would be sent as: history, instructions (once) and tool schemas.

    Anchored on the latest response with reported input usage when its prefix digest still matches (the provider
    counted instructions and tools then); any rewrite of the history before it drops the anchor.
    """
    for index in range(len(messages) - 1, -1, -1):
        response = messages[index]
        if not isinstance(response, ModelResponse) or not response.usage.input_tokens:
            continue
        recorded = (response.metadata or {}).get(PREFIX_DIGEST_KEY)
        if recorded is None or recorded != prefix_digest(messages[:index]):
            break
        tail = messages[index + 1 :]
        total = response.usage.input_tokens + response.usage.output_tokens + estimate_history_tokens(tail)
        if _instructions(messages) != _instructions(messages[: index + 1]):
            total += text_tokens(_instructions(messages))
        return total
    return estimate_history_tokens(messages) + text_tokens(_instructions(messages)) + _tool_tokens(tools)


def prefix_digest(messages: Iterable[ModelMessage]) -> str:
    """A digest of `messages` in their stored form, recorded on a response to tell later whether they changed."""
    digest = hashlib.blake2b(digest_size=16)
    for message in messages:
        digest.update(serialize(message))
        digest.update(b"\n")
    return digest.hexdigest()


def _instructions(messages: Sequence[ModelMessage]) -> str:
    """The latest non-empty instructions: what a request sends once, whatever each past request carried."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest) and message.instructions:
            return message.instructions
    return ""


def _tool_tokens(tools: Iterable[ToolDefinition]) -> int:
    return sum(
        PART_OVERHEAD + text_tokens(f"{tool.name} {tool.description or ''} {json.dumps(tool.parameters_json_schema)}")
        for tool in tools
    )


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
