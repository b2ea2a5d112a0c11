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
    ThinkingPart,
    ToolAvailabilityDeltaPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.usage import RequestUsage

from code_puppy.history.tokens import (
    MEDIA_ITEM_TOKENS,
    estimate_history_tokens,
    estimate_request_tokens,
    message_tokens,
    text_tokens,
)
from tests.history.history_cases import WHEN, C, R, Req, Resp, T, U

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


GREP = ToolDefinition(name="grep", description="search", parameters_json_schema={"type": "object"})
SCHEMA_TOKENS = 4 + text_tokens('grep search {"type": "object"}')


def test_request_estimate_adds_instructions_once_and_tool_schemas() -> None:
    history = [dataclasses.replace(U(q), instructions="be brief") for q in ("q1", "q2")]
    history.insert(1, T("a1"))
    text = sum(text_tokens(segment) for segment in ("q1", "a1", "q2", "be brief"))
    assert estimate_request_tokens(history, ModelRequestParameters(function_tools=[GREP])) == text + SCHEMA_TOKENS
    assert estimate_request_tokens(history) == text  # a stored history: no tools to count


def test_anchor_on_the_latest_reported_usage_even_after_a_rewrite() -> None:
    answered = T("a1", usage=RequestUsage(input_tokens=5000, output_tokens=7))
    follow_up = dataclasses.replace(U("q2"), instructions="be brief")
    history = [dataclasses.replace(U("q1"), instructions="be brief"), answered, follow_up]
    tools = ModelRequestParameters(function_tools=[GREP])
    # the provider counted the instructions and tool schemas of the anchored request: not added again
    assert estimate_request_tokens(history, tools) == 5007 + text_tokens("q2")
    changed = [*history[:2], dataclasses.replace(follow_up, instructions="be very brief")]
    assert estimate_request_tokens(changed, tools) == 5007 + text_tokens("q2") + text_tokens("be very brief")
    # a rewritten prefix keeps the anchor, so the estimate stays high until the next response re-anchors it
    rewritten = [dataclasses.replace(U("q1 (summarized)"), instructions="be brief"), answered, follow_up]
    assert estimate_request_tokens(rewritten, tools) == 5007 + text_tokens("q2")
    # a tool revealed after the anchor was not in its request: the harness adds its schema
    reveal = U("q3", ToolAvailabilityDeltaPart(tools_added=["grep"]))
    assert estimate_request_tokens([*history, reveal], tools) > 5007 + text_tokens("q2") + text_tokens("q3")
    assert estimate_request_tokens([reveal], tools) == text_tokens("q3") + SCHEMA_TOKENS  # without one, once


def test_a_megabyte_takes_milliseconds() -> None:
    history: list[ModelMessage] = []
    for index in range(200):
        history += [U(f"q{index} " + "y" * 2500), C(f"c{index}"), R(f"c{index}"), T("z" * 2500)]
    started = time.perf_counter()
    estimate_history_tokens(history)
    assert time.perf_counter() - started < 0.05
    assert isinstance(history[-1], ModelResponse) and isinstance(history[0], ModelRequest)
