"""`code-puppy steer`: text into the running turn of a session, from another terminal."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from code_puppy.cli.common import NAME, fail, guarded

if TYPE_CHECKING:
    pass


@click.command()
@click.option(
    "--session",
    "session_id",
    type=NAME,
    metavar="ID",
    help="A session id or prefix (default: the newest running one here).",
)
@click.option(
    "--cancel",
    is_flag=True,
    help="Cancel the running turn instead (as Ctrl-C in its chat, SIGINT to a -p run): finished work is kept.",
)
@click.argument("text", nargs=-1)
def steer(*, session_id: str | None, cancel: bool, text: tuple[str, ...]) -> None:
    """Send TEXT into the running turn of a code-puppy session, from another terminal (or, with --cancel, stop it).

    It reaches the model with the run's next request. Exit 1 when no run of the session is active.
    """
    message = " ".join(text)
    if cancel and text:
        fail("--cancel takes no TEXT")
    if not cancel and not message.strip():
        fail("nothing to send: TEXT is empty")

    def run() -> int:
        from code_puppy.paths import find_project_root, store_location
        from code_puppy.sessions.runs import RunRegistry
        from code_puppy.sessions.runs import cancel as cancel_turn
        from code_puppy.sessions.runs import steer as send
        from code_puppy.sessions.schema import Database

        database = Database(store_location())
        try:
            registry = RunRegistry(database)
            project_dir = find_project_root(Path.cwd())
            if cancel:
                ok, line = cancel_turn(registry, project_dir=project_dir, session_prefix=session_id)
            else:
                ok, line = send(registry, message, project_dir=project_dir, session_prefix=session_id)
        finally:
            database.close()
        click.echo(line if ok else f"code-puppy: {line}", err=not ok)
        return 0 if ok else 1

    sys.exit(guarded(run))
