"""The fleet (README "Fleet"): `code-puppy queue add` queues a run, `code-puppy worker` takes queued runs,
`code-puppy workers list` shows who takes them."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from code_puppy.cli.common import NAME, POSITIVE, fail, guarded


@click.group()
def queue() -> None:
    """Runs queued for `code-puppy worker`: add (list and cancel them with `code-puppy runs`)."""


@queue.command("add")
@click.option("-p", "--prompt", metavar="TEXT", help="What to do; `-p -` reads it from stdin.")
@click.option(
    "--prompt-file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE", help="Read the prompt from FILE."
)
@click.option(
    "--project",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="The git repository the run works in (default: the current one).",
)
@click.option("--repo", "repo_url", metavar="URL", help="A git url each worker clones into its cache, instead of DIR.")
@click.option("--ref", metavar="REF", help="With --repo: the branch, tag or commit to start from (default: its HEAD).")
@click.option("-m", "--model", type=NAME, metavar="MODEL", help="The model (default: the worker's config's).")
@click.option("--agent", type=NAME, metavar="NAME", help="The file-defined agent in charge.")
@click.option("--max-budget-usd", type=POSITIVE, metavar="USD", help="Stop once this many US dollars are spent.")
@click.option("--timeout", type=POSITIVE, metavar="SECONDS", help="Stop the run after SECONDS in all.")
@click.option("--max-requests", type=click.IntRange(min=1), metavar="N", help="Stop after N model requests.")
@click.option("--name", type=NAME, metavar="NAME", help="A name for the run (shown by `runs show`).")
@click.option(
    "--priority", type=click.IntRange(min=1, max=2**31 - 1), metavar="P", help="Lower runs first (default: first)."
)
@click.option("--queue", "queue_name", type=NAME, metavar="NAME", help="The queue (default: code-puppy-fleet).")
@click.option("--json", "as_json", is_flag=True, help="Print the run record as JSON.")
def add(
    *,
    prompt: str | None,
    prompt_file: Path | None,
    project: Path | None,
    repo_url: str | None,
    ref: str | None,
    model: str | None,
    agent: str | None,
    max_budget_usd: float | None,
    timeout: float | None,
    max_requests: int | None,
    name: str | None,
    priority: int | None,
    queue_name: str | None,
    as_json: bool,
) -> None:
    """Queue a run; its id alone on the last line of stdout."""

    def run() -> int:
        from code_puppy.fleet.queue import DEFAULT_QUEUE, QueuedRun, enqueue

        if repo_url is not None and project is not None:
            fail("give --project DIR or --repo URL, not both")
        if ref is not None and repo_url is None:
            fail("--ref needs --repo URL (a --project run starts from the project's HEAD)")
        queued = QueuedRun(
            prompt=_prompt(prompt, prompt_file),
            project=(project or Path.cwd()).absolute(),
            repo_url=repo_url,
            ref=ref,
            model=model,
            agent=agent,
            max_budget_usd=max_budget_usd,
            timeout=timeout,
            max_requests=max_requests,
            name=name,
            priority=priority,
            queue=queue_name or DEFAULT_QUEUE,
        )
        run_id = enqueue(queued)
        if as_json:
            import json

            from code_puppy.durable.runs import find_run

            found = find_run(run_id)
            record = {"id": run_id, "status": found.status, "queue": queued.queue, **_shown(found.inputs, priority)}
            click.echo(json.dumps(record, indent=1))
        else:
            click.echo(f"queued on {queued.queue} for a worker (code-puppy runs show {run_id})", err=True)
            click.echo(run_id)
        return 0

    sys.exit(guarded(run))


def _prompt(prompt: str | None, prompt_file: Path | None) -> str:
    if (prompt is None) == (prompt_file is None):
        fail("give the prompt with -p TEXT, -p - (stdin) or --prompt-file FILE (one of them)")
    if prompt_file is not None:
        try:
            text = prompt_file.read_text(errors="replace")
        except OSError as exc:
            fail(f"--prompt-file: cannot read {prompt_file}: {exc.strerror or exc}")
    else:
        assert prompt is not None
        text = sys.stdin.read() if prompt == "-" else prompt
    if not text.strip():
        fail("the prompt is empty")
    return text


def _shown(inputs: dict[str, object], priority: int | None) -> dict[str, object]:
    keys = ("name", "repository", "ref", "prompt", "model", "agent", "max_budget_usd", "timeout", "max_requests")
    return {**{key: inputs.get(key) for key in keys}, "priority": priority}


@click.command()
@click.option("--concurrency", type=click.IntRange(min=1), default=2, show_default=True, help="Runs at a time.")
@click.option("--queue", "queue_name", type=NAME, metavar="NAME", help="The queue (default: code-puppy-fleet).")
@click.option(
    "--permission-mode",
    type=click.Choice(["auto", "accept-edits", "yolo"]),
    help="The runs' permission mode (default: the config's [permissions] mode, else auto).",
)
def worker(*, concurrency: int, queue_name: str | None, permission_mode: str | None) -> None:
    """Take queued runs (`code-puppy queue add`), each in its own git worktree on `code-puppy/RUN-ID`, until SIGTERM
    (drains) or a second Ctrl-C (stops)."""

    def run() -> int:
        from code_puppy.cli.common import debug_requested
        from code_puppy.fleet.queue import DEFAULT_QUEUE
        from code_puppy.fleet.worker import WorkerOptions, run_worker

        options = WorkerOptions(
            queue=queue_name or DEFAULT_QUEUE,
            concurrency=concurrency,
            mode=permission_mode,  # pyright: ignore[reportArgumentType]
            debug=debug_requested(),
        )
        code = run_worker(options)
        from code_puppy.headless.durable import exit_now

        exit_now(code)
        return code

    sys.exit(guarded(run))


@click.group()
def workers() -> None:
    """The fleet's workers, as their heartbeats say."""


@workers.command("list")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of text.")
def list_workers(*, as_json: bool) -> None:
    """Each worker: host, pid, queue, concurrency, runs in hand, seconds since its last beat."""

    def run() -> int:
        from dataclasses import asdict

        from code_puppy.durable.workers import list_workers

        beats = list_workers()  # the dashboard's reader: an unreachable store is one line (exit 2)
        if as_json:
            import json

            shown = [{**asdict(beat), "last_beat_s": round(beat.age(), 1), "alive": beat.alive} for beat in beats]
            click.echo(json.dumps(shown, indent=1))
            return 0
        if not beats:
            click.echo("no workers (start one with code-puppy worker)")
        for beat in beats:
            state = "" if beat.alive else "  (stopped beating)"
            click.echo(
                f"{beat.host}  pid {beat.pid}  {beat.queue}  concurrency {beat.concurrency}  {beat.in_hand} in hand  "
                f"last beat {beat.age():.0f} s ago{state}"
            )
        return 0

    sys.exit(guarded(run))
