"""Validation rules V1-V12 on processor outputs: §6 cases 10, 12, 18, 20, 21 and each rule's message."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from datetime import timedelta

import pytest
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from code_puppy.history.groups import keep_recent, partition
from code_puppy.history.tokens import serialize
from code_puppy.history.validation import HistoryProcessingValidationError, validate_output
from tests.history.history_cases import WHEN, C, R, Req, Resp, T, U

Messages = list[ModelMessage]


def history() -> Messages:
    """System prompt + tool cycle + plain cycle + the current request, mid tool loop."""
    return [
        Req(SystemPromptPart("be brief", timestamp=WHEN), UserPromptPart("q1", timestamp=WHEN)),
        C("c1"),
        R("c1"),
        T("a1", model_name="m"),
        U("q2"),
        T("a2", model_name="m"),
        U("q3"),
        C("c3"),
        R("c3"),
    ]


def validate(inputs: Sequence[ModelMessage], output: object) -> Messages | None:
    accepted = validate_output(
        output, inputs, [serialize(m) for m in inputs], partition(inputs), processor="tests:proc"
    )
    return None if accepted is None else accepted.messages


def rejection(inputs: Sequence[ModelMessage], output: object) -> tuple[str, str]:
    with pytest.raises(HistoryProcessingValidationError) as caught:
        validate(inputs, output)
    error = caught.value
    assert str(error).startswith(f"[{error.rule}] tests:proc returned an invalid history: ")
    return error.rule, str(error).removeprefix(f"[{error.rule}] tests:proc returned an invalid history: ")


def edited_timestamp(message: ModelMessage) -> ModelMessage:
    return dataclasses.replace(message, timestamp=message.timestamp + timedelta(seconds=1))


def truncated_return(messages: Messages) -> Messages:
    out = copy.deepcopy(messages)
    part = out[2].parts[0]
    assert isinstance(part, ToolReturnPart)
    part.content = "contents of"
    return out


INVALID: list[tuple[str, Callable[[Messages], object], str, str]] = [
    ("empty", lambda h: [], "V1", "it returned an empty history; return at least the current request"),
    (
        "a tuple of one string",
        lambda h: "not a list",
        "V1",
        "it returned an object of type str, not a list of ModelRequest and ModelResponse messages",
    ),
    (
        "an int",
        lambda h: 3,
        "V1",
        "it returned an object of type int, not a list of ModelRequest and ModelResponse messages",
    ),
    (
        "dicts",
        lambda h: [{"kind": "request", "parts": []}, h[-1]],
        "V1",
        "item 0 is of type dict, not a ModelRequest or ModelResponse (serialized dictionaries are not accepted)",
    ),
    (
        "ends with a response",
        lambda h: h[:-1],
        "V2",
        "it must end with the current request, unchanged, but ends with a ModelResponse",
    ),
    (
        "altered last request text",
        lambda h: [*h[:-1], R("c9")],
        "V2",
        "it must end with the current request, unchanged, but ends with a different request",
    ),
    (
        "altered last request timestamp",
        lambda h: [*h[:-1], edited_timestamp(h[-1])],
        "V2",
        "it must end with the current request, unchanged, but ends with a different request",
    ),
    (
        "drop the call, keep its result",
        lambda h: [h[0], h[2], *h[3:]],
        "V8",
        "message 1 holds the result of tool call 'c1' (read_file) without the call; "
        "keep or drop whole groups (ctx.groups)",
    ),
    (
        "naive msgs[-2:]",
        lambda h: h[-2:],
        "V3",
        "message 0 is a copy from group 2 (messages 6-8), but not the whole group; "
        "keep or replace whole groups (ctx.groups)",
    ),
    (
        "duplicated group",
        lambda h: [*h[:6], *h[4:]],
        "V5",
        "it keeps group 1 (messages 4-5) twice; keep each group at most once",
    ),
    (
        "reordered groups",
        lambda h: [*h[4:6], *h[:4], *h[6:]],
        "V6",
        "it moves group 0 (messages 0-3) after a later group; keep groups in order",
    ),
    (
        "fabricated tool call summary",
        lambda h: [*h[:4], C("fake"), R("fake"), *h[6:]],
        "V10",
        "message 4 is a ModelResponse no model produced here (tool-call); "
        "a summary response may hold only TextParts without id or provider fields",
    ),
    (
        "fabricated tool return summary",
        lambda h: [*h[:4], Req(ToolReturnPart("read_file", "x", tool_call_id="c1")), *h[6:]],
        "V3b",
        "message 4 is a new request with tool-return; "
        "a summary request may hold only UserPromptPart text and CompactionPart",
    ),
    (
        "summary after the current group",
        lambda h: [*h, U("[summary]")],
        "V2",
        "it must end with the current request, unchanged, but ends with a different request",
    ),
    (
        "copied TextPart with an id in a summary",
        lambda h: [*h[:4], Resp(TextPart("a2", id="msg_1")), *h[6:]],
        "V10",
        "message 4 is a ModelResponse no model produced here (text); "
        "a summary response may hold only TextParts without id or provider fields",
    ),
    (
        "truncated tool return inside a kept group",
        truncated_return,
        "V3",
        "message 0 is a copy from group 0 (messages 0-3), but not the whole group; "
        "keep or replace whole groups (ctx.groups)",
    ),
    (
        "dropped system-prompt group",
        lambda h: h[4:],
        "V4",
        "it drops group 0 (messages 0-3), which is protected (system_prompt) and must be kept",
    ),
]


@pytest.mark.parametrize(("output", "rule", "sentence"), [case[1:] for case in INVALID], ids=[c[0] for c in INVALID])
def test_case_20_invalid_outputs(output: Callable[[Messages], object], rule: str, sentence: str) -> None:
    inputs = history()
    before = [serialize(m) for m in inputs]
    assert rejection(inputs, output(copy.deepcopy(inputs))) == (rule, sentence)
    assert [serialize(m) for m in inputs] == before


def test_case_21_valid_outputs_keep_original_objects_for_kept_groups() -> None:
    inputs = history()
    copies = copy.deepcopy(inputs)
    summary = Req(CompactionPart("q2 asked for a2"))
    accepted = validate(inputs, [*copies[:4], summary, *copies[6:]])
    assert accepted is not None
    assert [m is o for m, o in zip(accepted, [*inputs[:4], summary, *inputs[6:]], strict=True)] == [
        True,
        True,
        True,
        True,
        False,
        True,
        True,
        True,
    ]
    assert accepted[4] == summary
    user_summary = [*copies[:4], U("[summary of q2]"), T("ack"), *copies[6:]]
    accepted = validate(inputs, user_summary)
    assert accepted is not None
    assert accepted[4:6] == user_summary[4:6] and accepted[6] is inputs[6] and accepted[0] is inputs[0]


@pytest.mark.parametrize(
    "make", [lambda h: h, lambda h: copy.deepcopy(h), lambda h: tuple(h)], ids=["same", "equal", "tuple"]
)
def test_case_21_no_op_returns_none(make: Callable[[Messages], object]) -> None:
    inputs = history()
    assert validate(inputs, make(inputs)) is None


def test_keep_recent_outputs_always_validate() -> None:
    inputs = history()
    for n in (0, 1, 2):
        kept = keep_recent(copy.deepcopy(inputs), partition(inputs), n)
        accepted = validate(inputs, kept)
        assert accepted is None or all(any(m is o for o in inputs) for m in accepted)
    assert validate(inputs, keep_recent(inputs, partition(inputs), 0)) == [inputs[i] for i in (0, 1, 2, 3, 6, 7, 8)]


def test_case_10_stripping_signed_thinking_is_rejected() -> None:
    signed = Resp(ThinkingPart("plan", signature="sig"), TextPart("a1"), model_name="claude")
    inputs: Messages = [U("q1"), signed, U("q2")]
    stripped = dataclasses.replace(signed, parts=[TextPart("a1")])
    assert rejection(inputs, [inputs[0], stripped, inputs[2]]) == (
        "V3",
        "message 0 is a copy from group 0 (messages 0-1), but not the whole group; "
        "keep or replace whole groups (ctx.groups)",
    )
    assert rejection(inputs, [stripped, inputs[2]]) == (
        "V10",
        "message 0 is a ModelResponse no model produced here (text); "
        "a summary response may hold only TextParts without id or provider fields",
    )


def test_case_12_request_side_compaction_is_a_summary() -> None:
    inputs: Messages = [U("q1"), T("a1"), U("q2"), T("a2"), U("q3")]
    summary = Req(CompactionPart("q1 and q2 were about the parser"))
    assert validate(inputs, [summary, inputs[-1]]) == [summary, inputs[-1]]
    unsafe = ModelRequest(parts=[UserPromptPart(["a list", "of items"])])
    assert rejection(inputs, [unsafe, inputs[-1]])[0] == "V3b"


def test_case_18_v12_a_summary_response_may_not_lead_unless_the_input_did() -> None:
    inputs: Messages = [U("q1"), T("a1"), U("q2")]
    assert rejection(inputs, [T("summary: q1 was answered"), inputs[-1]]) == (
        "V12",
        "it starts with a ModelResponse; start with a request (a summary is a user-text request)",
    )
    leading: Messages = [T("imported greeting"), U("q1"), T("a1"), U("q2")]
    assert validate(leading, [leading[0], leading[-1]]) == [leading[0], leading[-1]]


def test_v9_a_kept_call_without_its_result() -> None:
    inputs: Messages = [U("q1"), C("c1"), R("c1"), T("a1"), U("q2")]
    assert rejection(inputs, [U("[summary]"), inputs[1], inputs[4]]) == (
        "V9",
        "message 1 calls read_file (id 'c1') without its result; keep or drop whole groups (ctx.groups)",
    )


def test_v4_unfinished_group_must_stay() -> None:
    inputs: Messages = [U("q1"), C("pend"), T("meanwhile"), U("q2")]
    assert rejection(inputs, [inputs[-1]]) == (
        "V4",
        "it drops group 0 (messages 0-2), which is protected (unfinished) and must be kept",
    )


def test_unserializable_output_is_v1() -> None:
    inputs: Messages = [U("q1"), T("a1"), U("q2")]
    broken = U("q0")
    broken.parts[0].content = object()  # type: ignore[union-attr]  # past the constructor's check
    rule, sentence = rejection(inputs, [broken, inputs[-1]])
    assert rule == "V1" and sentence.startswith("the output cannot be serialized (PydanticSerializationError:")


def test_tool_call_ids_duplicated_by_a_summary_are_v9() -> None:
    inputs: Messages = [U("q1"), C("c1"), R("c1"), T("a1"), U("q2")]
    twice = [
        *inputs[:4],
        ModelResponse(parts=[ToolCallPart("read_file", {}, tool_call_id="c1")]),
        ModelRequest(parts=[ToolReturnPart("read_file", "x", tool_call_id="c1")]),
        inputs[4],
    ]
    assert rejection(inputs, twice) == (
        "V9",
        "tool call id 'c1' appears in more calls than it did; keep each group once",
    )


def redacted_prompt(request: ModelRequest) -> ModelRequest:
    return dataclasses.replace(request, parts=[UserPromptPart("q3 [redacted]", timestamp=WHEN)])


def with_instructions(request: ModelRequest) -> ModelRequest:
    return dataclasses.replace(request, instructions="answer in French")


def with_metadata(request: ModelRequest) -> ModelRequest:
    return dataclasses.replace(request, metadata={"seen_by": "processor"})


def with_extra_part(request: ModelRequest) -> ModelRequest:
    return dataclasses.replace(request, parts=[*request.parts, UserPromptPart("also this", timestamp=WHEN)])


@pytest.mark.parametrize("edit", [redacted_prompt, with_instructions, with_metadata, with_extra_part])
@pytest.mark.parametrize("keep_first_cycle", [True, False])
def test_v2_the_current_request_comes_back_unchanged(
    edit: Callable[[ModelRequest], ModelRequest], keep_first_cycle: bool
) -> None:
    """Every change to the current request, whatever else the edit does, is V2 and points at that request."""
    inputs: Messages = [U("q1"), T("a1", model_name="m"), U("q2"), T("a2", model_name="m"), U("q3")]
    current = inputs[-1]
    assert isinstance(current, ModelRequest)
    output = [*(inputs[:-1] if keep_first_cycle else inputs[2:-1]), edit(copy.deepcopy(current))]
    with pytest.raises(HistoryProcessingValidationError) as caught:
        validate(inputs, output)
    assert (caught.value.rule, caught.value.output_index) == ("V2", len(output) - 1), str(caught.value)
    assert str(caught.value) == (
        "[V2] tests:proc returned an invalid history: "
        "it must end with the current request, unchanged, but ends with a different request"
    )
    unchanged = validate(inputs, [*output[:-1], copy.deepcopy(current)])  # the same edit with the request kept
    assert unchanged == (None if keep_first_cycle else inputs[2:])
