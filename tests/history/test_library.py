"""The ready-made processors of `code_puppy.history` on synthetic histories: tool loops, protected groups (a system
prompt, signed reasoning), a current group mid tool loop; every output goes through the validator."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, SystemPromptPart, TextPart, ThinkingPart, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.profiles import ModelProfile
from pydantic_ai.usage import RunUsage

from code_puppy.history import (
    SUMMARY_HEADER,
    fit_token_budget,
    keep_recent_turns,
    summarize_older_turns,
    when_over,
)
from code_puppy.history.processing import HistoryProcessorContext, HistoryProcessorState
from code_puppy.history.processing import processor_context as make_context
from code_puppy.history.revision import Revision
from code_puppy.history.summary import SUMMARY_ACK
from code_puppy.history.tokens import serialize
from code_puppy.history.validation import validate_output
from tests.history.history_cases import WHEN, C, R, Resp, T, U, texts

HISTORY: list[ModelMessage] = [
    U("q1", SystemPromptPart("you are a puppy", timestamp=WHEN)),  # group 0: protected, system_prompt
    T("a1"),
    U("q2"),  # group 1: a tool loop
    C("c1"),
    R("c1"),
    T("a2"),
    U("q3"),  # group 2: parallel calls
    C("c2", "c3"),
    R("c2", "c3"),
    T("a3"),
    U("q4"),  # group 3: plain
    T("a4"),
    U("q5"),  # group 4: the newest closed, with signed reasoning: protected
    Resp(ThinkingPart("hmm", signature="sig"), TextPart("a5")),
    U("q6"),  # group 5: current, mid tool loop
    C("c4"),
    R("c4"),
]
GROUPS = {  # the texts of each group, as `texts` renders them
    0: ["S U:q1", "T:a1"],
    1: ["U:q2", "C:c1", "R:c1", "T:a2"],
    2: ["U:q3", "C:c2 C:c3", "R:c2 R:c3", "T:a3"],
    3: ["U:q4", "T:a4"],
    4: ["U:q5", "thinking T:a5"],
    5: ["U:q6", "C:c4", "R:c4"],
}


def rendered(messages: list[ModelMessage]) -> list[str]:
    return [line.replace("system-prompt ", "S ") for line in texts(messages)]


def groups(*indexes: int) -> list[str]:
    return [line for index in indexes for line in GROUPS[index]]


def model(window: int | None = None, reply: Any = None) -> FunctionModel:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if reply is None:
            raise AssertionError("no model request expected")
        return reply(messages, info)

    return FunctionModel(answer, profile=ModelProfile(context_window=window))


def context(
    messages: list[ModelMessage], serving: Model, *, summary_model: Model | None = None, run_id: str = "run-1"
) -> HistoryProcessorContext:
    run = RunContext[Any](deps=None, model=serving, usage=RunUsage(), run_id=run_id)
    return make_context(list(messages), run, model=serving, revision=Revision(), summary_model=summary_model)


def accepted(output: list[ModelMessage], inputs: list[ModelMessage]) -> list[ModelMessage]:
    """The output as the validator accepts it (it raises for an invalid one); the input for a no-op."""
    result = validate_output(
        output, inputs, [serialize(m) for m in inputs], context(inputs, model()).groups, processor="test"
    )
    return inputs if result is None else result.messages


def test_the_synthetic_history_has_the_groups_the_tests_assume() -> None:
    ctx = context(HISTORY, model())
    assert [(g.index, g.protected_reasons) for g in ctx.groups] == [
        (0, ("system_prompt",)),
        (1, ()),
        (2, ()),
        (3, ()),
        (4, ("signed_reasoning",)),
        (5, ("current_request",)),
    ]
    assert rendered(HISTORY) == groups(0, 1, 2, 3, 4, 5)


@pytest.mark.parametrize(
    ("n", "kept"),
    [(0, (0, 4, 5)), (1, (0, 3, 4, 5)), (2, (0, 2, 3, 4, 5)), (9, (0, 1, 2, 3, 4, 5))],
)
def test_keep_recent_turns_keeps_the_last_n_finished_turns_and_everything_protected(
    n: int, kept: tuple[int, ...]
) -> None:
    output = keep_recent_turns(n)(context(HISTORY, model()))
    assert rendered(accepted(output, HISTORY)) == groups(*kept)


def test_fit_token_budget_drops_the_oldest_turns_until_the_groups_fit(capsys: pytest.CaptureFixture[str]) -> None:
    ctx = context(HISTORY, model())
    sizes = {g.index: g.estimated_tokens for g in ctx.groups}
    budget = sum(sizes.values()) - sizes[1] - sizes[2]  # fits once groups 1 and 2 are gone, not before
    output = fit_token_budget(max_tokens=budget)(ctx)
    assert rendered(accepted(output, HISTORY)) == groups(0, 3, 4, 5)
    assert capsys.readouterr().err == ""


def test_fit_token_budget_as_a_fraction_of_the_context_window() -> None:
    ctx = context(HISTORY, model(window=1_000_000))
    assert rendered(accepted(fit_token_budget(fraction=0.5)(ctx), HISTORY)) == groups(0, 1, 2, 3, 4, 5)
    sizes = {g.index: g.estimated_tokens for g in ctx.groups}
    window = (sum(sizes.values()) - sizes[1]) * 2  # half of it fits once group 1 is gone
    output = fit_token_budget(fraction=0.5)(context(HISTORY, model(window=window)))
    assert rendered(accepted(output, HISTORY)) == groups(0, 2, 3, 4, 5)


def test_fit_token_budget_keeps_protected_groups_over_budget_and_says_so_once_per_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    processor = fit_token_budget(max_tokens=1)
    ctx = context(HISTORY, model())
    left = sum(g.estimated_tokens for g in ctx.groups if g.index in (0, 4, 5))
    assert rendered(accepted(processor(ctx), HISTORY)) == groups(0, 4, 5)
    processor(ctx)  # the same run's next request
    line = (
        f"code-puppy: note: fit_token_budget: the history still needs ~{left} tokens, over its budget of 1: the "
        "turns left are protected or current, and are kept\n"
    )
    assert capsys.readouterr().err == line
    processor(context(HISTORY, model(), run_id="run-2"))
    assert capsys.readouterr().err == line


def test_fit_token_budget_with_an_unknown_window_keeps_everything_and_says_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    output = fit_token_budget(fraction=0.5)(context(HISTORY, model()))
    assert accepted(output, HISTORY) is HISTORY  # a no-op
    assert capsys.readouterr().err == (
        "code-puppy: note: fit_token_budget(fraction=0.5) keeps the whole history: the context window of "
        "function:function:answer: is unknown (set context_window in its [models] entry, or use max_tokens)\n"
    )


def test_when_over_compares_the_request_estimate_with_the_window() -> None:
    def state(tokens: int, window: int | None) -> HistoryProcessorState:
        return HistoryProcessorState("openai", "m", 1, 0, 0, 10, tokens, window, 3)

    over = when_over(0.5)
    assert [over(state(50, 100)), over(state(51, 100)), over(state(10**6, None))] == [False, True, False]


SUMMARY = "The user asked about q2 and q3; files c1, c2 and c3 were read."


def summarizer(seen: list[list[ModelMessage]], fail: bool = False) -> FunctionModel:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        assert info.function_tools == []  # a separate agent: no tools
        if fail:
            raise RuntimeError("summary model down")
        return ModelResponse(parts=[TextPart(SUMMARY)])

    return model(reply=reply)


def test_summarize_older_turns_replaces_the_older_finished_turns_with_one_summary() -> None:
    seen: list[list[ModelMessage]] = []
    ctx = context(HISTORY, model(window=100), summary_model=summarizer(seen))
    output = summarize_older_turns(keep=1)(ctx)

    result = accepted(asyncio.run(output), HISTORY)
    assert rendered(result) == [*groups(0), f"U:{SUMMARY_HEADER}\n\n{SUMMARY}", f"T:{SUMMARY_ACK}", *groups(3, 4, 5)]
    assert len(seen) == 1
    prompt = seen[0][0].parts[-1]
    assert isinstance(prompt, UserPromptPart)
    assert prompt.content == (
        'Summarize this conversation:\n\nUser: q2\nAssistant called read_file({"path":"c1"})\nread_file returned: '
        'contents of c1\nAssistant: a2\nUser: q3\nAssistant called read_file({"path":"c2"})\nAssistant called '
        'read_file({"path":"c3"})\nread_file returned: contents of c2\nread_file returned: contents of c3\n'
        "Assistant: a3"
    )
    assert ctx.run_context.usage.requests == 1  # the summary's usage is the run's
    # The next request: the only older turn is the summary itself, so nothing is summarized again.
    again = asyncio.run(
        summarize_older_turns(keep=1)(context(result, model(window=100), summary_model=summarizer(seen)))
    )
    assert accepted(again, result) is result and len(seen) == 1


def test_summarize_older_turns_waits_for_the_trigger() -> None:

    seen: list[list[ModelMessage]] = []
    for window in (None, 10**6):
        ctx = context(HISTORY, model(window=window), summary_model=summarizer(seen))
        assert accepted(asyncio.run(summarize_older_turns(keep=1)(ctx)), HISTORY) is HISTORY
    assert seen == []


def test_a_failed_summary_leaves_the_history_and_is_not_retried_in_that_run(
    capsys: pytest.CaptureFixture[str],
) -> None:

    seen: list[list[ModelMessage]] = []
    processor = summarize_older_turns(keep=1)
    for _ in range(2):
        ctx = context(HISTORY, model(window=100), summary_model=summarizer(seen, fail=True))
        assert accepted(asyncio.run(processor(ctx)), HISTORY) is HISTORY
    assert len(seen) == 1
    assert capsys.readouterr().err == (
        "code-puppy: note: summarize_older_turns: the summary failed (RuntimeError: summary model down); the "
        "history is left as it was\n"
    )


def test_summarize_older_turns_uses_its_named_model_through_the_resolver() -> None:

    seen: list[list[ModelMessage]] = []
    named = summarizer(seen)
    run = RunContext[Any](deps=None, model=model(window=100), usage=RunUsage(), run_id="r")
    ctx = make_context(
        list(HISTORY), run, model=run.model, revision=Revision(), resolve_model={"cheap": named}.__getitem__
    )
    processor = summarize_older_turns(keep=1, model="cheap")
    assert processor.model_names == ("cheap",)
    output = asyncio.run(processor(ctx))
    assert len(seen) == 1 and rendered(accepted(output, HISTORY))[2] == f"U:{SUMMARY_HEADER}\n\n{SUMMARY}"


@pytest.mark.parametrize(
    ("factory", "args"),
    [
        (keep_recent_turns, {"n": "4"}),
        (keep_recent_turns, {"n": True}),
        (keep_recent_turns, {"n": -1}),
        (keep_recent_turns, {"m": 4}),
        (fit_token_budget, {}),
        (fit_token_budget, {"max_tokens": 100, "fraction": 0.5}),
        (fit_token_budget, {"max_tokens": 0}),
        (fit_token_budget, {"fraction": 1.5}),
        (fit_token_budget, {"fraction": "0.5"}),
        (summarize_older_turns, {"keep": -1}),
        (summarize_older_turns, {"model": ""}),
        (summarize_older_turns, {"trigger_fraction": 0}),
        (when_over, {"fraction": 2}),
    ],
)
def test_factories_refuse_bad_arguments(factory: Any, args: dict[str, Any]) -> None:
    with pytest.raises(ValueError) as raised:  # pydantic's ValidationError is a ValueError too
        factory(**args)
    assert isinstance(raised.value, ValidationError) or "exactly one of" in str(raised.value)
