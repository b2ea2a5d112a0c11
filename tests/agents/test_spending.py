"""`Spending` and `CostMeter` on pydantic-ai FunctionModels: compaction summaries (automatic and `/compact`) are
counted and stored with the session, priced by configured prices; budgets stop a run before its next request."""

from __future__ import annotations

from pathlib import Path

import pytest

from code_puppy.agents.builder import build_pydantic_agent
from code_puppy.agents.compaction import compact_history
from code_puppy.agents.deps import RunDeps
from code_puppy.agents.spending import BudgetReached, Budgets, CostMeter, Spending
from code_puppy.config import HistoryConfig, Settings
from code_puppy.core.run import run_turn
from code_puppy.sessions.costs import CostTotals, RequestCost, format_cost
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore
from tests.agents.history_cases import C, R, T, U
from tests.agents.test_compaction import Model, long_history, read

PRICES = (1.0, 2.0)
"""US dollars per million input and output tokens, configured for the function model."""


def spending_for(model_name: str, store: SqliteConversationStore, **budgets: float) -> Spending:
    return Spending(budgets=Budgets(**budgets), prices={model_name: PRICES}, book=store.costs)


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
    spending = spending_for(model.model_name, store)
    settings = Settings(history=HistoryConfig(compaction="summarize"))
    agent = build_pydantic_agent(settings, model=model, project_root=project, spending=spending)
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
    spending = spending_for(model.model_name, store)
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
    spending = spending_for(model.model_name, store, per_turn_usd=1e-9)
    agent = build_pydantic_agent(Settings(), model=model, project_root=project, spending=spending)
    outcome = await run_turn(agent, RunDeps(session), "read", Sink())  # type: ignore[arg-type]
    assert isinstance(outcome.error, BudgetReached)
    assert str(outcome.error).startswith("budget $0.000000001 reached ([budget] per_turn_usd): $0.")
    assert len(script.seen) == 1  # the request in flight finished; no other was sent
    assert [type(m).__name__ for m in session.messages] == ["ModelRequest", "ModelResponse", "ModelRequest"]


def test_totals_never_show_an_unknown_cost_as_zero() -> None:
    unpriced = CostTotals.of(RequestCost("s", "main", "local", 10, 5))
    some = unpriced + CostTotals.of(RequestCost("s", "main", "gpt-4o", 10, 5, cost_usd=0.25))
    assert (unpriced.cost_usd, unpriced.complete, unpriced.describe()) == (None, False, "cost unknown")
    assert (some.cost_usd, some.complete, some.describe()) == (0.25, False, "at least $0.2500")
    assert (CostTotals().cost_usd, CostTotals().complete, format_cost(1.5)) == (0.0, True, "$1.50")
