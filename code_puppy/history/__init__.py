"""Ready-made history processors and a condition, usable from config and from Python (README "History processors").

From config: `[history] processors = [{ path = "code_puppy.history:keep_recent_turns", args = { n = 4 } }]`; from
Python: `build_pydantic_agent(settings, AgentOptions(..., history_processors=[keep_recent_turns(4)]))`. Each factory
checks its arguments strictly (`n = "4"` is refused, not coerced) and returns a context-style processor that keeps,
drops or replaces whole groups only, so its output passes the same validation as any user processor's.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from code_puppy.history.errors import HistoryProcessingError, HistoryProcessingValidationError
    from code_puppy.history.groups import HistoryGroup, HistoryOrigin
    from code_puppy.history.processing import HistoryProcessorContext, HistoryProcessorState
    from code_puppy.history.processors import (
        FitTokenBudget,
        KeepRecentTurns,
        WhenOver,
        fit_token_budget,
        keep_recent_turns,
        when_over,
    )
    from code_puppy.history.summary import SUMMARY_HEADER, SummarizeOlderTurns, summarize_older_turns

_HOME = {
    "HistoryProcessingError": "errors",
    "HistoryProcessingValidationError": "errors",
    "HistoryGroup": "groups",
    "HistoryOrigin": "groups",
    "HistoryProcessorContext": "processing",
    "HistoryProcessorState": "processing",
    "FitTokenBudget": "processors",
    "KeepRecentTurns": "processors",
    "WhenOver": "processors",
    "fit_token_budget": "processors",
    "keep_recent_turns": "processors",
    "when_over": "processors",
    "SUMMARY_HEADER": "summary",
    "SummarizeOlderTurns": "summary",
    "summarize_older_turns": "summary",
}
"""Where each public name lives. Imported on first use: the agent imports this package's processing modules, and
must not load the ready-made processors with them (the presets name those by path)."""


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'code_puppy.history' has no attribute {name!r}")
    return getattr(importlib.import_module(f"code_puppy.history.{_HOME[name]}"), name)


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
