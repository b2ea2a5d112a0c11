"""`--durable` and `code-puppy runs resume`: a headless turn as a DBOS workflow (code_puppy/durable/README.md).

The workflow takes ids and options only (`inputs_of`), never live objects. The process that starts a run runs its
turn inside the workflow as a plain run would (`start`); a process that resumes one rebuilds the whole invocation
from those inputs inside the workflow, on DBOS's event loop (`resume`), and the recorded steps replay.

This module imports only DBOS at first, so that registering the workflow (before DBOS launches) is quick; the run path
is imported when a run needs it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dbos import DBOS, SetWorkflowID

from code_puppy.durable.system import WORKFLOW_NAME, Executor, Launching, launch, resume_queue
from code_puppy.options import RunOptions
from code_puppy.run.replay import replay_check

if TYPE_CHECKING:
    from code_puppy.core.turn import TurnOutcome
    from code_puppy.durable.runs import DurableRun

Body = Callable[[], Awaitable[dict[str, Any]]]
_prepared: dict[str, Body] = {}
"""The turn a process starting a run runs inside its workflow, by workflow id."""
_recorded: dict[str, int] = {}
"""The last step a run had recorded when this process took it over, by workflow id: the steps up to it replay."""
_debug: dict[str, bool] = {}
"""Whether `--debug` was given to the `runs resume` of a workflow id."""
KINDS: dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {}
"""The bodies of runs enqueued by a layer above (inputs' `kind`: `fleet`, `fleet/`), registered by it."""


@DBOS.workflow(name=WORKFLOW_NAME)
async def headless_turn(inputs: dict[str, Any]) -> dict[str, Any]:
    """One headless turn; its result is what `runs show` prints (`status`, `output`, `error`, `exit_code`)."""
    workflow_id = DBOS.workflow_id
    assert workflow_id is not None
    kind = KINDS.get(str(inputs.get("kind")))
    body = _prepared.pop(workflow_id, None) or partial(kind or _resumed, inputs)
    token = replay_check.set(partial(_replaying, _recorded.get(workflow_id, 0)))
    try:
        return await body()
    finally:
        replay_check.reset(token)


def replay_through(recorded: int) -> Callable[[], bool]:
    """The replay check of a run that had recorded `recorded` steps when this process took it over."""
    return partial(_replaying, recorded)


def _replaying(recorded: int) -> bool:
    # DBOS numbers a workflow's steps as they start (its context's `function_id`); pydantic-ai reads it the same way.
    from dbos._context import get_local_dbos_context  # pyright: ignore[reportPrivateUsage]

    context = get_local_dbos_context()
    return context is not None and 0 < context.function_id <= recorded


def inputs_of(
    options: RunOptions, *, session_id: str, base_messages: int, model: str, mode: str, headless: Any
) -> dict[str, Any]:
    """What a durable run is started with, and resumed with: ids and options, never live objects. `base_messages`: how
    long the session's history was when the run started (a resumed run replays its turn on that history)."""
    return {
        "session_id": session_id,
        "base_messages": base_messages,
        "project_root": str(options.project_root),
        "prompt": headless.prompt,
        "model": model,
        "permission_mode": mode,
        "allow": list(options.allow),
        "max_requests": options.max_requests,
        "max_budget_usd": options.max_budget_usd,
        "timeout": headless.timeout,
        "output_format": headless.output_format,
        "compat": headless.compat,
        "no_mcp": options.no_mcp,
        "no_plugins": options.no_plugins,
        "agent": options.agent,
        "allowed_tools": list(options.allowed_tools),
        "disallowed_tools": list(options.disallowed_tools),
        "append_system_prompt": options.append_system_prompt,
    }


def result_of(outcome: TurnOutcome) -> dict[str, Any]:
    """What a finished run's workflow returns: what `runs show` prints."""
    from code_puppy.core.events import EXIT_CODES, ending

    status, message = ending(outcome)
    result = outcome.result if outcome.error is None else None
    return {
        "status": status,
        "output": result.output if result is not None else None,
        "error": message,
        "exit_code": EXIT_CODES[status],
    }


async def start(inputs: dict[str, Any], turn: Coroutine[Any, Any, TurnOutcome], launching: Launching) -> TurnOutcome:
    """Run `turn` as a new durable run (its id on stderr first), in this task: signals reach it as in a plain run."""
    try:
        await launching.wait()
    except BaseException:
        turn.close()
        raise
    workflow_id = str(uuid.uuid4())
    kept: list[TurnOutcome] = []

    async def body() -> dict[str, Any]:
        # Once DBOS recorded the run: from this line on, `runs resume` can continue it.
        print(f"code-puppy: durable run {workflow_id}", file=sys.stderr, flush=True)
        kept.append(await turn)
        return result_of(kept[0])

    _prepared[workflow_id] = body
    try:
        with SetWorkflowID(workflow_id):
            await headless_turn(inputs)
    finally:
        _prepared.pop(workflow_id, None)
        if not kept:
            turn.close()  # a signal came before the turn began: it never runs
    return kept[0]


def resume(run: DurableRun, *, debug: bool, recorded: int) -> int:
    """Continue interrupted `run` in this process, in the foreground: its exit code."""
    executor = Executor.this()
    queue = resume_queue(executor)
    dbos = launch(debug=debug, queue=queue)
    # While DBOS's queue thread finds the new queue (it looks once a second): the project is opened once to check it,
    # so that what cannot be set up any more (a model, a credential, the config) is one line and the run stays
    # interrupted, not failed.
    from code_puppy.core.project import Project

    asyncio.run(Project(options_of(run.inputs, run.id, debug=debug)).close())
    _recorded[run.id] = recorded
    _debug[run.id] = debug
    handle = dbos.resume_workflow(run.id, queue_name=queue)
    result = handle.get_result()
    return int(result.get("exit_code", 1)) if isinstance(result, dict) else 1  # pyright: ignore


def options_of(inputs: dict[str, Any], run_id: str, *, debug: bool) -> RunOptions:
    """The options a durable run started with, for the process resuming it."""
    return RunOptions(
        project_root=Path(inputs["project_root"]),
        model=inputs["model"],
        permission_mode=inputs["permission_mode"],
        allow=tuple(inputs["allow"]),
        max_requests=inputs["max_requests"],
        max_budget_usd=inputs["max_budget_usd"],
        resume=inputs["session_id"],
        no_mcp=inputs["no_mcp"],
        no_plugins=inputs["no_plugins"],
        debug=debug,
        agent=inputs["agent"],
        allowed_tools=tuple(inputs["allowed_tools"]),
        disallowed_tools=tuple(inputs["disallowed_tools"]),
        append_system_prompt=inputs["append_system_prompt"],
        durable_run=run_id,
    )


async def _resumed(inputs: dict[str, Any]) -> dict[str, Any]:
    """The whole invocation of a run this process resumes, from its recorded inputs, inside its workflow."""
    from code_puppy.headless.runner import HeadlessOptions, Output, make_sink, run_recorded

    workflow_id = DBOS.workflow_id or ""
    options = options_of(inputs, workflow_id, debug=_debug.get(workflow_id, False))
    headless = HeadlessOptions(
        prompt=inputs["prompt"],
        timeout=inputs["timeout"],
        output_format=inputs["output_format"],
        compat=inputs["compat"],
    )
    output = Output(make_sink(headless), time.monotonic())
    code = await run_recorded(options, headless, output, time.monotonic(), base_messages=inputs["base_messages"])
    ended = output.ended
    return {
        "status": ended.status if ended is not None else "error",
        "output": ended.output if ended is not None else None,
        "error": ended.error if ended is not None else None,
        "exit_code": code,
    }


def exit_now(code: int) -> None:
    """Leave at once, the output flushed: DBOS's teardown (its threads, ~1 s) has nothing left to do for this run."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
