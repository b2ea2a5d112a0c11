"""Short builders for histories, in the notation of reference/history-processing.md §6."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from code_puppy.history.groups import HistoryGroup

WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
"""One fixed timestamp, so equal-looking messages built twice compare equal."""


def U(text: str, *extra: ModelRequestPart) -> ModelRequest:
    return ModelRequest(parts=[*extra, UserPromptPart(text, timestamp=WHEN)], timestamp=WHEN)


def T(text: str, **fields: object) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)], timestamp=WHEN, **fields)  # type: ignore[arg-type]


def C(*ids: str, tool: str = "read_file") -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(tool, {"path": i}, tool_call_id=i) for i in ids], timestamp=WHEN)


def R(*ids: str, tool: str = "read_file") -> ModelRequest:
    return ModelRequest(
        parts=[ToolReturnPart(tool, f"contents of {i}", tool_call_id=i, timestamp=WHEN) for i in ids], timestamp=WHEN
    )


def Req(*parts: ModelRequestPart) -> ModelRequest:
    return ModelRequest(parts=list(parts), timestamp=WHEN)


def Resp(*parts: ModelResponsePart, **fields: object) -> ModelResponse:
    return ModelResponse(parts=list(parts), timestamp=WHEN, **fields)  # type: ignore[arg-type]


def shape(groups: Sequence[HistoryGroup]) -> list[tuple[int, int, bool, tuple[str, ...]]]:
    """(entry_start, entry_end, closed, protected_reasons) per group."""
    return [(g.entry_start, g.entry_end, g.closed, g.protected_reasons) for g in groups]


def texts(messages: Sequence[ModelMessage]) -> list[str]:
    """Each message as `U:q1`, `T:a1`, `C:c1`, `R:c1`, joined part by part."""
    out: list[str] = []
    for message in messages:
        bits: list[str] = []
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                bits.append(f"U:{part.content}")
            elif isinstance(part, TextPart):
                bits.append(f"T:{part.content}")
            elif isinstance(part, ToolCallPart):
                bits.append(f"C:{part.tool_call_id}")
            elif isinstance(part, ToolReturnPart):
                bits.append(f"R:{part.tool_call_id}")
            else:
                bits.append(part.part_kind)
        out.append(" ".join(bits))
    return out
