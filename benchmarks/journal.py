"""Journaling budget (DESIGN §4, issue 10.2): journaling a run's steps adds under 2 ms per step.

    python benchmarks/journal.py [--steps 40]

A real agent (`build_pydantic_agent`) with a stored session on a real sessions.db runs a tool loop of `--steps`
model requests, each calling `read_file` on a 4 KB file, against a pydantic-ai `FunctionModel`. The time spent in
`TurnJournal`'s hooks (the prompt when the run starts, each request and response after its model request, each tool
result as it finishes) is measured per step, for a session that starts empty and one that starts with 10,000
messages; the median and the 90th percentile are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from code_puppy.config import Settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent
from code_puppy.run.deps import RunDeps
from code_puppy.run.turn_journal import TurnJournal
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore
from tests.sessions_data import exchange  # the same realistic messages the store tests use


def timed(costs: list[float], hook: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await hook(*args, **kwargs)
        finally:
            costs.append(time.perf_counter() - started)

    return wrapper


async def measure(root: Path, steps: int, prior: int) -> list[float]:
    """Milliseconds spent journaling each step of one run."""
    (root / "project").mkdir()
    (root / "project" / "big.txt").write_text("some source line of about forty chars\n" * 100)
    with SqliteConversationStore(root / "sessions.db") as store:
        session = await Session.start(store, root / "project", model="bench")
        history: list[ModelMessage] = [message for i in range(prior // 4) for message in exchange(i)]
        if history:
            await session.set_message_history(history)
        calls = 0

        async def respond(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
            nonlocal calls
            calls += 1
            if calls > steps:
                yield "done"
                return
            yield {0: DeltaToolCall(name="read_file", json_args='{"path": "big.txt"}', tool_call_id=f"c{calls}")}

        settings = Settings.model_validate({"history": {"compaction": "off"}})
        agent = build_pydantic_agent(
            settings,
            AgentOptions(model=FunctionModel(stream_function=respond), project_root=root / "project"),
        )
        costs: list[float] = []
        for name in ("before_run", "after_node_run", "on_event"):
            setattr(TurnJournal, name, timed(costs, getattr(TurnJournal, name)))
        await agent.run("read big.txt again and again", message_history=session.messages, deps=RunDeps(session))
        # The hooks of one step: an after_node_run per node (request, tools) and an on_event per streamed event.
        return [sum(costs) / steps * 1000]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    originals = {name: getattr(TurnJournal, name) for name in ("before_run", "after_node_run", "on_event")}
    for prior in (0, 10_000):
        per_step: list[float] = []
        for _ in range(args.runs):
            for name, hook in originals.items():
                setattr(TurnJournal, name, hook)
            with tempfile.TemporaryDirectory() as folder:
                per_step += asyncio.run(measure(Path(folder), args.steps, prior))
        print(
            f"session of {prior:>6} messages: journaling {statistics.median(per_step):.3f} ms per step "
            f"(median of {args.runs} runs of {args.steps} steps; min {min(per_step):.3f}, max {max(per_step):.3f})"
        )


if __name__ == "__main__":
    main()
