"""`code-puppy sandbox check` and `code-puppy sandbox run`: the sandbox as a user can see and try it."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from code_puppy.cli.common import guarded


@click.group()
def sandbox() -> None:
    """The OS sandbox that confines commands run for the agent (bubblewrap on Linux)."""


@sandbox.command("check")
def sandbox_check() -> None:
    """Say which mechanism is used and probe it live; exit 0 when it confines commands, 1 when it does not."""

    def run() -> int:
        from code_puppy.cli.sandbox.probes import check
        from code_puppy.paths import find_project_root

        return check(find_project_root(Path.cwd()), sys.stdout)

    sys.exit(guarded(run))


@sandbox.command("run", context_settings={"ignore_unknown_options": True})
@click.option("--network", is_flag=True, help="Let the command use the network.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def sandbox_run(*, network: bool, command: tuple[str, ...]) -> None:
    """Run COMMAND in the sandbox the agent's commands get: `code-puppy sandbox run -- CMD ARGS...`."""

    def run() -> int:
        from code_puppy.cli.sandbox.probes import run_command
        from code_puppy.paths import find_project_root

        return run_command(find_project_root(Path.cwd()), command, network=network)

    sys.exit(guarded(run))
