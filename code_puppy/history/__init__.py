"""Ready-made history processors and a condition, usable from config and from Python (README "History processors").

From config: `[history] processors = [{ path = "code_puppy.history:keep_recent_turns", args = { n = 4 } }]`; from
Python: `build_pydantic_agent(settings, ..., history_processors=[keep_recent_turns(4)])`. Each factory checks its
arguments strictly (`n = "4"` is refused, not coerced) and returns a context-style processor that keeps, drops or
replaces whole groups only, so its output passes the same validation as any user processor's.
"""

from __future__ import annotations

from code_puppy.agents.history_errors import HistoryProcessingError, HistoryProcessingValidationError
from code_puppy.agents.history_groups import HistoryGroup, HistoryOrigin
from code_puppy.agents.history_processors import HistoryProcessorContext, HistoryProcessorState
from code_puppy.history.processors import (
    FitTokenBudget,
    KeepRecentTurns,
    WhenOver,
    fit_token_budget,
    keep_recent_turns,
    when_over,
)
from code_puppy.history.summary import SUMMARY_HEADER, SummarizeOlderTurns, summarize_older_turns

__all__ = (
    "SUMMARY_HEADER",
    "FitTokenBudget",
    "HistoryGroup",
    "HistoryOrigin",
    "HistoryProcessingError",
    "HistoryProcessingValidationError",
    "HistoryProcessorContext",
    "HistoryProcessorState",
    "KeepRecentTurns",
    "SummarizeOlderTurns",
    "WhenOver",
    "fit_token_budget",
    "keep_recent_turns",
    "summarize_older_turns",
    "when_over",
)
