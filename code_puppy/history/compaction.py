"""The built-in compaction (`[history] compaction`), made to persist, and `compact_history` for `/compact`.

Order within a request: the user's history processors run first (`UserHistoryProcessor` sits earlier in the
capability list) and see the stored history plus this step's request; the compaction then sees their accepted
output and, when its trigger fires, compacts that. The harness strategies only replace the request's messages, so
`PersistentCompaction` writes an accepted compaction to the run's history too: it is stored once (the store
branches, keeping the old history) and the next request starts from it instead of summarizing again. Later
requests show the processors the compacted history; a summary the harness writes is a conversation-scope system
prompt, which the group model protects.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability, WrapperCapability
from pydantic_ai.messages import repair_messages
from pydantic_ai.models import Model, ModelRequestContext
from pydantic_ai.usage import RunUsage
from pydantic_ai_harness.compaction import (
    ClearToolResults,
    SlidingWindowCompaction,
    SummarizingCompaction,
    TieredCompaction,
    compact_now,
)

from code_puppy.config import CompactionKind
from code_puppy.history.revision import rewrote_history
from code_puppy.run.deps import deps_of, in_main_run
from code_puppy.run.history_persistence import persist_compacted_history
from code_puppy.sessions.session import Session

TARGET_FRACTION = 0.8
"""Compact once the request is estimated past this fraction of the model's context window."""
KEEP_MESSAGES = 20
"""Recent messages a summary keeps verbatim (never splitting a tool call from its result)."""
SLIDING_KEEP_MESSAGES = 40
"""Recent messages the sliding window keeps."""
KEEP_TOOL_PAIRS = 3
"""Recent tool results the cheap first tier leaves intact when it blanks older ones."""
COMPACT_KEEP_MESSAGES = 4
"""Recent messages `/compact` keeps verbatim."""


def compaction_strategy(
    kind: CompactionKind, *, summary_capabilities: Sequence[AbstractCapability[None]] = ()
) -> AbstractCapability[Any] | None:
    """The harness strategy for `[history] compaction`: tiered (clear old tool results, then summarize), a summary,
    a sliding window, or none. `summary_capabilities` join the summarizer's own agent (the cost meter)."""
    summarizers = list(summary_capabilities)
    if kind == "tiered":
        # Tiered drives its tiers' `compact` directly: their own triggers are placeholders the harness requires.
        return TieredCompaction(
            tiers=[
                ClearToolResults(max_tokens=1, keep_pairs=KEEP_TOOL_PAIRS),
                SummarizingCompaction(
                    max_messages=1, keep_messages=KEEP_MESSAGES, summarization_capabilities=summarizers
                ),
            ],
            target_fraction=TARGET_FRACTION,
        )
    if kind == "summarize":
        return SummarizingCompaction(
            max_fraction=TARGET_FRACTION, keep_messages=KEEP_MESSAGES, summarization_capabilities=summarizers
        )
    if kind == "sliding":
        return SlidingWindowCompaction(max_fraction=TARGET_FRACTION, keep_messages=SLIDING_KEEP_MESSAGES)
    return None


@dataclass
class PersistentCompaction(WrapperCapability[Any]):
    """A harness compaction strategy whose accepted compaction becomes the run's history, not just this request's.

    Everything else (its `for_run`, instructions, ordering) is the wrapped strategy's own.
    """

    _: KW_ONLY
    before_store: Callable[[str, str | None, Session], Awaitable[None]] | None = None
    """Told (`"auto"`, no instructions, the session) before an accepted compaction of a main-conversation run replaces
    its history: the plugins' `pre_compact`."""

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        before = list(request_context.messages)
        request_context = await super().before_model_request(ctx, request_context)
        after = request_context.messages
        if len(after) != len(before) or any(new is not old for new, old in zip(after, before, strict=True)):
            deps = deps_of(ctx) if in_main_run() else None
            if deps is not None and self.before_store is not None:
                await self.before_store("auto", None, deps.session)
            # In the form the next run would normalize it to (a summary request merged with the request after
            # it), so the stored history does not branch a second time when the next run starts from it.
            ctx.messages[:] = repair_messages(after, repair_last_response=False)
            if deps is not None:
                rewrote_history(deps.session)
        return request_context


@dataclass(frozen=True)
class CompactionReport:
    """What `compact_history` did."""

    messages_before: int
    messages_after: int
    changed: bool
    """Whether the history changed (and was stored as a new branch)."""
    usage: RunUsage
    """The summary request's usage, counted into the session's."""


async def compact_history(
    session: Session,
    model: Model | str,
    *,
    kind: CompactionKind = "tiered",
    focus: str | None = None,
    keep_messages: int = COMPACT_KEEP_MESSAGES,
    summary_capabilities: Sequence[AbstractCapability[None]] = (),
) -> CompactionReport:
    """Compact a session's history now, between runs (`/compact`), whatever its size, and store the result.

    A sliding window drops old messages when `kind` is `"sliding"`; otherwise (compaction off too: the user asked)
    `model` summarizes all but the last `keep_messages` messages, steered by `focus`. Tool calls stay paired with
    their results. The session keeps the old history as a branch; its `cache_epoch` advances.
    """
    messages = session.messages
    strategy: SlidingWindowCompaction[None] | SummarizingCompaction[None] = (
        SlidingWindowCompaction(max_messages=1, keep_messages=keep_messages, preserve_first_user_message=False)
        if kind == "sliding"
        else SummarizingCompaction(
            max_messages=1,
            keep_messages=keep_messages,
            preserve_first_user_message=False,
            summarization_capabilities=list(summary_capabilities),
        )
    )
    usage = RunUsage()
    compacted = await compact_now(strategy, messages, model=model, focus=focus, usage=usage, conversation_id=session.id)
    compacted = repair_messages(compacted, repair_last_response=False)  # as the next run sends it: no second branch
    changed = compacted != messages
    if changed:
        rewrote_history(session)
        await persist_compacted_history(session, compacted, usage=usage)
    return CompactionReport(len(messages), len(compacted), changed, usage)
