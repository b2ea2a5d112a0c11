"""Queueing a run (`code-puppy queue add`): checked here, enqueued through a `DBOSClient` (this process never launches
DBOS, so it never takes over work), onto the fleet's DBOS queue, as the durable runs' own workflow."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from code_puppy.durable.system import APP_VERSION, WORKFLOW_NAME, dbos_client
from code_puppy.errors import ConfigError

DEFAULT_QUEUE = "code-puppy-fleet"
"""The queue `queue add` and `worker` use unless `--queue` names another."""
KIND = "fleet"
"""The inputs' `kind` of a queued run: `headless_turn` runs it with the fleet's body (`fleet/run.py`)."""


@dataclass(frozen=True, kw_only=True)
class QueuedRun:
    """What `queue add` was asked: the run's inputs, once checked."""

    prompt: str
    project: Path
    repo_url: str | None = None
    """`--repo URL`: each worker clones it into its cache and works there (`fleet/clone.py`), instead of `project`."""
    ref: str | None = None
    model: str | None = None
    agent: str | None = None
    max_budget_usd: float | None = None
    timeout: float | None = None
    max_requests: int | None = None
    name: str | None = None
    priority: int | None = None
    queue: str = DEFAULT_QUEUE


def check(run: QueuedRun) -> Path:
    """The main checkout of the run's project, once the project is a git repository with a commit and the model and
    agent are known here (the model's credentials are the worker's); else a `ConfigError` (exit 2), nothing enqueued."""
    from code_puppy.config import load_settings
    from code_puppy.definitions.files import load_agents
    from code_puppy.models import choose_model_name, model_name_problem
    from code_puppy.worktrees import repository

    if run.repo_url is not None:
        from code_puppy.fleet.clone import check_remote

        check_remote(run.repo_url, run.ref)
        repo = run.project  # the model and agent as they resolve here
    else:
        if not run.project.is_dir():
            raise ConfigError(f"--project: no folder {run.project}")
        repo = repository(run.project)
    settings = load_settings(repo)
    # Named, checked offline: the credentials are the worker's (building the model here would cost ~1.8 s of imports).
    if problem := model_name_problem(settings, choose_model_name(settings, run.model)):
        known = ", ".join(sorted(settings.models)) or "none configured"
        raise ConfigError(f"{problem}: use PROVIDER:MODEL (e.g. openai:gpt-5.1) or a name from [models] ({known})")
    if run.agent is not None:
        known = sorted(definition.name for definition in load_agents(repo).items)
        if run.agent not in known:
            raise ConfigError(
                f"unknown agent '{run.agent}' (agents: {', '.join(known) or 'none defined'}; see `code-puppy agents "
                "list`)"
            )
    return repo


def inputs_of(run: QueuedRun, repo: Path) -> dict[str, Any]:
    """The workflow's inputs: those of a durable run (`headless/durable.py` `inputs_of`), the worker filling in the
    worktree, the session and the permission mode."""
    return {
        "kind": KIND,
        "repository": run.repo_url or str(repo),
        "repo_url": run.repo_url,
        "ref": run.ref,
        "name": run.name,
        "session_id": None,
        "base_messages": None,
        "project_root": str(repo),  # the worker's worktree, when it runs
        "prompt": run.prompt,
        "model": run.model,
        "permission_mode": None,
        "allow": [],
        "max_requests": run.max_requests,
        "max_budget_usd": run.max_budget_usd,
        "timeout": run.timeout,
        "output_format": "text",
        "compat": None,
        "no_mcp": False,
        "no_plugins": False,
        "agent": run.agent,
        "allowed_tools": [],
        "disallowed_tools": [],
        "append_system_prompt": None,
    }


def enqueue(run: QueuedRun) -> str:
    """Check `run`, enqueue it; its run id."""
    repo = check(run)
    run_id = str(uuid.uuid4())
    client = dbos_client(migrate=True)
    try:
        options: dict[str, Any] = {
            "queue_name": run.queue,
            "workflow_name": WORKFLOW_NAME,
            "workflow_id": run_id,
            "app_version": APP_VERSION,
        }
        if run.priority is not None:
            options["priority"] = run.priority
        client.enqueue(options, inputs_of(run, repo))
    finally:
        client.destroy()
    return run_id
