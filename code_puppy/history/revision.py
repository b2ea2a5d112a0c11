"""A history's revision counters: what a session keeps about rewrites of its history (stored with it), and the same
counters for a run without a session. Light, so compaction counts a rewrite without loading the processor API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@runtime_checkable
class HistoryRevision(Protocol):
    """The counters a session keeps about its history, advanced by accepted rewrites and stored with it."""

    cache_epoch: int
    """Rewrites of already-sent history (processor edits, compactions): each can cost the provider's prompt cache."""
    history_version: int
    """Revisions of the history processors see: one per model request, and one per accepted rewrite."""


@dataclass
class Revision:
    """`HistoryRevision` counters of one run, for runs without a session to keep them."""

    cache_epoch: int = 0
    history_version: int = 0


def rewrote_history(revision: HistoryRevision) -> None:
    """Count a rewrite of already-sent history (a processor's accepted edit, a compaction): a new cache epoch and a
    new history version."""
    revision.cache_epoch += 1
    revision.history_version += 1
