"""The group model (reference/history-processing.md §2) on the §6 edge cases; `keep_recent_groups`."""

from __future__ import annotations

import pytest
from pydantic_ai import PydanticAIDeprecationWarning
from pydantic_ai.messages import (
    CompactionPart,
    LoadCapabilityCallPart,
    LoadCapabilityReturnPart,
    ModelRequest,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryFeedbackPart,
    RetryInfo,
    RetryPromptPart,  # pyright: ignore[reportDeprecated]
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    ToolSearchCallPart,
    ToolSearchReturnPart,
    UserPromptPart,
    repair_messages,
)

from code_puppy.history.groups import (
    CURRENT_REQUEST,
    PROVIDER_COMPACTION,
    SIGNED_REASONING,
    SYSTEM_PROMPT,
    UNFINISHED,
    HistoryOrigin,
    describe_groups,
    keep_recent,
    partition,
    stored_groups,
)
from tests.history.history_cases import WHEN, C, R, Req, Resp, T, U, shape, texts

CUR = (CURRENT_REQUEST,)


def keep(messages: list, n: int) -> list:  # type: ignore[type-arg]
    return keep_recent(messages, partition(messages), n)


def test_case_01_first_request_is_one_current_group() -> None:
    history = [U("q1")]
    assert shape(partition(history)) == [(0, 1, False, CUR)]
    assert keep(history, 0) == history


def test_case_02_system_prompt_and_two_cycles() -> None:
    history = [Req(SystemPromptPart("be brief", timestamp=WHEN), UserPromptPart("q1")), T("a1"), U("q2"), T("a2")]
    history.append(U("q3"))
    assert shape(partition(history)) == [
        (0, 2, True, (SYSTEM_PROMPT,)),
        (2, 4, True, ()),
        (4, 5, False, CUR),
    ]
    assert keep(history, 0) == [history[0], history[1], history[4]]


def test_case_03_tool_cycle_is_one_closed_group() -> None:
    history = [U("q1"), C("c1"), R("c1"), T("a1"), U("q2"), T("a2"), U("q3")]
    assert shape(partition(history)) == [(0, 4, True, ()), (4, 6, True, ()), (6, 7, False, CUR)]
    assert keep(history, 0) == [history[6]]
    assert keep(history, 1) == history[4:]


def test_case_04_parallel_calls_and_split_returns_stay_in_one_group() -> None:
    history = [U("q1"), C("a", "b"), R("a", "b"), T("a1"), U("q2")]
    assert shape(partition(history)) == [(0, 4, True, ()), (4, 5, False, CUR)]
    split = [U("q1"), C("a", "b"), R("a"), R("b"), T("a1"), U("q2")]
    assert shape(partition(split)) == [(0, 5, True, ()), (5, 6, False, CUR)]
    assert [(o.tool_name, o.tool_call_id) for o in partition(history)[0].origins] == [
        ("read_file", "a"),
        ("read_file", "b"),
    ]


def test_case_05_mid_tool_loop_current_group_holds_the_calls() -> None:
    history = [U("q1"), T("a1"), U("q2"), C("c1"), R("c1")]
    assert shape(partition(history)) == [(0, 2, True, ()), (2, 5, False, CUR)]
    assert keep(history, 0) == history[2:]


def test_case_06_results_with_steering_text_stay_in_the_group() -> None:
    steered = Req(ToolReturnPart("read_file", "x", tool_call_id="c1", timestamp=WHEN), UserPromptPart("steer"))
    history = [U("q1"), C("c1"), steered, T("a1"), U("q2")]
    assert shape(partition(history)) == [(0, 4, True, ()), (4, 5, False, CUR)]


def test_case_07_tool_retry_is_one_group() -> None:
    retried = Req(ToolReturnPart("read_file", "bad args", tool_call_id="c1", outcome="retried", timestamp=WHEN))
    history = [U("q1"), C("c1"), retried, C("c2"), R("c2"), T("a1"), U("q2")]
    assert shape(partition(history)) == [(0, 6, True, ()), (6, 7, False, CUR)]


def test_case_08_legacy_retry_prompt_answers_a_call_only_with_a_tool_name() -> None:
    with pytest.warns(PydanticAIDeprecationWarning):
        answering = RetryPromptPart("fix the args", tool_name="read_file", tool_call_id="c1")  # pyright: ignore[reportDeprecated]
    history = [U("q1"), C("c1"), Req(answering), T("a1"), U("q2")]
    assert shape(partition(history)) == [(0, 4, True, ()), (4, 5, False, CUR)]
    with pytest.warns(PydanticAIDeprecationWarning):
        toolless = RetryPromptPart("try again", tool_name=None, tool_call_id="c1")  # pyright: ignore[reportDeprecated]
    unanswered = [U("q1"), C("c1"), Req(toolless), T("a1"), U("q2")]
    assert shape(partition(unanswered)) == [(0, 4, False, (UNFINISHED,)), (4, 5, False, CUR)]


def test_case_09_retry_feedback_continues_the_group() -> None:
    feedback = Req(RetryFeedbackPart("not valid JSON", retry=RetryInfo(cause="validation_error"), timestamp=WHEN))
    history = [U("q1"), T("bad"), feedback, T("a1"), U("q2")]
    assert shape(partition(history)) == [(0, 4, True, ()), (4, 5, False, CUR)]


def test_case_10_signed_thinking_protects_only_the_newest_closed_group() -> None:
    history = [
        U("q1"),
        Resp(ThinkingPart("hmm", signature="sig1"), TextPart("a1")),
        U("q2"),
        Resp(ThinkingPart("hmm", signature="sig2"), TextPart("a2")),
        U("q3"),
    ]
    assert shape(partition(history)) == [
        (0, 2, True, ()),
        (2, 4, True, (SIGNED_REASONING,)),
        (4, 5, False, CUR),
    ]
    assert keep(history, 0) == history[2:]
    assert keep(history, 1) == history  # the protected group does not count toward n


def test_case_11_native_tools_close_only_in_their_own_response() -> None:
    paired = Resp(
        NativeToolCallPart("web_search", {"q": "x"}, tool_call_id="n1"),
        NativeToolReturnPart("web_search", "results", tool_call_id="n1", timestamp=WHEN),
        TextPart("found"),
    )
    assert shape(partition([U("q1"), paired, U("q2")])) == [(0, 2, True, ()), (2, 3, False, CUR)]
    dangling = Resp(NativeToolCallPart("web_search", {"q": "x"}, tool_call_id="n1"), TextPart("searching"))
    assert shape(partition([U("q1"), dangling, U("q2")])) == [(0, 2, False, (UNFINISHED,)), (2, 3, False, CUR)]


def test_case_12_provider_compaction_is_protected_request_summary_is_not() -> None:
    provider = Resp(CompactionPart("opaque", provider_name="anthropic"), TextPart("a1"))
    summary = Req(CompactionPart("earlier we fixed the parser"))
    history = [summary, T("ok"), U("q1"), provider, U("q2")]
    assert shape(partition(history)) == [(0, 2, True, ()), (2, 4, True, (PROVIDER_COMPACTION,)), (4, 5, False, CUR)]
    with pytest.raises(ValueError, match="must not set `provider_name`"):
        ModelRequest(parts=[CompactionPart("s", provider_name="anthropic")])


def test_case_14_a_pending_deferred_call_leaves_its_group_unfinished() -> None:
    history = [U("q1"), T("a1"), U("q2"), C("pend"), U("q3")]
    # (pydantic-ai refuses a new prompt on top of an unanswered call; the agent-level test repairs it first)
    assert shape(partition(history)) == [(0, 2, True, ()), (2, 4, False, (UNFINISHED,)), (4, 5, False, CUR)]
    assert keep(history, 0) == history[2:]
    pending = [U("q1"), C("pend"), T("meanwhile"), U("q2")]
    assert shape(partition(pending)) == [(0, 3, False, (UNFINISHED,)), (3, 4, False, CUR)]


def test_case_15_interrupted_suspended_and_incomplete_states_are_unfinished() -> None:
    interrupted_request = ModelRequest(parts=[UserPromptPart("q1")], timestamp=WHEN, state="interrupted")
    for first in ([interrupted_request, T("a1")], [U("q1"), T("partial", state="incomplete")]):
        assert shape(partition([*first, U("q2")])) == [(0, 2, False, (UNFINISHED,)), (2, 3, False, CUR)]
    suspended = [U("q1"), T("wait", state="suspended"), U("q2")]
    assert shape(partition(suspended)) == [(0, 2, False, (UNFINISHED,)), (2, 3, False, CUR)]
    # an interrupted response whose calls got synthesized returns is closed
    interrupted_calls = Resp(ToolCallPart("shell", {}, tool_call_id="s1"), state="interrupted")
    repaired = repair_messages([U("q1"), interrupted_calls, T("done"), U("q2")], repair_last_response=False)
    assert shape(partition(repaired)) == [(0, 4, True, ()), (4, 5, False, CUR)]


def test_case_16_a_reused_tool_call_id_leaves_the_earlier_call_dangling() -> None:
    history = [U("q1"), C("x"), C("x"), R("x"), T("a1"), U("q2")]
    assert shape(partition(history)) == [(0, 5, False, (UNFINISHED,)), (5, 6, False, CUR)]
    reused = [U("q1"), C("x"), R("x"), T("a1"), U("q2"), C("x"), R("x"), T("a2"), U("q3")]
    assert shape(partition(reused)) == [(0, 4, True, ()), (4, 8, True, ()), (8, 9, False, CUR)]


def test_case_17_typed_tool_parts_pair_like_their_base_classes() -> None:
    search = Resp(ToolSearchCallPart(args={"queries": ["x"]}, tool_call_id="s1"))
    found = Req(ToolSearchReturnPart(tool_call_id="s1", content={"discovered_tools": []}, timestamp=WHEN))  # type: ignore[typeddict-item]
    load = Resp(LoadCapabilityCallPart(tool_call_id="l1", args={"name": "x"}))  # type: ignore[arg-type]
    loaded = Req(LoadCapabilityReturnPart(tool_call_id="l1", content="loaded", timestamp=WHEN))  # type: ignore[arg-type]
    history = [U("q1"), search, found, load, loaded, T("a1"), U("q2")]
    assert shape(partition(history)) == [(0, 6, True, ()), (6, 7, False, CUR)]
    assert shape(partition([U("q1"), search, T("a1"), U("q2")])) == [(0, 3, False, (UNFINISHED,)), (3, 4, False, CUR)]


def test_case_18_a_history_starting_with_a_response() -> None:
    history = [T("hello, I am an imported greeting"), U("q1"), T("a1"), U("q2")]
    assert shape(partition(history)) == [(0, 1, True, ()), (1, 3, True, ()), (3, 4, False, CUR)]
    assert keep(history, 0) == [history[3]]


def test_case_19_system_prompt_scopes() -> None:
    dynamic = SystemPromptPart("today is Monday", timestamp=WHEN, dynamic_ref="date")
    request_scoped = SystemPromptPart("reminder: run tests", timestamp=WHEN, scope="request")
    appended = SystemPromptPart("context v2", timestamp=WHEN, context_id="ctx")
    history = [
        Req(dynamic, UserPromptPart("q1")),
        T("a1"),
        Req(request_scoped, UserPromptPart("q2")),
        T("a2"),
        Req(appended, UserPromptPart("q3")),
        T("a3"),
        U("q4"),
    ]
    assert shape(partition(history)) == [
        (0, 2, True, (SYSTEM_PROMPT,)),
        (2, 4, True, ()),
        (4, 6, True, (SYSTEM_PROMPT,)),
        (6, 7, False, CUR),
    ]
    assert keep(history, 0) == [*history[:2], *history[4:]]


def test_origins_come_from_message_fields() -> None:
    call = Resp(ToolCallPart("grep", {"pattern": "x"}, tool_call_id="g1"), run_id="run-2")
    history = [U("q1"), T("a1", run_id="run-1"), U("q2"), call, R("g1", tool="grep"), T("a2", run_id="run-2"), U("q3")]
    groups = partition(history)
    assert [g.origins for g in groups] == [
        (HistoryOrigin("run-1"),),
        (HistoryOrigin("run-2", "grep", "g1"),),
        (HistoryOrigin(None),),
    ]


def test_case_25_keep_recent_groups_arguments() -> None:
    history = [U("q1"), T("a1"), U("q2"), T("a2"), U("q3")]
    groups = partition(history)
    for wrong in (True, False, 1.0, "1", None):
        with pytest.raises(TypeError, match="takes an int"):
            keep_recent(history, groups, wrong)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n >= 0"):
        keep_recent(history, groups, -1)
    assert keep_recent(history, groups, 0) == [history[4]]
    assert keep_recent(history, groups, 1) == history[2:]
    assert keep_recent(history, groups, 50) == history


@pytest.mark.parametrize("n", range(2 * 5 + 1))
def test_keep_recent_groups_keeps_the_last_n_eligible_groups_for_every_n(n: int) -> None:
    """Five groups, three of them eligible: every `n` from 0 to twice the group count keeps `min(n, 3)` of those."""
    system = Req(SystemPromptPart("sys", timestamp=WHEN), UserPromptPart("q1", timestamp=WHEN))
    history = [system, T("a1"), U("q2"), C("c2"), R("c2"), T("a2"), U("q3"), T("a3"), U("q4"), T("a4"), U("q5")]
    assert [g.eligible for g in partition(history)] == [False, True, True, True, False]
    eligible = [["U:q2", "C:c2", "R:c2", "T:a2"], ["U:q3", "T:a3"], ["U:q4", "T:a4"]]
    kept = [text for group in eligible[len(eligible) - min(n, len(eligible)) :] for text in group]
    assert texts(keep(history, n)) == ["system-prompt U:q1", "T:a1", *kept, "U:q5"]


def test_stored_groups_and_describe_groups() -> None:
    history = [Req(SystemPromptPart("sys", timestamp=WHEN), UserPromptPart("q1")), C("c1"), R("c1"), T("a1")]
    history += [U("q2 " + "x" * 100), T("a2")]
    assert shape(stored_groups(history)) == [(0, 4, True, (SYSTEM_PROMPT,)), (4, 6, True, ())]
    failed = [U("q1"), T("a1"), U("q2")]
    assert shape(stored_groups(failed)) == [(0, 2, True, ()), (2, 3, False, CUR)]
    groups = stored_groups(history)
    assert describe_groups(history) == [
        f"2 groups · ~{groups[0].estimated_tokens + groups[1].estimated_tokens} tokens (estimated_tokens)",
        f"group 0 · messages 0-3 · closed · ~{groups[0].estimated_tokens} tokens · protected: system_prompt "
        "· tools: read_file",
        "  › q1",
        f"group 1 · messages 4-5 · closed · ~{groups[1].estimated_tokens} tokens",
        "  › q2 " + "x" * 76 + "…",
    ]


def test_texts_helper_shows_the_shapes() -> None:
    assert texts([U("q1"), C("c1"), R("c1"), T("a1")]) == ["U:q1", "C:c1", "R:c1", "T:a1"]
    assert texts([Resp(ToolCallPart("x", {}, tool_call_id="k"), TextPart("t"))]) == ["C:k T:t"]
