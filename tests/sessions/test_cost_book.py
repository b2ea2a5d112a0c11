"""The cost ledger on a real sessions database: what each sum reads back (`CostBook`), how totals add up and how a
cost is written for the user (`CostTotals`, `format_cost`)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from code_puppy.sessions.costs import CostTotals, RequestCost, RequestKind, format_cost
from code_puppy.sessions.store import SqliteConversationStore

NOON = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
"""Noon UTC: on the same local calendar day in every time zone but the two farthest from UTC."""


def request(
    session_id: str,
    usd: float | None,
    *,
    model: str = "gpt-4o",
    kind: RequestKind = "main",
    project_dir: str | None = None,
) -> RequestCost:
    """A request of `session_id` whose tokens say which it is: 100 input per cent, 7 output, 3 and 1 cached."""
    tokens = round((usd or 0) * 10_000)
    return RequestCost(session_id, kind, model, tokens, 7, 3, 1, cost_usd=usd, project_dir=project_dir)


def test_totals_add_field_by_field() -> None:
    one = CostTotals(1, 10, 20, 30, 40, 0.5, 0)
    two = CostTotals(2, 100, 200, 300, 400, 0.25, 1)
    assert one + two == CostTotals(3, 110, 220, 330, 440, 0.75, 1)


def test_a_request_counts_as_priced_or_unpriced() -> None:
    assert CostTotals.of(request("s", 0.5)) == CostTotals(1, 5000, 7, 3, 1, 0.5, 0)
    assert CostTotals.of(request("s", None)) == CostTotals(1, 0, 7, 3, 1, 0.0, 1)
    assert CostTotals.of(request("s", 0.0)) == CostTotals(1, 0, 7, 3, 1, 0.0, 0)  # free is priced
    bare = RequestCost("s", "main", "local", 10, 5)
    assert (bare.cache_read_tokens, bare.cache_write_tokens, bare.cost_usd, bare.run) == (0, 0, None, 0)
    assert CostTotals.of(bare) == CostTotals(1, 10, 5, 0, 0, 0.0, 1)


@pytest.mark.parametrize(
    ("totals", "cost", "complete", "described"),
    [
        (CostTotals(), 0.0, True, "$0.0000"),
        (CostTotals(2, unpriced=2), None, False, "cost unknown"),
        (CostTotals(2, priced_usd=0.0123, unpriced=1), 0.0123, False, "at least $0.0123"),
        (CostTotals(1, priced_usd=0.1) + CostTotals(1, priced_usd=0.2), 0.3, True, "$0.3000"),  # float noise rounded
        (CostTotals(1, priced_usd=0.30000000004), 0.3, True, "$0.3000"),  # and anything below $0.0000000001
        (CostTotals(1, priced_usd=1.0), 1.0, True, "$1.00"),
        (CostTotals(1, priced_usd=0.99994), 0.99994, True, "$0.9999"),
        (CostTotals(1, priced_usd=12.345), 12.345, True, "$12.35"),
    ],
)
def test_a_total_is_its_priced_requests_and_says_when_some_were_not(
    totals: CostTotals, cost: float | None, complete: bool, described: str
) -> None:
    assert (totals.cost_usd, totals.complete, totals.describe()) == (cost, complete, described)


def test_format_cost_without_a_cost_never_shows_zero() -> None:
    assert (format_cost(None), format_cost(None, complete=False)) == ("cost unknown", "cost unknown")
    assert format_cost(0.5, complete=False) == "at least $0.5000"


def test_the_book_sums_by_session_and_by_kind_and_model(store: SqliteConversationStore) -> None:
    book = store.costs
    book.record(request("a", 0.5), at=NOON)
    book.record(request("a", None, model="local"), at=NOON)
    book.record(request("a", 0.25, kind="compaction"), at=NOON)
    book.record(request("b", 0.125), at=NOON)
    assert book.session_totals(["a", "b", "c"]) == {
        "a": CostTotals(3, 7500, 21, 9, 3, 0.75, 1),
        "b": CostTotals(1, 1250, 7, 3, 1, 0.125, 0),
    }
    assert book.session_totals([]) == {}
    assert book.breakdown("a") == [
        ("compaction", "gpt-4o", CostTotals(1, 2500, 7, 3, 1, 0.25, 0)),
        ("main", "gpt-4o", CostTotals(1, 5000, 7, 3, 1, 0.5, 0)),
        ("main", "local", CostTotals(1, 0, 7, 3, 1, 0.0, 1)),
    ]


def test_since_counts_from_its_moment_on_and_only_rows_after_the_last_read(store: SqliteConversationStore) -> None:
    book = store.costs
    book.record(request("a", 0.5), at=NOON - timedelta(microseconds=1))
    book.record(request("a", 0.25), at=NOON)  # the moment itself counts
    last, totals = book.since(NOON)
    assert totals == CostTotals(1, 2500, 7, 3, 1, 0.25, 0)
    assert book.since(NOON, after=last) == (last, CostTotals())  # nothing new: the same last row
    book.record(request("b", 0.125), at=NOON + timedelta(hours=1))
    assert book.since(NOON, after=last) == (last + 1, CostTotals(1, 1250, 7, 3, 1, 0.125, 0))
    assert book.since(NOON + timedelta(hours=2)) == (0, CostTotals())


def test_by_day_and_model_is_by_local_day_and_filters_by_time_and_project(
    store: SqliteConversationStore, project: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    book = store.costs
    book.record(request("a", 0.5, project_dir=str(project.resolve())), at=NOON - timedelta(days=1))
    book.record(request("a", 0.25, project_dir=str(project.resolve())), at=NOON)
    book.record(request("b", None, model="local", project_dir=str(other)), at=NOON)
    assert book.by_day_and_model() == [
        ("2026-03-01", "gpt-4o", CostTotals(1, 5000, 7, 3, 1, 0.5, 0)),
        ("2026-03-02", "gpt-4o", CostTotals(1, 2500, 7, 3, 1, 0.25, 0)),
        ("2026-03-02", "local", CostTotals(1, 0, 7, 3, 1, 0.0, 1)),
    ]
    assert [(day, model) for day, model, _ in book.by_day_and_model(since=NOON)] == [
        ("2026-03-02", "gpt-4o"),
        ("2026-03-02", "local"),
    ]
    assert [(day, model) for day, model, _ in book.by_day_and_model(project_dir=project)] == [
        ("2026-03-01", "gpt-4o"),
        ("2026-03-02", "gpt-4o"),
    ]


def test_a_row_is_stored_at_the_moment_given_in_any_time_zone(store: SqliteConversationStore) -> None:
    east = datetime(2026, 3, 2, 14, 0, tzinfo=timezone(timedelta(hours=2)))  # NOON in UTC
    store.costs.record(request("a", 0.5), at=east)
    assert store.costs.since(NOON)[1].requests == 1
    assert store.costs.since(NOON + timedelta(microseconds=1))[1].requests == 0


def test_a_store_from_before_costs_reads_as_no_requests(db_path: Path) -> None:
    store = SqliteConversationStore(db_path)  # a SQLite store an older code-puppy made (read-only commands read it)
    with sqlite3.connect(db_path) as db:
        db.execute("DROP TABLE requests")
    assert store.costs.session_totals(["a"]) == {}
    assert store.costs.since(NOON) == (0, CostTotals())
    with sqlite3.connect(db_path) as db:
        db.execute("CREATE TABLE requests (id INTEGER PRIMARY KEY)")  # a table of another shape is an error
    with pytest.raises(sqlite3.OperationalError, match="no such column"):
        store.costs.since(NOON)
