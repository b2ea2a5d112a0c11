"""What this process spends on models, and the budgets that stop it: `Spending`, and `CostMeter`, which feeds it.

Every model request of a run passes through `CostMeter`: it is priced (the price of the `[models.NAME]` entry it was
made through first, then pydantic-ai's `ModelResponse.cost()`, which asks `genai-prices`), stored with its session
(`CostBook`), and added to the totals of the invocation and the turn. A request the registry cannot price stays
unpriced: its cost is None, never $0. Before each request the budgets are checked; a spent one raises `BudgetReached`
(a `UsageLimitExceeded`, so a run stopped by it ends as any run stopped by a limit: checkpointed, exit 3). The
request in flight is never cut.

pydantic-ai-harness's `SpendLimits` keeps its counters in a store of its own, keyed by window, and sees only the
requests of the agent it is part of; the totals here come from the one ledger every front end reads (the bar,
`/usage`, JSON, `sessions list`, `code-puppy usage`), compaction summaries and `/compact` included, so the gate reads
that ledger too.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models import Model, ModelRequestContext
from pydantic_ai.usage import RequestUsage

from code_puppy.config import BudgetConfig
from code_puppy.models import entry_price
from code_puppy.run.deps import in_main_run
from code_puppy.run.replay import replaying
from code_puppy.sessions.costs import CostBook, CostTotals, RequestCost, RequestKind, format_cost

if TYPE_CHECKING:
    from pydantic_ai.capabilities import WrapModelRequestHandler

WARN_AT = 0.8
"""The fraction of a budget past which the user is told, once per budget."""


class BudgetReached(UsageLimitExceeded):
    """A budget is spent, or a model without a price would spend from one: the run stops before its next request."""

    _HINT = ""  # the message names the budget and where it is set; pydantic-ai's generic hint says neither


@dataclass(frozen=True)
class Budgets:
    """The caps that apply, in US dollars."""

    max_usd: float | None = None
    """`--max-budget-usd`: the whole headless invocation, or the whole chat."""
    per_turn_usd: float | None = None
    per_session_usd: float | None = None
    per_day_usd: float | None = None
    unknown_price: Literal["refuse", "allow"] = "refuse"

    @classmethod
    def of(cls, config: BudgetConfig, max_usd: float | None = None) -> Budgets:
        return cls(max_usd, config.per_turn_usd, config.per_session_usd, config.per_day_usd, config.unknown_price)

    @property
    def active(self) -> bool:
        limits = (self.max_usd, self.per_turn_usd, self.per_session_usd, self.per_day_usd)
        return any(limit is not None for limit in limits)


class Spending:
    """What this process spent, request by request, and whether the next request may be sent.

    One per process: the chat and a headless invocation set `session_id` and begin a turn before each turn runs (and
    `/compact` before it summarizes); requests are attributed to that session. `book` is the sessions database's
    ledger (None: counted in memory only).
    """

    def __init__(
        self,
        *,
        budgets: Budgets | None = None,
        book: CostBook | None = None,
        project_dir: Path | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now().astimezone(),
    ) -> None:
        self.budgets = budgets or Budgets()
        self.book = book
        self.project_dir = project_dir
        self.clock = clock
        """The local time now: when a request is stored, and which day the daily budget counts."""
        self.invocation = CostTotals()
        """Every request of this process: the headless invocation, or the whole chat."""
        self.turn = CostTotals()
        """The requests of the turn running, or of the last one."""
        self.session_id: str | None = None
        self.run_index = 0
        """The run of the turn that is running: 0 for the prompt's, then one per follow-up."""
        self.on_request: Callable[[RequestCost], None] | None = None
        """Told of each request once it is recorded (stream-json's `request` event)."""
        self.on_warning: Callable[[str], None] | None = None
        """Told, once per budget, when 80% of it is spent."""
        self._sessions: dict[str, CostTotals] = {}
        self._warned: set[str] = set()
        self._priceable: dict[tuple[str, str], bool] = {}
        self._unpriced: str | None = None
        """A model a response of which could not be priced while a budget was set."""
        self._today: tuple[datetime, int, CostTotals] | None = None
        """Today's spending from the store as last read: the local midnight, the last row read, the total."""

    def begin_turn(self, session_id: str) -> None:
        self.session_id = session_id
        self.turn = CostTotals()
        self.run_index = 0

    def session_total(self, session_id: str) -> CostTotals:
        """A session's total over its life: from the store when there is one (every process's requests)."""
        if self.book is not None:
            return self.book.session_totals([session_id]).get(session_id, CostTotals())
        return self._sessions.get(session_id, CostTotals())

    def priceable(self, model: Model) -> bool:
        """Whether requests to `model` can be priced: a configured price, or one `genai-prices` knows."""
        if entry_price(model) is not None:
            return True
        key = (model.system, model.model_name)
        if key not in self._priceable:
            from genai_prices import calc_price

            probe = RequestUsage(input_tokens=1, output_tokens=1)
            known = False
            with contextlib.suppress(LookupError, ValueError):
                calc_price(probe, model.model_name, provider_api_url=model.base_url)
                known = True
            if not known:
                with contextlib.suppress(LookupError, ValueError):
                    calc_price(probe, model.model_name, provider_id=model.system)
                    known = True
            self._priceable[key] = known
        return self._priceable[key]

    def unpriced(self, models: Iterable[Model]) -> str | None:
        """With a budget set (and unknown prices refused), the name of the first of `models` without a price."""
        if not self.budgets.active or self.budgets.unknown_price == "allow":
            return None
        return next((model.model_name for model in models if not self.priceable(model)), None)

    def price(self, model: Model, response: ModelResponse) -> float | None:
        """What `response` cost in US dollars, or None when it cannot be priced."""
        usage = response.usage
        if (custom := entry_price(model)) is not None:
            return custom.of(usage)
        if not response.model_name:
            response = replace(response, model_name=model.model_name)
        try:
            return float(response.cost().total_price)
        except (LookupError, ValueError):
            return None

    def check(self, model: Model) -> None:
        """Raise `BudgetReached` if a request to `model` may not be sent now."""
        if not self.budgets.active:
            return
        if self.budgets.unknown_price == "refuse":
            unpriced = self._unpriced or (None if self.priceable(model) else model.model_name)
            if unpriced is not None:
                raise BudgetReached(f"no price for model {unpriced}, so a budget cannot be kept ({_UNPRICED_HELP})")
        for label, limit, spent in self.standing():
            if spent >= limit:
                raise BudgetReached(f"budget {dollars(limit)} reached ({label}): {format_cost(spent)} spent")

    def record(
        self,
        kind: RequestKind,
        model: Model,
        response: ModelResponse,
        *,
        run_id: str | None,
        session_id: str | None = None,
    ) -> RequestCost:
        """Price `response`, store it, add it to the totals, and tell the listeners; it is `session_id`'s (default:
        the session of the turn)."""
        usage = response.usage
        cost = self.price(model, response)
        uncached = None if cost is None else self.price(model, without_cache(response))
        request = RequestCost(
            session_id=session_id or self.session_id or "",
            kind=kind,
            model=model.model_name,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            cost_usd=cost,
            saved_usd=None if cost is None or uncached is None else uncached - cost,
            run=self.run_index,
            run_id=run_id,
            project_dir=None if self.project_dir is None else str(self.project_dir),
        )
        counted = CostTotals.of(request)
        self.invocation += counted
        self.turn += counted
        self._sessions[request.session_id] = self._sessions.get(request.session_id, CostTotals()) + counted
        if request.cost_usd is None and self.budgets.active:
            self._unpriced = request.model
        if self.book is not None:
            try:
                self.book.record(request, at=self.clock())
            except sqlite3.Error as exc:
                self._warn(f"the cost of a request could not be stored: {exc}")
        if self.on_request is not None:
            self.on_request(request)
        for label, limit, spent in self.standing():
            # Past the limit itself, the stop says so: the warning is for the approach.
            if limit * WARN_AT <= spent < limit and label not in self._warned:
                self._warned.add(label)
                self._warn(f"{spent / limit:.0%} of the budget {dollars(limit)} spent ({label}): {format_cost(spent)}")
        return request

    def _warn(self, text: str) -> None:
        if self.on_warning is not None:
            self.on_warning(text)

    def standing(self) -> list[tuple[str, float, float]]:
        """Each budget set, as (its name, its limit, what it has spent)."""
        budgets = self.budgets
        standing: list[tuple[str, float, float]] = []
        if budgets.max_usd is not None:
            standing.append(("--max-budget-usd", budgets.max_usd, self.invocation.priced_usd))
        if budgets.per_turn_usd is not None:
            standing.append(("[budget] per_turn_usd", budgets.per_turn_usd, self.turn.priced_usd))
        if budgets.per_session_usd is not None and self.session_id is not None:
            spent = self.session_total(self.session_id).priced_usd
            standing.append(("[budget] per_session_usd", budgets.per_session_usd, spent))
        if budgets.per_day_usd is not None:
            standing.append(("[budget] per_day_usd", budgets.per_day_usd, self._spent_today().priced_usd))
        return standing

    def _spent_today(self) -> CostTotals:
        """Everything spent since local midnight, by every process of the user (only new rows are read)."""
        if self.book is None:
            return self.invocation
        midnight = self.clock().replace(hour=0, minute=0, second=0, microsecond=0)
        if self._today is None or self._today[0] != midnight:
            self._today = (midnight, 0, CostTotals())
        _, last, total = self._today
        last, more = self.book.since(midnight, after=last)
        self._today = (midnight, last, total + more)
        return self._today[2]


def without_cache(response: ModelResponse) -> ModelResponse:
    """`response` as if its provider had cached nothing: every input token at the full price (what caching saved is
    its price less the real one)."""
    usage = response.usage
    details = {key: value for key, value in usage.details.items() if key != "ephemeral_1h_input_tokens"}
    return replace(response, usage=replace(usage, cache_read_tokens=0, cache_write_tokens=0, details=details))


def dollars(amount: float) -> str:
    """An amount as written by the user: `$2.5`, `$0.000001`, never `$1e-06`."""
    return "$" + f"{amount:.10f}".rstrip("0").rstrip(".")


_UNPRICED_HELP = 'give its [models.NAME] entry input_price and output_price, or set [budget] unknown_price = "allow"'


def unpriced_model_message(name: str) -> str:
    """The one line a run is refused with at start-up when a budget is set and `name` has no price."""
    return f"model {name} has no known price, so a budget cannot be kept; {_UNPRICED_HELP}"


@dataclass
class CostMeter(AbstractCapability[Any]):
    """Prices and records every model request of the runs it is part of, and refuses the next request once a budget
    is spent (`Spending`). Delegated runs of the same agent pass through it too; a helper agent (the compaction
    summarizer) gets its own with a fixed `kind`."""

    spending: Spending
    _: KW_ONLY
    kind: RequestKind | None = None
    """The kind of every request it sees; None: the prompt's run, a follow-up run, or a delegated one, as it is."""
    session_id: str | None = None
    """The session its requests are for; None: the session of the turn (`Spending.session_id`). A helper running
    beside the chat's turns (the title writer) names its own, which a `/new` meanwhile does not change."""

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # it holds the process's live totals

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        # Before the history processors and compaction that sit after it: a spent budget pays for no summary.
        self.spending.check(request_context.model)
        return request_context

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        # Again right before each attempt is sent: a summary written since the check above may have spent the budget.
        self.spending.check(request_context.model)
        return request_context

    async def wrap_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, handler: WrapModelRequestHandler
    ) -> ModelResponse:
        response = await handler(request_context)
        if replaying():
            return response  # priced and recorded when it was first made (a resumed durable run)
        kind = self.kind
        if kind is None:
            kind = ("main" if self.spending.run_index == 0 else "continuation") if in_main_run() else "delegate"
        self.spending.record(kind, request_context.model, response, run_id=ctx.run_id, session_id=self.session_id)
        return response
