"""`Spending` and `CostMeter` on pydantic-ai FunctionModels: compaction summaries (automatic and `/compact`) are
counted and stored with the session, priced by configured prices; budgets stop a run before its next request. Then
`Spending` alone, on responses of chosen sizes and a clock the test sets: each budget's count, its edges (exactly
spent, 80%, midnight), prices and unpriced models."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import RequestUsage

from code_puppy.config import BudgetConfig, HistoryConfig, ModelEndpoint, Settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent
from code_puppy.core.turn import run_turn
from code_puppy.cost.spending import BudgetReached, Budgets, CostMeter, Spending, dollars
from code_puppy.history.compaction import compact_history
from code_puppy.models import Price, entry_price, resolve_model, with_price
from code_puppy.run.deps import RunDeps
from code_puppy.sessions.costs import CostTotals, RequestCost, format_cost
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore
from tests.history.history_cases import C, R, T, U
from tests.history.test_compaction import Model, long_history, read

PRICES = (1.0, 2.0)
"""US dollars per million input and output tokens, configured for the function model."""


def spending_for(
    model: FunctionModel, store: SqliteConversationStore, *, per_turn_usd: float | None = None
) -> Spending:
    """A `Spending` in `store`'s ledger, `model` priced at `PRICES` as a `[models.NAME]` entry's price does."""
    with_price(model, PRICES)
    return Spending(budgets=Budgets(per_turn_usd=per_turn_usd), book=store.costs)


def priced(request: RequestCost) -> float:
    return (request.input_tokens * PRICES[0] + request.output_tokens * PRICES[1]) / 1_000_000


class Sink:
    def __init__(self) -> None:
        self.requests: list[RequestCost] = []
        self.warnings: list[str] = []

    def run_started(self, index: int) -> None:
        pass

    def event(self, event: object) -> None:
        pass

    def request(self, cost: RequestCost) -> None:
        self.requests.append(cost)

    def warning(self, text: str) -> None:
        self.warnings.append(text)


async def test_an_automatic_compaction_summary_is_counted(project: Path, store: SqliteConversationStore) -> None:
    session = await Session.start(store, project, model="test")
    await session.set_message_history(long_history())
    script = Model([read("r1"), "done"])
    model = script.model
    spending = spending_for(model, store)
    settings = Settings(history=HistoryConfig(compaction="summarize"))
    agent = build_pydantic_agent(settings, AgentOptions(model=model, project_root=project, spending=spending))
    sink = Sink()
    outcome = await run_turn(agent, RunDeps(session), "new question", sink)  # type: ignore[arg-type]
    assert outcome.error is None and script.summaries == 1
    assert [request.kind for request in sink.requests] == ["compaction", "main", "main"]
    assert {request.session_id for request in sink.requests} == {session.id}
    total = sum(priced(request) for request in sink.requests)
    assert spending.turn.cost_usd == pytest.approx(total) and spending.turn.complete
    stored = store.costs.breakdown(session.id)
    assert [(kind, totals.requests) for kind, _, totals in stored] == [("compaction", 1), ("main", 2)]
    assert store.costs.session_totals([session.id])[session.id].cost_usd == pytest.approx(total)
    # The summary's tokens are in the turn's usage too (the harness folds them into the run's).
    assert outcome.usage.requests == 3


async def test_compact_now_is_counted_with_the_session(project: Path, store: SqliteConversationStore) -> None:
    session = await Session.start(store, project, model="test")
    await session.set_message_history([U("q1"), C("c1"), R("c1"), T("a1", model_name="m"), U("q2"), T("a2")])
    script = Model([])
    model = script.model
    spending = spending_for(model, store)
    spending.session_id = session.id
    report = await compact_history(
        session, model, keep_messages=2, summary_capabilities=[CostMeter(spending, kind="compaction")]
    )
    assert report.changed and script.summaries == 1
    ((kind, name, totals),) = store.costs.breakdown(session.id)
    assert (kind, name, totals.requests) == ("compaction", model.model_name, 1)
    assert totals.input_tokens == report.usage.input_tokens and totals.cost_usd is not None


async def test_a_spent_turn_budget_stops_before_the_next_request(project: Path, store: SqliteConversationStore) -> None:
    session = await Session.start(store, project, model="test")
    script = Model([read("r1"), read("r2"), "never"])
    model = script.model
    spending = spending_for(model, store, per_turn_usd=1e-9)
    agent = build_pydantic_agent(Settings(), AgentOptions(model=model, project_root=project, spending=spending))
    outcome = await run_turn(agent, RunDeps(session), "read", Sink())  # type: ignore[arg-type]
    assert isinstance(outcome.error, BudgetReached)
    assert str(outcome.error).startswith("budget $0.000000001 reached ([budget] per_turn_usd): $0.")
    assert len(script.seen) == 1  # the request in flight finished; no other was sent
    assert [type(m).__name__ for m in session.messages] == ["ModelRequest", "ModelResponse", "ModelRequest"]


async def test_a_compaction_summary_that_spends_the_budget_stops_the_request_it_was_for(
    project: Path, store: SqliteConversationStore
) -> None:
    session = await Session.start(store, project, model="test")
    await session.set_message_history(long_history())
    script = Model(["never"])
    model = script.model
    spending = spending_for(model, store, per_turn_usd=1e-9)
    settings = Settings(history=HistoryConfig(compaction="summarize"))
    agent = build_pydantic_agent(settings, AgentOptions(model=model, project_root=project, spending=spending))
    sink = Sink()
    outcome = await run_turn(agent, RunDeps(session), "new question", sink)  # type: ignore[arg-type]
    assert isinstance(outcome.error, BudgetReached)
    assert (script.summaries, script.seen) == (1, [])
    assert [request.kind for request in sink.requests] == ["compaction"]
    assert spending.turn.cost_usd == pytest.approx(priced(sink.requests[0]))


def test_totals_never_show_an_unknown_cost_as_zero() -> None:
    unpriced = CostTotals.of(RequestCost("s", "main", "local", 10, 5))
    some = unpriced + CostTotals.of(RequestCost("s", "main", "gpt-4o", 10, 5, cost_usd=0.25))
    assert (unpriced.cost_usd, unpriced.complete, unpriced.describe()) == (None, False, "cost unknown")
    assert (some.cost_usd, some.complete, some.describe()) == (0.25, False, "at least $0.2500")
    assert (CostTotals().cost_usd, CostTotals().complete, format_cost(1.5)) == (0.0, True, "$1.50")


def never_called(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    raise AssertionError("Spending only reads a model's name and provider")


PRICED = with_price(FunctionModel(never_called, model_name="priced"), PRICES)
"""A model priced by configuration only (`PRICES`)."""
KNOWN = FunctionModel(never_called, model_name="gpt-4o")
"""A model genai-prices knows: $2.50 input, $10 output per million tokens."""
MYSTERY = FunctionModel(never_called, model_name="mystery")
"""A model nothing can price."""
EAST = timezone(timedelta(hours=2))
"""The local time zone of the clock the tests set, east of UTC: a local day is not a UTC day."""


def costing(usd: float, model_name: str | None = None) -> ModelResponse:
    """A response that costs exactly `usd` (a multiple of $0.000001) at `PRICES`: all of it on output tokens past
    the first dollar's worth of input."""
    input_tokens = min(round(usd * 1_000_000), 1_000_000)
    output_tokens = (round(usd * 1_000_000) - input_tokens) // 2
    return ModelResponse(
        parts=[TextPart("answer")],
        usage=RequestUsage(input_tokens=input_tokens, output_tokens=output_tokens),
        model_name=model_name,
    )


def tracking(
    budgets: Budgets, *, store: SqliteConversationStore | None = None, project_dir: Path | None = None
) -> tuple[Spending, list[str]]:
    """A `Spending` with `budgets` over `PRICED` (its ledger `store`'s, if given), and the warnings it gives."""
    book = store.costs if store is not None else None
    spending = Spending(budgets=budgets, book=book, project_dir=project_dir)
    warnings: list[str] = []
    spending.on_warning = warnings.append
    return spending, warnings


def test_a_budget_spent_exactly_stops_the_next_request() -> None:
    spending, _ = tracking(Budgets(max_usd=1.0))
    spending.check(PRICED)
    spending.record("main", PRICED, costing(0.5), run_id="r1")
    spending.check(PRICED)  # half of it
    spending.record("main", PRICED, costing(0.5), run_id="r1")
    with pytest.raises(BudgetReached) as stopped:
        spending.check(PRICED)
    assert str(stopped.value) == "budget $1 reached (--max-budget-usd): $1.00 spent"


@pytest.mark.parametrize(
    ("budgets", "active"),
    [
        (Budgets(), False),
        (Budgets(unknown_price="allow"), False),
        (Budgets(max_usd=1.0), True),
        (Budgets(per_turn_usd=1.0), True),
        (Budgets(per_session_usd=1.0), True),
        (Budgets(per_day_usd=1.0), True),
    ],
)
def test_any_one_budget_makes_the_budgets_active(budgets: Budgets, active: bool) -> None:
    assert budgets.active is active


def test_the_config_and_the_flag_make_the_budgets() -> None:
    config = BudgetConfig(per_turn_usd=1.0, per_session_usd=2.0, per_day_usd=3.0, unknown_price="allow")
    assert Budgets.of(config, 4.0) == Budgets(4.0, 1.0, 2.0, 3.0, "allow")
    assert Budgets.of(BudgetConfig()) == Budgets()


def test_each_budget_counts_its_own_requests(store: SqliteConversationStore) -> None:
    now = datetime(2026, 3, 2, 12, 0, tzinfo=EAST)
    spending, _ = tracking(Budgets(8.0, 16.0, 32.0, 64.0), store=store)
    spending.clock = lambda: now
    spending.begin_turn("first")
    spending.record("main", PRICED, costing(1.0), run_id="r1")
    spending.begin_turn("second")
    spending.record("main", PRICED, costing(0.5), run_id="r2")
    # Another process's request of the second session, today: the session's and the day's, not this process's.
    store.costs.record(RequestCost("second", "main", "priced", 1, 1, cost_usd=0.25), at=now)
    assert spending.standing() == [
        ("--max-budget-usd", 8.0, 1.5),
        ("[budget] per_turn_usd", 16.0, 0.5),
        ("[budget] per_session_usd", 32.0, 0.75),
        ("[budget] per_day_usd", 64.0, 1.75),
    ]
    assert (spending.invocation.requests, spending.turn.requests) == (2, 1)


def test_without_a_store_the_session_and_the_day_are_this_processs_requests() -> None:
    spending, _ = tracking(Budgets(per_session_usd=4.0, per_day_usd=8.0))
    assert spending.standing() == [("[budget] per_day_usd", 8.0, 0.0)]  # no session yet: no session budget
    spending.begin_turn("first")
    spending.record("main", PRICED, costing(1.0), run_id="r1")
    spending.begin_turn("second")
    spending.record("main", PRICED, costing(0.5), run_id="r2")
    spending.record("title", PRICED, costing(0.25), run_id="r3", session_id="first")
    assert spending.standing() == [("[budget] per_session_usd", 4.0, 0.5), ("[budget] per_day_usd", 8.0, 1.75)]
    assert spending.session_total("first") == CostTotals(2, 1_250_000, 0, priced_usd=1.25)
    assert spending.session_total("never") == CostTotals()


def test_a_request_is_recorded_with_its_session_run_and_tokens(store: SqliteConversationStore, project: Path) -> None:
    now = datetime(2026, 3, 2, 12, 0, tzinfo=EAST)
    spending, _ = tracking(Budgets(), store=store, project_dir=project)
    spending.clock = lambda: now
    seen: list[RequestCost] = []
    spending.on_request = seen.append
    before = spending.record("main", PRICED, costing(0.5), run_id="r0")
    assert (before.session_id, before.run) == ("", 0)  # before any turn
    spending.begin_turn("s1")
    spending.run_index = 2
    response = costing(0.5)
    response.usage.cache_read_tokens, response.usage.cache_write_tokens = 7, 3
    recorded = spending.record("continuation", PRICED, response, run_id="r2")
    assert recorded == RequestCost(
        session_id="s1",
        kind="continuation",
        model="priced",
        input_tokens=500_000,
        output_tokens=0,
        cache_read_tokens=7,
        cache_write_tokens=3,
        cost_usd=0.5,
        saved_usd=0.0,  # its price has no cache prices: cached tokens cost what the others do
        run=2,
        run_id="r2",
        project_dir=str(project),
    )
    titled = spending.record("title", PRICED, costing(0.25), run_id="r3", session_id="s0")
    assert seen == [seen[0], recorded, titled] and titled.session_id == "s0"
    assert store.costs.session_totals(["s1", "s0"]) == {
        "s1": CostTotals(1, 500_000, 0, 7, 3, 0.5),
        "s0": CostTotals(1, 250_000, 0, priced_usd=0.25),
    }
    assert store.costs.since(now)[1].requests == 3
    assert store.costs.since(now + timedelta(microseconds=1))[1].requests == 0  # stored at the clock's time
    assert spending.turn == CostTotals(2, 750_000, 0, 7, 3, 0.75)  # the title written during the turn counts for it


def test_the_turn_budget_starts_again_with_each_turn() -> None:
    spending, _ = tracking(Budgets(per_turn_usd=1.0))
    spending.begin_turn("s1")
    spending.record("main", PRICED, costing(1.0), run_id="r1")
    with pytest.raises(BudgetReached, match=r"^budget \$1 reached \(\[budget\] per_turn_usd\): \$1.00 spent$"):
        spending.check(PRICED)
    spending.run_index = 3
    spending.begin_turn("s1")
    spending.check(PRICED)
    assert (spending.run_index, spending.turn, spending.session_id) == (0, CostTotals(), "s1")


def test_the_warning_comes_once_at_80_percent_and_not_at_the_limit() -> None:
    spending, warnings = tracking(Budgets(max_usd=1.0))
    spending.record("main", PRICED, costing(0.75), run_id="r1")
    assert warnings == []
    spending.record("main", PRICED, costing(0.05), run_id="r1")  # 80% exactly
    spending.record("main", PRICED, costing(0.1), run_id="r1")
    assert warnings == ["80% of the budget $1 spent (--max-budget-usd): $0.8000"]
    reached, warnings = tracking(Budgets(max_usd=1.0))
    reached.record("main", PRICED, costing(1.0), run_id="r1")
    assert warnings == []  # spent: the stop says so


def test_the_day_starts_at_local_midnight(store: SqliteConversationStore) -> None:
    """A process running across midnight does not count yesterday against the daily budget."""
    clock = [datetime(2026, 3, 1, 23, 59, tzinfo=EAST)]
    spending, _ = tracking(Budgets(per_day_usd=1.0), store=store)
    spending.clock = lambda: clock[0]
    spending.record("main", PRICED, costing(1.0), run_id="r1")
    with pytest.raises(BudgetReached):
        spending.check(PRICED)
    clock[0] = datetime(2026, 3, 2, 0, 0, tzinfo=EAST)
    spending.check(PRICED)  # a new day: yesterday's dollar is not today's
    spending.record("main", PRICED, costing(0.25), run_id="r2")  # at midnight exactly: today's
    clock[0] = datetime(2026, 3, 2, 0, 1, tzinfo=EAST)
    spending.record("main", PRICED, costing(0.5), run_id="r3")
    assert spending.standing() == [("[budget] per_day_usd", 1.0, 0.75)]
    assert spending.standing() == [("[budget] per_day_usd", 1.0, 0.75)]  # read again: nothing counted twice
    spending.record("main", PRICED, costing(0.25), run_id="r4")
    with pytest.raises(BudgetReached, match=r"\(\[budget\] per_day_usd\): \$1.00 spent$"):
        spending.check(PRICED)


def test_prices_configured_or_known_and_none_for_an_unknown_model() -> None:
    spending, _ = tracking(Budgets())
    both = ModelResponse(parts=[], usage=RequestUsage(input_tokens=1_000_000, output_tokens=1_000_000))
    assert spending.price(PRICED, costing(0.5)) == 0.5  # input tokens at PRICES[0]
    assert spending.price(PRICED, costing(1.5)) == 1.5  # and output tokens at PRICES[1]
    assert spending.price(KNOWN, both) == 12.5  # the model's own name, the response naming none
    assert spending.price(MYSTERY, both) is None
    assert spending.price(KNOWN, costing(1.0, model_name="mystery-2")) is None  # what the response names is priced
    # A gpt-4o behind a base URL genai-prices does not know is priced by its provider's name.
    proxied = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(base_url="http://127.0.0.1:9/v1", api_key="sk-test"))
    assert [spending.priceable(model) for model in (PRICED, KNOWN, proxied, MYSTERY)] == [True, True, True, False]


def test_prices_come_from_the_models_that_set_both() -> None:
    settings = Settings(
        models={
            "local": ModelEndpoint(name="qwen", input_price=0.5, output_price=1.5),
            "free": ModelEndpoint(name="gpt-4o", input_price=0, output_price=0),
            "unpriced": ModelEndpoint(name="mystery"),
        }
    )
    models = [resolve_model(settings, name) for name in ("local", "free", "unpriced")]
    assert [entry_price(model) for model in models] == [Price(0.5, 1.5), Price(0.0, 0.0), None]
    # The free entry's price is its own: another model of the same name is priced from the price table.
    other = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(base_url="http://127.0.0.1:9/v1", api_key="sk-test"))
    spending = Spending()
    one_million_input_tokens = costing(1.0, model_name="gpt-4o")
    assert [spending.price(model, one_million_input_tokens) for model in (models[1], other)] == [0.0, 2.5]


def test_with_a_budget_a_model_without_a_price_is_refused() -> None:
    spending, _ = tracking(Budgets(max_usd=5.0))
    assert spending.unpriced([PRICED, MYSTERY, KNOWN]) == "mystery"
    assert spending.unpriced([PRICED, KNOWN]) is None
    with pytest.raises(BudgetReached) as refused:
        spending.check(MYSTERY)
    assert str(refused.value) == (
        "no price for model mystery, so a budget cannot be kept (give its [models.NAME] entry input_price and "
        'output_price, or set [budget] unknown_price = "allow")'
    )
    allowed, _ = tracking(Budgets(max_usd=5.0, unknown_price="allow"))
    assert allowed.unpriced([MYSTERY]) is None
    allowed.check(MYSTERY)
    assert tracking(Budgets())[0].unpriced([MYSTERY]) is None  # no budget: nothing to keep


def test_a_response_that_turns_out_unpriced_refuses_the_next_request_while_a_budget_is_set() -> None:
    spending, _ = tracking(Budgets(max_usd=5.0))
    spending.record("main", KNOWN, costing(1.0, model_name="mystery-2"), run_id="r1")
    with pytest.raises(BudgetReached, match=r"^no price for model gpt-4o, so a budget cannot be kept"):
        spending.check(KNOWN)
    unbudgeted, _ = tracking(Budgets())
    unbudgeted.record("main", KNOWN, costing(1.0, model_name="mystery-2"), run_id="r1")
    unbudgeted.budgets = Budgets(max_usd=5.0)  # `/budget 5` afterwards
    unbudgeted.check(KNOWN)
    assert unbudgeted.invocation == CostTotals(1, 1_000_000, 0, unpriced=1)


def test_a_cost_that_cannot_be_stored_is_a_warning(store: SqliteConversationStore) -> None:
    spending, warnings = tracking(Budgets(), store=store)
    store.close()
    spending.record("main", PRICED, costing(0.5), run_id="r1")
    assert len(warnings) == 1 and warnings[0].startswith("the cost of a request could not be stored: ")
    assert spending.invocation.priced_usd == 0.5


@pytest.mark.parametrize(
    ("amount", "written"), [(2.5, "$2.5"), (2.0, "$2"), (0.000001, "$0.000001"), (1e-10, "$0.0000000001")]
)
def test_a_budget_is_written_as_the_user_wrote_it(amount: float, written: str) -> None:
    assert dollars(amount) == written


async def test_a_follow_up_run_of_the_turn_is_a_continuation(project: Path, store: SqliteConversationStore) -> None:
    session = await Session.start(store, project, model="test")
    script = Model(["first answer", "second answer"])
    spending = spending_for(script.model, store)
    agent = build_pydantic_agent(Settings(), AgentOptions(model=script.model, project_root=project, spending=spending))
    follow_ups = ["and then?"]

    async def follow_up(result: object) -> str | None:
        return follow_ups.pop() if follow_ups else None

    sink = Sink()
    outcome = await run_turn(agent, RunDeps(session), "start", sink, follow_up=follow_up)  # type: ignore[arg-type]
    assert outcome.error is None and outcome.runs == 2
    assert [(request.kind, request.run) for request in sink.requests] == [("main", 0), ("continuation", 1)]
