"""The token estimate (reference/history-processing.md §4): §6 case 27."""

from __future__ import annotations

import dataclasses
import time

from pydantic_ai.messages import (
    BinaryContent,
    FilePart,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolAvailabilityDeltaPart,
    UserPromptPart,
)
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.usage import RequestUsage

from code_puppy.agents.token_estimate import (
    MEDIA_ITEM_TOKENS,
    PREFIX_DIGEST_KEY,
    estimate_history_tokens,
    estimate_request_tokens,
    message_tokens,
    prefix_digest,
    text_tokens,
)
from tests.agents.history_cases import WHEN, C, R, Req, Resp, T, U

OVERHEAD = 8  # one message of one part


def test_dense_text_is_not_undercounted() -> None:
    dense = "x" * 4000
    assert message_tokens(U(dense)) == OVERHEAD + 1334
    assert estimate_history_tokens([U(dense)]) >= 1000


def test_cjk_and_emoji_count_by_bytes() -> None:
    assert text_tokens("中文字符") == 4  # 12 bytes
    assert text_tokens("🐶") == 2  # 4 bytes
    assert text_tokens("") == 0


def test_media_redacted_thinking_and_unknown_parts() -> None:
    image = Req(
        UserPromptPart(["look:", ImageUrl("https://x/a.png"), BinaryContent(b"\x89PNG", media_type="image/png")])
    )
    assert message_tokens(image) == OVERHEAD + 2 + 2 * MEDIA_ITEM_TOKENS
    assert (
        message_tokens(Resp(FilePart(BinaryContent(b"x" * 10_000, media_type="image/png"))))
        == OVERHEAD + MEDIA_ITEM_TOKENS
    )
    assert message_tokens(Resp(ThinkingPart("", signature="opaque-redacted"))) == OVERHEAD
    unknown = Req(UserPromptPart("x"))
    unknown.parts.append(ToolDefinition(name="weird"))  # type: ignore[arg-type]  # a part this module does not know
    assert message_tokens(unknown) == 2 * OVERHEAD - 4 + 1 + -(-len(repr(unknown.parts[1])) // 3)


def test_every_part_kind_counts_its_text() -> None:
    messages: list[ModelMessage] = [
        Req(SystemPromptPart("abc", timestamp=WHEN), UserPromptPart("abcdef", timestamp=WHEN)),
        C("c1"),
        R("c1"),
        Req(RetryFeedbackPart("bad", retry=RetryInfo(cause="validation_error"), timestamp=WHEN)),
        Resp(
            NativeToolCallPart("web_search", {"q": "x"}, tool_call_id="n1"),
            NativeToolReturnPart("web_search", "found", tool_call_id="n1", timestamp=WHEN),
            ThinkingPart("hmm"),
        ),
        Req(ToolAvailabilityDeltaPart(tools_added=["grep", "shell"])),
    ]
    assert [message_tokens(m) for m in messages] == [
        4 + 4 + 1 + 4 + 2,
        4 + 4 + 3 + 5,  # read_file + {"path":"c1"}
        4 + 4 + 3 + 5,  # read_file + contents of c1
        4 + 4 + text_tokens(messages[3].parts[0].model_response()),  # type: ignore[union-attr]
        4 + (4 + 4 + 3) + (4 + 4 + 2) + (4 + 1),  # web_search {"q":"x"} · web_search found · hmm
        4 + 4 + 4,  # "grep shell"
    ]


def test_monotonic_and_deterministic() -> None:
    history: list[ModelMessage] = []
    previous = 0
    for index, message in enumerate([U("q1"), C("c1"), R("c1"), T("a1"), U("q2"), T(""), U("")]):
        history.append(message)
        estimate = estimate_history_tokens(history)
        assert estimate > previous, index
        assert estimate == estimate_history_tokens(list(history))
        previous = estimate


def test_request_estimate_adds_instructions_once_and_tool_schemas() -> None:
    first = dataclasses.replace(U("q1"), instructions="be brief")
    second = dataclasses.replace(U("q2"), instructions="be brief")
    tool = ToolDefinition(name="grep", description="search", parameters_json_schema={"type": "object"})
    history = [first, T("a1"), second]
    schema_tokens = 4 + text_tokens('grep search {"type": "object"}')
    assert estimate_request_tokens(history, [tool]) == estimate_history_tokens(history) + 3 + schema_tokens


def test_anchor_on_reported_usage_until_the_prefix_changes() -> None:
    prefix: list[ModelMessage] = [dataclasses.replace(U("q1"), instructions="be brief")]
    answered = ModelResponse(
        parts=[TextPart("a1")],
        usage=RequestUsage(input_tokens=5000, output_tokens=7),
        timestamp=WHEN,
        metadata={PREFIX_DIGEST_KEY: prefix_digest(prefix)},
    )
    follow_up = dataclasses.replace(U("q2"), instructions="be brief")
    history = [*prefix, answered, follow_up]
    assert estimate_request_tokens(history) == 5007 + message_tokens(follow_up)
    changed_instructions = dataclasses.replace(follow_up, instructions="be very brief")
    assert estimate_request_tokens([*prefix, answered, changed_instructions]) == 5007 + message_tokens(
        changed_instructions
    ) + text_tokens("be very brief")
    rewritten = [dataclasses.replace(U("q1 (summarized)"), instructions="be brief"), answered, follow_up]
    assert estimate_request_tokens(rewritten) == estimate_history_tokens(rewritten) + text_tokens("be brief")
    unrecorded = dataclasses.replace(answered, metadata=None)
    assert estimate_request_tokens([*prefix, unrecorded, follow_up]) < 5000


def test_a_megabyte_takes_milliseconds() -> None:
    history: list[ModelMessage] = []
    for index in range(200):
        history += [U(f"q{index} " + "y" * 2500), C(f"c{index}"), R(f"c{index}"), T("z" * 2500)]
    started = time.perf_counter()
    estimate_history_tokens(history)
    assert time.perf_counter() - started < 0.05
    assert isinstance(history[-1], ModelResponse) and isinstance(history[0], ModelRequest)
