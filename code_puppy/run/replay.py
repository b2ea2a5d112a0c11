"""Whether the code running replays a step a durable run recorded before (`runs resume`): such a step was priced,
shown and journaled by the process that first ran it, so the capabilities that do that leave it alone."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

replay_check: ContextVar[Callable[[], bool] | None] = ContextVar("code_puppy.replay_check", default=None)
"""Set by a durable run's workflow (code_puppy/headless/durable.py) for the code it runs."""


def replaying() -> bool:
    """Whether the step the code running belongs to is replayed from the durable runs database."""
    check = replay_check.get()
    return check is not None and check()
