"""What code-puppy spent: one row per model request in the sessions database, and the sums read from it.

`cost_usd` is the sum of the priced requests, or None when none could be priced; `complete` says whether every
request was priced. pydantic-ai's `RunUsage.cost` adds only the priced requests and says nothing of the rest, so
the sums are made here, from the rows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from .schema import Database, timestamp

__all__ = ("CostBook", "CostTotals", "RequestCost", "RequestKind", "format_cost")

RequestKind = Literal["main", "continuation", "delegate", "compaction", "summary", "title"]
"""What a request was for: the prompt's run, a follow-up run of the turn, a run delegated from inside a run
(`delegate_task`), a summary written by compaction (automatic or `/compact`), one written by a history processor
(`summarize_older_turns`), or a session's title written after its first turn in the chat (`[sessions] auto_title`)."""


@dataclass(frozen=True)
class RequestCost:
    """One model request: what it used and what it cost (None: it could not be priced)."""

    session_id: str
    kind: RequestKind
    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None
    saved_usd: float | None = None
    """What prompt caching saved: the request's price with every input token at the full price, less `cost_usd`
    (negative when it wrote more to the cache than it read); None when it could not be priced."""
    run: int = 0
    """The run of the turn it belongs to: 0 for the prompt's run, then one per follow-up."""
    run_id: str | None = None
    project_dir: str | None = None


@dataclass(frozen=True)
class CostTotals:
    """Requests summed: tokens, and what the priced ones cost."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    priced_usd: float = 0.0
    """The sum of the priced requests."""
    unpriced: int = 0
    """Requests that could not be priced."""
    saved_usd: float = 0.0
    """What prompt caching saved the priced requests (`RequestCost.saved_usd`)."""

    @property
    def cache_share(self) -> float | None:
        """The share of the input tokens read from the prompt cache; None without input tokens."""
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else None

    def describe_cache(self) -> str | None:
        """`cache 91% of input · saved $0.0123` (`· writing it cost $0.0017 more` while writes outweigh reads), or None
        when nothing was read from or written to a cache."""
        if not (self.cache_read_tokens or self.cache_write_tokens) or self.cache_share is None:
            return None
        share = f"cache {self.cache_share:.0%} of input"
        if self.requests == self.unpriced:
            return share
        saved = round(self.saved_usd, 10)
        if saved >= 0:
            return f"{share} · saved {format_cost(saved)}"
        return f"{share} · writing it cost {format_cost(-saved)} more"  # early on: more written than read back yet

    @property
    def cost_usd(self) -> float | None:
        """The sum of the priced requests; None when there were requests and none could be priced."""
        # Rounded below a millionth of a cent: float sums of prices carry noise in the last digits.
        return None if self.requests and self.unpriced == self.requests else round(self.priced_usd, 10)

    @property
    def complete(self) -> bool:
        """Whether every request was priced (true for none at all)."""
        return self.unpriced == 0

    def __add__(self, other: CostTotals) -> CostTotals:
        return CostTotals(
            self.requests + other.requests,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.priced_usd + other.priced_usd,
            self.unpriced + other.unpriced,
            self.saved_usd + other.saved_usd,
        )

    @classmethod
    def of(cls, request: RequestCost) -> CostTotals:
        return cls(
            1,
            request.input_tokens,
            request.output_tokens,
            request.cache_read_tokens,
            request.cache_write_tokens,
            request.cost_usd or 0.0,
            int(request.cost_usd is None),
            request.saved_usd or 0.0,
        )

    def describe(self) -> str:
        """The cost as the user reads it: `$0.0123`, `at least $0.0123` or `cost unknown`."""
        return format_cost(self.cost_usd, complete=self.complete)


def format_cost(cost: float | None, *, complete: bool = True) -> str:
    """`$0.0123`, `at least $0.0123` (some requests unpriced) or `cost unknown` (none priced); never a made-up $0."""
    if cost is None:
        return "cost unknown"
    shown = f"${cost:.4f}" if cost < 1 else f"${cost:.2f}"
    return shown if complete else f"at least {shown}"


_SUMS = """
    count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0), coalesce(sum(cache_read_tokens), 0),
    coalesce(sum(cache_write_tokens), 0), coalesce(sum(cost_usd), 0.0), count(*) - count(cost_usd),
    coalesce(sum(saved_usd), 0.0)
"""


def _totals(row: Sequence[Any]) -> CostTotals:
    requests, input_tokens, output_tokens, cache_read, cache_write, cost, unpriced, saved = row  # _SUMS' columns
    return CostTotals(requests, input_tokens, output_tokens, cache_read, cache_write, cost, unpriced, saved)


class CostBook:
    """The `requests` rows of a sessions database: written once per request, read by every total and report.

    Reads of a database an older code-puppy made (opened read-only, so not migrated yet) find no rows, or no savings.
    """

    def __init__(self, database: Database) -> None:
        self._database = database

    def record(self, request: RequestCost, *, at: datetime | None = None) -> None:
        with self._database.write(durable=False) as db:
            db.execute(
                """
                INSERT INTO requests (session_id, project_dir, run_id, run, kind, model, input_tokens, output_tokens,
                    cache_read_tokens, cache_write_tokens, cost_usd, saved_usd, created_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
                (
                    request.session_id,
                    request.project_dir,
                    request.run_id,
                    request.run,
                    request.kind,
                    request.model,
                    request.input_tokens,
                    request.output_tokens,
                    request.cache_read_tokens,
                    request.cache_write_tokens,
                    request.cost_usd,
                    request.saved_usd,
                    timestamp(at or datetime.now(UTC)),
                ),
            )

    def session_totals(self, session_ids: Iterable[str]) -> dict[str, CostTotals]:
        """The totals of each of these sessions that has requests, or none yet but was created since requests were
        counted (a fork before its first run, a session whose runs all failed): what the session itself spent. A fork
        starts from nothing: the turns it copied stay its source's spending, never counted twice. Sessions from before
        code-puppy counted costs, and imported ones (what Claude Code or Codex spent on them), are left out: what they
        spent is unknown."""
        ids = list(session_ids)
        if not ids:
            return {}
        marks = ", ".join("?" * len(ids))
        rows = self._read(f"SELECT session_id, {_SUMS} FROM requests WHERE session_id IN ({marks}) GROUP BY 1", ids)
        totals = {row[0]: _totals(row[1:]) for row in rows}
        counted_since = "SELECT applied_at FROM schema_migrations WHERE name = 'm005_request_costs'"
        query = f"SELECT id FROM sessions WHERE id IN ({marks}) AND created_at >= ({counted_since}) "
        rows = self._read(f"{query}AND id NOT IN (SELECT session_id FROM session_sources)", ids)
        return {session_id: CostTotals() for (session_id,) in rows} | totals

    def breakdown(self, session_id: str) -> list[tuple[str, str, CostTotals]]:
        """A session's totals by kind and model, as (kind, model, totals)."""
        rows = self._read(
            f"SELECT kind, model, {_SUMS} FROM requests WHERE session_id = ? GROUP BY 1, 2 ORDER BY 1, 2", [session_id]
        )
        return [(row[0], row[1], _totals(row[2:])) for row in rows]

    def of_durable_run(self, run_id: str) -> list[tuple[int, RequestCost]]:
        """A durable run's requests as recorded (their `run_id`s are its id, a colon, a step), oldest first, each with
        its row id."""
        rows = self._read(
            """
            SELECT id, session_id, kind, model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                cost_usd, run, run_id, project_dir
            FROM requests WHERE substr(run_id, 1, ?) = ? ORDER BY id
            """,
            [len(run_id) + 1, run_id + ":"],
        )
        return [(row[0], RequestCost(*row[1:9], run=row[9], run_id=row[10], project_dir=row[11])) for row in rows]

    def since(self, moment: datetime, *, after: int = 0) -> tuple[int, CostTotals]:
        """What every session of every project spent from `moment` on, counting only the rows after row `after`
        (the daily budget adds each read to the last); with the last row's id, to pass as `after` next time."""
        rows = self._read(
            f"SELECT max(id), {_SUMS} FROM requests WHERE id > ? AND created_at >= ?", [after, timestamp(moment)]
        )
        if not rows or rows[0][0] is None:
            return after, CostTotals()
        return rows[0][0], _totals(rows[0][1:])

    def by_day_and_model(
        self, *, since: datetime | None = None, project_dir: Path | None = None
    ) -> list[tuple[str, str, CostTotals]]:
        """Totals by local calendar day and model, oldest day first, as (YYYY-MM-DD, model, totals)."""
        # PostgreSQL's session time zone is this machine's (sessions/postgres.py).
        day = (
            "to_char(created_at::timestamptz, 'YYYY-MM-DD')"
            if self._database.postgres
            else "date(created_at, 'localtime')"
        )
        rows = self._read(
            f"""
            SELECT {day}, model, {_SUMS} FROM requests
            WHERE (:since IS NULL OR created_at >= :since) AND (:project IS NULL OR project_dir = :project)
            GROUP BY 1, 2 ORDER BY 1, 2
            """,
            {
                "since": None if since is None else timestamp(since),
                "project": None if project_dir is None else str(project_dir.resolve()),
            },
        )
        return [(row[0], row[1], _totals(row[2:])) for row in rows]

    def history_rewrites(self, *, since: datetime | None = None, project_dir: Path | None = None) -> int:
        """How many times the sessions with requests in that period (and project) had a history already sent
        rewritten (their `cache_epoch`s summed): each such rewrite is written to the prompt cache again."""
        rows = self._read(
            """
            SELECT coalesce(sum(cache_epoch), 0) FROM sessions WHERE id IN (
                SELECT session_id FROM requests
                WHERE (:since IS NULL OR created_at >= :since) AND (:project IS NULL OR project_dir = :project)
            )
            """,
            {
                "since": None if since is None else timestamp(since),
                "project": None if project_dir is None else str(project_dir.resolve()),
            },
        )
        return rows[0][0] if rows else 0

    def _read(self, sql: str, parameters: Sequence[object] | dict[str, object]) -> list[tuple[Any, ...]]:
        with self._database.read() as db:
            try:
                return db.execute(sql, parameters).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table: requests" in str(exc):
                    return []
                if "no such column: saved_usd" in str(exc):  # made before m009: nothing saved was recorded
                    return db.execute(sql.replace("sum(saved_usd)", "sum(NULL)"), parameters).fetchall()
                raise
