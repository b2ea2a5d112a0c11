"""`code-puppy worker`: a process that launches DBOS with its own executor id, listens to the fleet's queue and runs
each run it takes in its own worktree (`fleet/run.py`), beating a heartbeat (`fleet/heartbeat.py`) until a signal.

Concurrency: DBOS 3.4 stores one `worker_concurrency` with a queue, read by every worker at each dequeue, so the
queue's limit is each worker's `--concurrency`. A worker refuses to start with another value than the live workers of
its queue have (a second queue, `--queue`, holds workers of another size), rather than changing theirs behind them.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from code_puppy.durable.system import Executor, system_database_url
from code_puppy.errors import ConfigError
from code_puppy.fleet.heartbeat import Beating, Heartbeats, WorkerBeat
from code_puppy.options import PermissionMode

DRAIN_SECONDS = 600
"""How long a SIGTERM waits for the runs in hand to finish; what is left is resumable (`runs resume`)."""
UNATTENDED: tuple[PermissionMode, ...] = ("auto", "accept-edits", "yolo", "read-only")
"""The modes a worker runs in: `ask` would deny every call no one is there to approve."""


@dataclass(frozen=True)
class WorkerOptions:
    queue: str
    concurrency: int
    mode: PermissionMode | None
    debug: bool = False


def worker_mode(flag: PermissionMode | None, cwd: Path) -> PermissionMode:
    """`--permission-mode`, else the config's `[permissions] mode`, else `auto`: refused in one line when it cannot run
    unattended, or needs the sandbox and there is none here."""
    from code_puppy.config import load_settings
    from code_puppy.sandbox import ProjectSandbox, SandboxUnavailable

    settings = load_settings(cwd)
    mode: PermissionMode = flag or (settings.permissions.mode if settings.source_of("permissions", "mode") else "auto")
    if mode not in UNATTENDED:
        raise ConfigError(f"a worker cannot run in permission mode {mode}: use {', '.join(UNATTENDED)}")
    if mode == "auto" or mode in settings.sandbox.modes:
        try:
            ProjectSandbox(settings.sandbox, cwd).get()
        except SandboxUnavailable as exc:
            raise ConfigError(
                f"permission mode {mode} needs the sandbox, and {exc}; start the worker with --permission-mode "
                "accept-edits or yolo, or see `code-puppy sandbox check`"
            ) from None
    return mode


def check_concurrency(heartbeats: Heartbeats, options: WorkerOptions) -> None:
    for other in heartbeats.listed():
        if other.alive and other.queue == options.queue and other.concurrency != options.concurrency:
            raise ConfigError(
                f"queue {options.queue} takes {other.concurrency} runs per worker (DBOS keeps one worker concurrency "
                f"per queue; worker {other.worker} has it): start with --concurrency {other.concurrency}, or use "
                "another --queue"
            )


def run_worker(options: WorkerOptions) -> int:
    """The worker, until SIGTERM (drain: no new runs, the runs in hand finish) or a second SIGINT (stop now)."""
    mode = worker_mode(options.mode, Path.cwd())
    heartbeats = Heartbeats(system_database_url())
    try:
        check_concurrency(heartbeats, options)
        return _serve(options, mode, heartbeats)
    finally:
        heartbeats.close()


def _serve(options: WorkerOptions, mode: PermissionMode, heartbeats: Heartbeats) -> int:
    import importlib

    importlib.import_module("pydantic_ai.durable_exec.dbos")
    from code_puppy.durable.system import launch
    from code_puppy.fleet.run import STATE

    executor = Executor.this()
    STATE.mode, STATE.worker, STATE.debug = mode, executor.worker, options.debug
    stop = _Signals()
    _warm_up(Path.cwd())
    dbos = launch(debug=options.debug, queue=options.queue, worker_concurrency=options.concurrency)
    started_ms = _now_ms()

    def beat(now_ms: int) -> WorkerBeat:
        return WorkerBeat(
            executor.id,
            executor.worker,
            executor.hostname,
            executor.pid,
            options.queue,
            options.concurrency,
            STATE.in_hand,
            mode,
            started_ms,
            now_ms,
        )

    beating = Beating(heartbeats, beat, partial(_take_over, heartbeats, dbos, options.queue))
    print(
        f"code-puppy: worker {executor.worker} on queue {options.queue}, {options.concurrency} at a time, permission "
        f"mode {mode} (SIGTERM drains, a second Ctrl-C stops)",
        file=sys.stderr,
        flush=True,
    )
    stop.draining.wait()
    print(f"code-puppy: worker {executor.worker} draining: {STATE.in_hand} run(s) in hand", file=sys.stderr, flush=True)
    dbos.destroy(workflow_completion_timeout_sec=DRAIN_SECONDS)
    beating.stop(executor.id)
    print(f"code-puppy: worker {executor.worker} stopped", file=sys.stderr, flush=True)
    return 0


def _warm_up(cwd: Path) -> None:
    """What every run imports and builds first, done once before the worker takes a run (before its first beat): its
    first run then starts as soon as its later ones (0.2 s from enqueue to the first request instead of 0.9 s)."""
    import importlib

    for module in ("code_puppy.headless.runner", "code_puppy.core.builder", "code_puppy.core.project"):
        importlib.import_module(module)
    from code_puppy.config import load_settings
    from code_puppy.models import choose_model_name, resolve_model

    try:
        settings = load_settings(cwd)
        resolve_model(settings, choose_model_name(settings, None))
    except Exception:  # a model this folder's config cannot build: each run resolves its own, and says why it cannot
        pass


def _take_over(heartbeats: Heartbeats, dbos: Any, queue: str) -> None:
    """The runs of the workers of `queue` that stopped beating go back on the queue, at their last finished step, in
    the order they were queued (`DBOS.resume_workflow`): the first worker with a free slot continues each."""
    from code_puppy.durable.system import WORKFLOW_NAME

    for dead in heartbeats.claim_dead(queue):
        executor = Executor.parse(dead.executor_id)
        if executor is not None and executor.local and executor.alive:
            continue  # a worker of this machine that is only slow to beat: its runs are its own
        pending = dbos.list_workflows(
            status="PENDING", executor_id=dead.executor_id, name=WORKFLOW_NAME, load_input=False, load_output=False
        )
        for workflow in pending:
            dbos.resume_workflow(workflow.workflow_id, queue_name=queue)
            print(
                f"code-puppy: worker {dead.worker} stopped beating; its run {workflow.workflow_id} is queued again",
                file=sys.stderr,
                flush=True,
            )


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


class _Signals:
    """SIGTERM or a first SIGINT: drain. A second SIGINT: leave now (the runs in hand stay resumable)."""

    def __init__(self) -> None:
        self.draining = threading.Event()
        signal.signal(signal.SIGTERM, self._drain)
        signal.signal(signal.SIGINT, self._interrupt)

    def _drain(self, signum: int, frame: Any) -> None:
        self.draining.set()

    def _interrupt(self, signum: int, frame: Any) -> None:
        if self.draining.is_set():
            print("code-puppy: worker stopped; its runs in hand are interrupted", file=sys.stderr, flush=True)
            os._exit(130)
        self.draining.set()
