"""`RunDeps`: what one run belongs to, passed as the run's `deps`, so that one agent serves every session; and
whether a run is the main conversation's or delegated from inside one (`RunDepth`, `in_main_run`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability, WrapRunHandler
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

from code_puppy.run.steering import SteeringInbox
from code_puppy.sessions.session import Session

AskUser = Callable[[RunContext[Any], DeferredToolRequests, str], Awaitable[DeferredToolResults | None]]
"""Answers the calls waiting for approval in one model step (pydantic-ai's `RequestInput.ask`)."""


class EditorFiles(Protocol):
    """The project's files as an editor holds them (ACP's `fs/read_text_file` and `fs/write_text_file`): the file
    tools read its buffers, saved or not, and write through it, so it shows the change. Both raise `OSError` when
    the editor cannot."""

    @property
    def reads(self) -> bool: ...

    @property
    def writes(self) -> bool: ...

    async def read(self, path: Path) -> str: ...

    async def write(self, path: Path, content: str) -> None: ...


@dataclass
class RunDeps:
    """The session a run belongs to, where steering text for it arrives, and who answers its approvals.

    The agent is built once per process and project (its tools, MCP servers, plugins and policy live as long);
    everything that belongs to one conversation reaches the capabilities per run, through here. A run delegated from
    inside a run (the harness's `delegate_task`) gets the same deps; the capabilities that own the conversation
    leave such runs alone (`in_main_run`).
    """

    session: Session
    """The durable history the run is absorbed into, and journaled into while it runs."""
    steering: SteeringInbox = field(default_factory=SteeringInbox)
    """Text sent to the running run."""
    ask: AskUser | None = None
    """Answers approvals while the run waits; None: nobody can, so what would ask is denied with a reason."""
    files: EditorFiles | None = None
    """The editor the file tools read and write through; None: the disk."""
    warn: Callable[[str], None] | None = None
    """Tells the user something now, in one line (the turn's `EventSink.warning`); None: a line on stderr."""


def deps_of(ctx: RunContext[Any]) -> RunDeps | None:
    """The run's `RunDeps`, or None for a run started without them (an agent used bare, as in a test)."""
    return ctx.deps if isinstance(ctx.deps, RunDeps) else None


_run_depth: ContextVar[int] = ContextVar("code_puppy.run_depth", default=0)
"""How many runs enclose the code running: 1 in the main conversation's run, more in a run delegated from it."""


def in_main_run() -> bool:
    """Whether the code running is part of a main-conversation run, not a run delegated from inside one (the
    harness's `delegate_task`, to this agent or to a file-defined one)."""
    return _run_depth.get() <= 1


@dataclass
class RunDepth(AbstractCapability[Any]):
    """Counts the runs that enclose the code running (`in_main_run`). In the main agent's list and in each file-defined
    delegate's: a delegate is an agent of its own, and what runs inside it is never the main conversation's."""

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # process-local state

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        token = _run_depth.set(_run_depth.get() + 1)
        try:
            return await handler()
        finally:
            _run_depth.reset(token)
