"""A queued run, as a worker runs it inside the durable runs' workflow (`headless_turn`, inputs of `kind` `fleet`):
its worktree made (a step), its turn run durably there (every model request and tool call a step), its changes
committed on its branch and its worktree removed when it succeeded (a step)."""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dbos import DBOS

from code_puppy.core.events import EXIT_CODES, RunOutcome
from code_puppy.errors import ConfigError, one_line
from code_puppy.headless.durable import KINDS, options_of, replay_through
from code_puppy.options import PermissionMode

WORKFLOW_STEPS = ("code_puppy.fleet.worktree", "code_puppy.fleet.finish", "code_puppy.fleet.clone")
"""The fleet's own steps' names (compatibility data, as the workflow's: never rename)."""


@dataclass
class WorkerState:
    """What the worker process gives the runs it takes: its permission mode, its name, the runs in hand."""

    mode: PermissionMode = "auto"
    worker: str = ""
    debug: bool = False
    in_hand: int = 0


STATE = WorkerState()


@DBOS.step(name=WORKFLOW_STEPS[0])
async def prepare_worktree(repository: str, run_id: str) -> dict[str, str]:
    """The run's worktree `.code-puppy/worktrees/RUN-ID` on `code-puppy/RUN-ID`, and the commit it started from."""
    from code_puppy.worktrees import ensure, head

    def made() -> dict[str, str]:
        path = ensure(Path(repository), run_id)
        return {"path": str(path), "base": head(path)}

    return await asyncio.to_thread(made)


@DBOS.step(name=WORKFLOW_STEPS[2])
async def prepare_clone(url: str, ref: str | None, run_id: str) -> dict[str, str]:
    """A `--repo` run's worktree, in the worker's clone of `url` (`fleet/clone.py`), from `ref`."""
    from code_puppy.fleet.clone import worktree
    from code_puppy.worktrees import head

    def made() -> dict[str, str]:
        clone, path = worktree(url, ref, run_id)
        return {"path": str(path), "base": head(path), "repository": str(clone)}

    return await asyncio.to_thread(made)


@DBOS.step(name=WORKFLOW_STEPS[1])
async def finish(repository: str, worktree: dict[str, str], message: str, succeeded: bool) -> dict[str, Any]:
    """Commit the run's changes on its branch (when it succeeded) and remove its worktree; else keep it as it is."""
    from code_puppy.checkpoints.shadow import shadow_directory
    from code_puppy.paths import data_dir
    from code_puppy.worktrees import commit_all, diff_stat, find, remove

    def done() -> dict[str, Any]:
        path = Path(worktree["path"])
        if not succeeded:  # kept for the user to look at, when it is here
            return {"diff_stat": "", "worktree": str(path) if path.is_dir() else None}
        commit_all(path, message)
        stat = diff_stat(path, worktree["base"])
        shadow = shadow_directory(path, data_dir())
        remove(Path(repository), find(Path(repository), path.name), force=True)
        # Its checkpoints' shadow repository (a copy of the project's files) goes too: the folder is never made again.
        shutil.rmtree(shadow, ignore_errors=True)
        return {"diff_stat": stat, "worktree": None}

    return await asyncio.to_thread(done)


def lost_worktree(path: str) -> str:
    """Why a run taken over cannot go on: the worktree its finished steps changed is not on this machine."""
    return (
        f"its worktree {path} is not on this machine (it was on the stopped worker's, a --repo run's clone is in that "
        "worker's cache): the changes of its finished steps went with it, so it is not continued here; queue the "
        "prompt again to start afresh"
    )


def commit_message(prompt: str, run_id: str) -> str:
    """The prompt's first line (72 characters at most), the whole prompt and the run below it."""
    first = next((line.strip() for line in prompt.splitlines() if line.strip()), "code-puppy run")
    subject = first if len(first) <= 72 else first[:71] + "…"
    return f"{subject}\n\n{prompt.strip()}\n\ncode-puppy run {run_id}\n"


async def run_queued(inputs: dict[str, Any]) -> dict[str, Any]:
    """One queued run, in the worker: what `runs show` prints of it."""
    from code_puppy.durable.runs import last_step
    from code_puppy.run.replay import replay_check

    run_id = DBOS.workflow_id
    assert run_id is not None
    STATE.in_hand += 1
    # A run taken over from a dead worker replays the steps it recorded: its hooks (costs, journal) must not run again.
    token = replay_check.set(replay_through(await asyncio.to_thread(last_step, run_id)))
    try:
        if inputs.get("repo_url"):
            worktree = await prepare_clone(inputs["repo_url"], inputs.get("ref"), run_id)
        else:
            worktree = await prepare_worktree(inputs["repository"], run_id)
        repository: str = worktree.get("repository") or inputs["repository"]
        if await asyncio.to_thread(Path(worktree["path"]).is_dir):
            ended, session_id, failure = await _turn({**inputs, "project_root": worktree["path"]}, run_id)
            status = ended.status if ended is not None else "error"
            message = commit_message(inputs["prompt"], run_id)
            finished = await finish(repository, worktree, message, status == "success")
        else:  # taken over from a worker whose machine held the worktree: its finished steps' changes went with it
            # (no step from here: the next recorded one is the turn's, which cannot be replayed without them)
            ended, session_id, failure, status = None, None, lost_worktree(worktree["path"]), "error"
            finished = {"diff_stat": "", "worktree": None}
    finally:
        replay_check.reset(token)
        STATE.in_hand -= 1
    return {
        "status": status,
        "output": ended.output if ended is not None else None,
        "error": failure or (ended.error if ended is not None else None),
        "exit_code": EXIT_CODES[status],
        "session_id": session_id,
        "cost_usd": ended.cost_usd if ended is not None else None,
        "branch": f"code-puppy/{run_id}",
        "diff_stat": finished["diff_stat"],
        "worktree": finished["worktree"],
        "worker": STATE.worker,
        "clone": worktree.get("repository"),
    }


async def _turn(inputs: dict[str, Any], run_id: str) -> tuple[RunOutcome | None, str | None, str | None]:
    """The run's turn in its worktree, in the worker's permission mode: how it ended, its session, and why it could
    not run (a `ConfigError` of the worker's config, say)."""
    from code_puppy.headless.runner import HeadlessOptions, Output, run_recorded

    options = options_of({**inputs, "permission_mode": STATE.mode}, run_id, debug=STATE.debug)
    headless = HeadlessOptions(prompt=inputs["prompt"], timeout=inputs["timeout"])
    output = Output(_Quiet(), time.monotonic())
    try:
        await run_recorded(options, headless, output, time.monotonic())
    except ConfigError as exc:
        return None, output.session_id, str(exc)
    except Exception as exc:  # the run's failure, recorded; the worker goes on
        return None, output.session_id, f"internal error: {one_line(exc, typed=True)}"
    return output.ended, output.session_id, None


class _Quiet:
    """The worker's sink: a queued run's events are in its session and DBOS's steps, not on the worker's terminal."""

    def start(self, session_id: str) -> None:
        pass

    def run_started(self, index: int) -> None:
        pass

    def event(self, event: Any) -> None:
        pass

    def request(self, cost: Any) -> None:
        pass

    def warning(self, text: str) -> None:
        pass

    def finish(self, outcome: RunOutcome) -> None:
        pass


KINDS["fleet"] = run_queued
