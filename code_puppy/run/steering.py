"""Steering: text that reaches the running run of the main conversation while it works (DESIGN §3 "Steering").

Sources put text into a `SteeringInbox` (the chat's input line, `code-puppy steer` through sessions.db, stream-json
stdin); the `Steering` capability binds the inbox to the run in progress, so each text goes in with pydantic-ai's
`enqueue` at priority `asap`: into the next model request, or, when the model is already writing its final
answer, as one more round of the same run. Delivered steers are user prompts in the run's history, so they are
saved with the session like everything else the run did.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic_ai import RunContext
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.capabilities import AbstractCapability, WrapRunHandler
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import AgentStreamEvent, EnqueuedMessagesEvent, ModelRequest, UserPromptPart

from code_puppy.sessions.runs import RunRegistry

SteerResult = Literal["enqueued", "held", "closed"]
"""`enqueued`: in the running run's queue; `held`: no run is taking text now, kept for whoever owns the inbox to
run next; `closed`: the inbox's owner is done, the text was not taken."""

POLL_INTERVAL = 0.2
"""Seconds between two looks at sessions.db for steers from `code-puppy steer`."""


@dataclass
class SteeringInbox:
    """Text for the running run of one agent's main conversation; `steer` is safe from any thread.

    Text that arrives while no run is bound (between runs, or just after a run closed its queue) is held: the
    next run takes it at its start, or the owner takes it with `take_undelivered` and runs it as the next turn.
    Text enqueued into a run that was cancelled before it was sent is also returned by `take_undelivered`.
    """

    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _ctx: RunContext[Any] | None = field(default=None, init=False, repr=False)
    _held: list[str] = field(default_factory=list[str], init=False, repr=False)
    _waiting: dict[str, str] = field(default_factory=dict[str, str], init=False, repr=False)
    _closed: bool = field(default=False, init=False, repr=False)

    def steer(self, text: str) -> SteerResult:
        with self._lock:
            if self._closed:
                return "closed"
            if self._ctx is not None and self._enqueue(self._ctx, text):
                return "enqueued"
            self._held.append(text)
            return "held"

    @property
    def waiting(self) -> int:
        """How many texts are waiting for delivery: enqueued but not yet sent, or held."""
        with self._lock:
            return len(self._waiting) + len(self._held)

    def take_undelivered(self) -> list[str]:
        """The texts no model request has carried yet, oldest first; the inbox forgets them."""
        with self._lock:
            texts = [*self._waiting.values(), *self._held]
            self._waiting.clear()
            self._held.clear()
            return texts

    def close(self) -> list[str]:
        """Take no more text; return what was not delivered."""
        with self._lock:
            self._closed = True
        return self.take_undelivered()

    def bind(self, ctx: RunContext[Any]) -> bool:
        """Route text into the run of `ctx`, held text first; False when another run is bound (a nested run)."""
        with self._lock:
            if self._ctx is not None:
                return False
            self._ctx = ctx
            held, self._held = self._held, []
            for text in held:
                if not self._enqueue(ctx, text):
                    self._held.append(text)
            return True

    def unbind(self, ctx: RunContext[Any]) -> None:
        with self._lock:
            if self._ctx is ctx:
                self._ctx = None

    def delivered(self, enqueue_id: str) -> None:
        with self._lock:
            self._waiting.pop(enqueue_id, None)

    def _enqueue(self, ctx: RunContext[Any], text: str) -> bool:
        try:
            enqueue_id = ctx.enqueue(text, priority="asap")
        except UserError:  # the run closed its queue: it is ending
            return False
        if enqueue_id is not None:
            self._waiting[enqueue_id] = text
        return True


@dataclass
class Steering(AbstractCapability[Any]):
    """Binds each main-conversation run to its `SteeringInbox` (`RunDeps.steering`), so text sent to it reaches it.

    Runs nested inside the main run (the harness's `delegate_task`) are not steerable: the inbox stays bound to
    the main run. Delivery is pydantic-ai's `enqueue` with priority `asap`.
    """

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        inbox = _inbox(ctx)
        if inbox is None or not inbox.bind(ctx):
            return await handler()
        try:
            return await handler()
        finally:
            inbox.unbind(ctx)

    async def on_event(self, ctx: RunContext[Any], *, event: AgentStreamEvent) -> None:
        if isinstance(event, EnqueuedMessagesEvent) and (inbox := _inbox(ctx)) is not None:
            inbox.delivered(event.enqueue_id)


def _inbox(ctx: RunContext[Any]) -> SteeringInbox | None:
    steering = getattr(ctx.deps, "steering", None)  # RunDeps, which imports this module
    return steering if isinstance(steering, SteeringInbox) else None


def steered_text(event: EnqueuedMessagesEvent) -> str:
    """The user text an `EnqueuedMessagesEvent` delivered."""
    return "\n".join(
        part.content
        for message in event.messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    )


def held_steers(
    inbox: SteeringInbox, announce: Callable[[AgentStreamEvent], None] | None = None
) -> Callable[[AgentRunResult[str]], Awaitable[str | None]]:
    """A `run_turn` follow-up: text that arrived as a run ended runs next, in the same turn, instead of being lost.

    `announce` (an event sink's `event`) gets an `EnqueuedMessagesEvent` for it, as for steers a run took itself.
    """

    async def follow_up(result: AgentRunResult[str]) -> str | None:
        texts = inbox.take_undelivered()
        if not texts:
            return None
        text = "\n\n".join(texts)
        if announce is not None:
            request = ModelRequest(parts=[UserPromptPart(text)])
            announce(EnqueuedMessagesEvent(enqueue_id=str(uuid.uuid4()), messages=(request,)))
        return text

    return follow_up


@contextlib.asynccontextmanager
async def accepting_steers(
    registry: RunRegistry,
    session_id: str,
    project_dir: Path,
    inbox: SteeringInbox,
    *,
    cancel: Callable[[], object] | None = None,
    interval: float = POLL_INTERVAL,
) -> AsyncGenerator[None]:
    """Register the session as running in sessions.db and feed steers from `code-puppy steer` into `inbox`.

    Each steer is claimed (marked delivered) before it goes into the inbox, so one that `code-puppy steer` has
    already withdrawn is never delivered. A cancel request (`code-puppy steer --cancel`, the dashboard's Cancel) is
    claimed, then `cancel` is called: the front end's own cancel (none: it is rejected). On exit the registration goes
    and unclaimed steers are rejected.
    """
    registry.register(session_id, project_dir)

    async def poll() -> None:
        async for _ in registry.wake_ups(session_id, interval=interval):
            for steer_id, text, kind in registry.pending(session_id):
                if kind == "cancel" and cancel is None:
                    registry.settle(steer_id, "rejected")
                elif registry.settle(steer_id, "delivered"):
                    if kind == "steer":
                        inbox.steer(text)
                    elif cancel is not None:
                        cancel()

    poller = asyncio.create_task(poll())
    try:
        yield
    finally:
        poller.cancel()
        # A registration that cannot be dropped (a full disk) is stale once this process is gone, and is dropped, its
        # steers rejected, where it is met: the turn's answer must not be lost to it.
        with contextlib.suppress(sqlite3.Error):
            registry.unregister(session_id)
        with contextlib.suppress(asyncio.CancelledError):
            await poller
