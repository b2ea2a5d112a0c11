"""`TurnJournal`: each step of a main-conversation run is journaled as it completes (sessions/journal.py)."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability, AgentNode, NodeResult
from pydantic_ai.messages import (
    AgentStreamEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelRequest,
)

from code_puppy.run.deps import deps_of, in_main_run
from code_puppy.sessions.journal import Journal


@dataclass
class TurnJournal(AbstractCapability[Any]):
    """Journals a main-conversation run step by step, so that a process killed mid-turn loses none of its work.

    When the run starts: its prompt (the session is listed from then on); after each model request, the request
    and the response; as each tool finishes, its result. A run that ends is saved by `HistoryPersistence` or its
    checkpoint, and the save deletes the journal; a journal found later is recovered by
    `recover_interrupted_turn`. Runs delegated from inside the main run are not journaled. A journal write that
    fails is reported once and never stops the run: the run's own save is what counts.
    """

    _journal: tuple[Journal, int] | None = field(default=None, init=False, repr=False)
    """Where the run's session (`RunDeps.session`) journals when it is stored, and the run's journal there."""
    _base: list[ModelMessage] = field(default_factory=list[ModelMessage], init=False, repr=False)
    """The history the run started from, by identity: a run that replaces any of it rewrote its history."""
    _written: list[ModelMessage] = field(default_factory=list[ModelMessage], init=False, repr=False)
    """The run's messages already journaled, by identity."""
    _failed: bool = field(default=False, init=False, repr=False)
    _warn: Callable[[str], None] | None = field(default=None, init=False, repr=False)

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # it writes into live sessions

    async def for_run(self, ctx: RunContext[Any]) -> TurnJournal:
        return replace(self)

    async def before_run(self, ctx: RunContext[Any]) -> None:
        deps = deps_of(ctx)
        if not in_main_run() or deps is None or (journal := deps.session.journal) is None:
            return
        self._warn = deps.warn
        prompt = ctx.prompt if isinstance(ctx.prompt, str) else None
        try:
            journal_id, current = deps.session.begin_run(journal, ctx.run_id, prompt)
        except sqlite3.Error as exc:
            self._report(exc)
            return
        self._journal = (journal, journal_id)
        # On a stale history (another process saved the session since this one loaded it) the journal must hold all
        # of the run's history, not what follows the stored one: the first step writes it whole.
        self._base = list(ctx.messages) if current else []

    async def after_node_run(
        self, ctx: RunContext[Any], *, node: AgentNode[Any], result: NodeResult[Any]
    ) -> NodeResult[Any]:
        if in_main_run() and self._journal is not None:
            self._sync(ctx.messages)
        return result

    async def on_event(self, ctx: RunContext[Any], *, event: AgentStreamEvent) -> None:
        if isinstance(event, FunctionToolResultEvent) and in_main_run() and self._journal is not None:
            journal, journal_id = self._journal
            request = ModelRequest(parts=[event.part], run_id=ctx.run_id)
            self._write(lambda: journal.pending(journal_id, request))

    def _sync(self, messages: list[ModelMessage]) -> None:
        assert self._journal is not None
        journal, journal_id = self._journal
        start = len(self._base)
        mine = messages[start:]
        # The base is checked at its ends (a rewrite that drops or adds messages moves them), not message by
        # message, to keep a step's cost independent of the session's length. A rewrite that replaces messages in
        # its middle and keeps its length goes unseen; recovery then keeps the messages as they were stored.
        unchanged = (
            len(messages) >= start + len(self._written)
            and (not start or (messages[0] is self._base[0] and messages[start - 1] is self._base[-1]))
            and all(now is then for now, then in zip(mine, self._written, strict=False))
        )
        if unchanged:
            new = mine[len(self._written) :]
            if new:
                self._write(lambda: journal.append(journal_id, new))
                self._written.extend(new)
            return
        # A processor or compaction rewrote the history mid-run: journal the whole of it once, then follow on.
        self._write(lambda: journal.append(journal_id, list(messages), snapshot=True))
        self._base, self._written = [], list(messages)

    def _write(self, write: Callable[[], None]) -> None:
        try:
            write()
        except sqlite3.Error as exc:
            self._report(exc)

    def _report(self, exc: sqlite3.Error) -> None:
        if not self._failed:
            self._failed = True
            line = f"could not journal this turn ({exc}); it is saved when it ends"
            if self._warn is not None:
                self._warn(line)
            else:
                print(f"code-puppy: {line}", file=sys.stderr)
