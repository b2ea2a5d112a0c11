"""History custody of the main conversation: `HistoryPersistence` (after_run) and `persist_result_history`.

Every successful run of the main conversation reaches the durable history twice, by design (DESIGN §2):
1. `HistoryPersistence.after_run`, inside the run, the moment the run commits its result;
2. `persist_result_history`, called by every loop once the run has ended and `agent_run_end` observers ran.
Both write `list(result.all_messages())` unconditionally; the store appends only what it lacks, so the second
write costs a transaction and undoes any history change an observer made in between. Runs that do not succeed
reach it through `persist_checkpoint`. A run whose process died without either left its steps in the session's
journal (run/turn_journal.py); `recover_interrupted_turn` makes them the history on the session's next start.
No other code sets the durable history.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic_ai import RunContext
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
    repair_messages,
)
from pydantic_ai.usage import RunUsage

from code_puppy.errors import StoreError
from code_puppy.run.deps import deps_of, in_main_run
from code_puppy.sessions.schema import store_error
from code_puppy.sessions.session import Session, SessionNotSaved


class DurableHistory(Protocol):
    """The owner of the main conversation's history, which writes it through to storage."""

    @property
    def messages(self) -> list[ModelMessage]: ...

    async def set_message_history(
        self, messages: Sequence[ModelMessage], *, run_id: str | None = None, run_usage: RunUsage | None = None
    ) -> None: ...


@dataclass
class HistoryPersistence(AbstractCapability[Any]):
    """Absorbs each successful main-conversation run's complete transcript into its session, in `after_run`.

    The session is the run's (`RunDeps.session`); a run without deps has none to write. The trailing final response
    never passes through a `before_model_request` hook, so `after_run` is the first moment the whole transcript
    exists. Runs nested inside the main run (the harness's `delegate_task` runs a fresh run of this same agent) are
    out of scope: they never write into the main conversation. `for_run` returns `self`: it keeps no state of a run.
    """

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # it writes into live sessions

    async def after_run(self, ctx: RunContext[Any], *, result: AgentRunResult[Any]) -> AgentRunResult[Any]:
        if in_main_run() and (deps := deps_of(ctx)) is not None:
            # A store that fails (a full disk) must not cost the run its answer: the history is set in memory, and
            # the loop's `persist_result_history` tries again and reports what it cannot save.
            with contextlib.suppress(SessionNotSaved):
                await _write(deps.session, result)
        return result


async def persist_result_history(history: DurableHistory, result: AgentRunResult[Any]) -> None:
    """The one write-back every loop calls after a successful run: unconditional, and idempotent."""
    await _write(history, result)


async def persist_checkpoint(
    history: DurableHistory,
    messages: Sequence[ModelMessage],
    *,
    prompt: str | Sequence[UserContent],
    run_id: str | None,
    usage: RunUsage,
) -> None:
    """Keep what a cancelled or failed run completed, its prompt included, made runnable for the next turn.

    Dangling tool calls get pydantic-ai's synthesized "interrupted" returns, so strict providers accept the
    history; a run that failed before recording anything still keeps the prompt.
    """
    if not messages:
        messages = [*history.messages, ModelRequest(parts=[UserPromptPart(prompt)])]
    await history.set_message_history(repair_messages(messages), run_id=run_id, run_usage=usage)


async def persist_compacted_history(
    history: DurableHistory, messages: Sequence[ModelMessage], *, usage: RunUsage
) -> None:
    """Make a history compacted between runs (`/compact`) the durable history; the store keeps the old branch."""
    await history.set_message_history(list(messages), run_id=f"compact-{uuid.uuid4()}", run_usage=usage)


async def persist_rewound_history(history: DurableHistory, messages: Sequence[ModelMessage]) -> None:
    """Make a history rewound to before a turn (`code-puppy rewind`, `/rewind`) the durable history; the store keeps
    the old branch."""
    await history.set_message_history(list(messages))


async def _write(history: DurableHistory, result: AgentRunResult[Any]) -> None:
    await history.set_message_history(list(result.all_messages()), run_id=result.run_id, run_usage=result.usage)


async def recover_interrupted_turn(session: Session) -> str | None:
    """Make the journaled steps of runs whose process died part of the session; the one-line note, or None.

    Only journals whose process is gone count: a run in progress elsewhere looks exactly like an interrupted one. A
    journal that continues the session as it is stored becomes its history; one whose session was saved by another
    process after the run began is recovered as a new session instead, so that neither history overwrites the
    other. Dangling tool calls are repaired as a checkpoint's are. Each journal is claimed first, and the save that
    recovers it deletes it: a journal is recovered once, or (a process killed in between) again whole, never twice.

    Raises:
        StoreError: A journal that does not read back, or a store that cannot take the recovered turn (a full disk):
            nothing was sent yet, and the journal stays for the next start.
    """
    journal = session.journal
    if journal is None:
        return None
    notes: list[str] = []
    try:
        for interrupted in journal.read(session.id):
            if not interrupted.orphaned:
                continue
            own = [message for message in interrupted.messages if message.run_id == interrupted.run_id]
            usage = RunUsage()
            for response in own:
                if isinstance(response, ModelResponse):
                    usage = usage + response.usage
                    usage.requests += 1
            steps = sum(
                1
                if isinstance(message, ModelResponse)
                else sum(isinstance(p, UserPromptPart | ToolReturnPart) for p in message.parts)
                for message in own
            )
            counted = f"{steps} step{'' if steps == 1 else 's'}"
            record = await session.store.read_record(session.id)
            run_id = f"recovered-{uuid.uuid4()}"
            if (record.revision if record is not None else None) == interrupted.base_revision:
                if not journal.claim(interrupted, into=session.id):
                    continue  # another process is recovering it
                messages = interrupted.messages if interrupted.snapshot else [*session.messages, *interrupted.messages]
                await session.set_message_history(repair_messages(messages), run_id=run_id, run_usage=usage)
                notes.append(f"recovered an interrupted turn: {counted}")
                continue
            elsewhere = await session.sibling()
            if not journal.claim(interrupted, into=elsewhere.id):
                continue
            base: list[ModelMessage] = []
            if not interrupted.snapshot and interrupted.base_head is not None:
                base = [entry.message for entry in await session.store.read_history(interrupted.base_head)]
            history = repair_messages([*base, *interrupted.messages])
            await elsewhere.set_message_history(history, run_id=run_id, run_usage=usage)
            notes.append(
                f"session {session.id[:8]} went on in another process after a turn of it was interrupted; "
                f"that turn ({counted}) was recovered as session {elsewhere.id[:8]}"
            )
    except (SessionNotSaved, sqlite3.Error) as exc:
        failure = exc.__cause__ if isinstance(exc, SessionNotSaved) and exc.__cause__ is not None else exc
        problem = store_error(journal.path, failure, writing=True)
        raise StoreError(f"{problem}; nothing was sent, and the interrupted turn is kept for the next start") from exc
    return "; ".join(notes) or None
