"""`keep_recent_turns`, `fit_token_budget` and the condition `when_over`: history kept in check without a model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from pydantic import ConfigDict, Field, validate_call
from pydantic_ai.messages import ModelMessage

from code_puppy.errors import say
from code_puppy.history.processing import HistoryProcessorContext, HistoryProcessorState

STRICT = ConfigDict(strict=True)
"""The factories' argument checks: a config's `n = "4"` is an error, not 4."""

Fraction = Annotated[float, Field(gt=0, le=1)]
"""A share of the model's context window, above 0 and at most 1."""


@dataclass(frozen=True)
class KeepRecentTurns:
    """Keeps the last `n` finished turns plus every protected or unfinished group (`keep_recent_groups(n)`)."""

    n: int

    def __call__(self, ctx: HistoryProcessorContext) -> list[ModelMessage]:
        return ctx.keep_recent_groups(self.n)


@validate_call(config=STRICT)
def keep_recent_turns(n: Annotated[int, Field(ge=0)]) -> KeepRecentTurns:
    """A processor keeping the last `n` finished turns, and everything protected (the system prompt's turn, signed
    reasoning the provider needs replayed, unfinished work, the current request)."""
    return KeepRecentTurns(n)


@dataclass(frozen=True)
class FitTokenBudget:
    """Drops the oldest finished, unprotected turns until the groups' own token estimates fit the budget.

    The budget is `max_tokens`, or `fraction` of the model's context window. It compares the sum of the remaining
    groups' estimates (`HistoryGroup.estimated_tokens`), which shrinks as turns go; not the request estimate
    anchored on the provider's last reported usage, which does not. Protected and current groups are never dropped,
    so the result may stay over budget: the run's stderr says so once.
    """

    max_tokens: int | None = None
    fraction: float | None = None
    _told: set[str | None] = field(default_factory=set[str | None], init=False, repr=False, compare=False)
    """The runs already told that the budget cannot be met."""

    def __call__(self, ctx: HistoryProcessorContext) -> list[ModelMessage]:
        budget = self.max_tokens
        if budget is None:
            assert self.fraction is not None  # the factory asks for one of the two
            if ctx.context_window is None:
                self._tell(
                    ctx,
                    f"fit_token_budget(fraction={self.fraction}) keeps the whole history: the context window of "
                    f"{ctx.model_id} is unknown (set context_window in its [models] entry, or use max_tokens)",
                )
                return list(ctx.messages)
            budget = int(self.fraction * ctx.context_window)
        total = ctx.estimated_tokens
        dropped: set[int] = set()
        for group in ctx.groups:
            if total <= budget:
                break
            if group.eligible:
                dropped.add(group.index)
                total -= group.estimated_tokens
        if total > budget:
            self._tell(
                ctx,
                f"fit_token_budget: the history still needs ~{total} tokens, over its budget of {budget}: the turns "
                "left are protected or current, and are kept",
            )
        return [
            message
            for group in ctx.groups
            if group.index not in dropped
            for message in ctx.messages[group.entry_start : group.entry_end]
        ]

    def _tell(self, ctx: HistoryProcessorContext, line: str) -> None:
        if ctx.run_context.run_id not in self._told:
            self._told.add(ctx.run_context.run_id)
            say(f"note: {line}")


@validate_call(config=STRICT)
def fit_token_budget(
    max_tokens: Annotated[int, Field(gt=0)] | None = None, fraction: Fraction | None = None
) -> FitTokenBudget:
    """A processor fitting the history into `max_tokens`, or into `fraction` of the context window (give one)."""
    if (max_tokens is None) == (fraction is None):
        raise ValueError("fit_token_budget takes exactly one of max_tokens and fraction")
    return FitTokenBudget(max_tokens, fraction)


@dataclass(frozen=True)
class WhenOver:
    """True once the estimated request passes `fraction` of the model's context window; False while it is unknown."""

    fraction: float

    def __call__(self, state: HistoryProcessorState) -> bool:
        window = state.context_window
        return window is not None and state.estimated_request_tokens > self.fraction * window


@validate_call(config=STRICT)
def when_over(fraction: Fraction) -> WhenOver:
    """A `processor_condition`: the processors run once the estimated request passes `fraction` of the window."""
    return WhenOver(fraction)
