"""`code-puppy rewind` and `code-puppy checkpoints`: a session's checkpoints, and undoing the agent's changes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import click

from code_puppy.cli.common import NAME, guarded

if TYPE_CHECKING:
    from code_puppy.checkpoints.rewind import Only
    from code_puppy.config import Settings
    from code_puppy.sessions.catalog import SessionInfo
    from code_puppy.sessions.store import SqliteConversationStore


@click.command("rewind")
@click.option(
    "--session", "session_id", type=NAME, metavar="ID", help="A session id or prefix (default: the latest here)."
)
@click.option("--turns", type=click.IntRange(min=1), default=1, show_default=True, metavar="N", help="How many back.")
@click.option(
    "--only", type=click.Choice(["code", "conversation"]), help="Rewind only the files, or only the conversation."
)
@click.option("--force", is_flag=True, help="Overwrite files you changed since (your versions are kept).")
@click.option("--dry-run", is_flag=True, help="Say what would change; change nothing.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rewind(
    *, session_id: str | None, turns: int, only: str | None, force: bool, dry_run: bool, output_format: str
) -> None:
    """Undo the agent's file changes of the last N checkpointed turns, and branch the conversation back.

    A file you changed since the agent did is not overwritten: exit 1, listing it, unless --force.
    """

    def run() -> int:
        import asyncio

        from code_puppy.paths import find_project_root

        return asyncio.run(
            rewind_session(
                find_project_root(Path.cwd()),
                sys.stdout,
                session_id=session_id,
                turns=turns,
                only=only,  # type: ignore[arg-type]  # click.Choice guarantees the literal
                force=force,
                dry_run=dry_run,
                output_format=output_format,
            )
        )

    sys.exit(guarded(run))


@click.command("checkpoints")
@click.option(
    "--session", "session_id", type=NAME, metavar="ID", help="A session id or prefix (default: the latest here)."
)
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def checkpoints(*, session_id: str | None, output_format: str) -> None:
    """List a session's checkpoints: the turns that changed files, and rewinds; newest first."""

    def run() -> int:
        from code_puppy.paths import find_project_root

        return list_checkpoints(
            find_project_root(Path.cwd()), sys.stdout, session_id=session_id, output_format=output_format
        )

    sys.exit(guarded(run))


async def rewind_session(
    root: Path,
    out: TextIO,
    *,
    session_id: str | None,
    turns: int,
    only: Only | None,
    force: bool,
    dry_run: bool,
    output_format: str,
) -> int:
    """Rewind a session (the latest of `root` by default); 0 done, 1 refused (conflicts) or nothing to rewind."""
    from code_puppy.checkpoints.shadow import CheckpointError
    from code_puppy.config import load_settings
    from code_puppy.errors import say

    settings = load_settings(root)
    try:
        return await _rewind_in(root, out, settings, session_id, turns, only, force, dry_run, output_format)
    except CheckpointError as exc:
        say(f"error: {exc}")
        return 1


async def _rewind_in(
    root: Path,
    out: TextIO,
    settings: Settings,
    session_id: str | None,
    turns: int,
    only: Only | None,
    force: bool,
    dry_run: bool,
    output_format: str,
) -> int:
    from code_puppy.checkpoints.rewind import Rewinder, describe_rewind, finish_interrupted_rewind, open_shadow
    from code_puppy.errors import say
    from code_puppy.sessions.session import Session
    from code_puppy.sessions.store import open_store

    with open_store() as store:
        shadow, _ = open_shadow(root, max_file_mb=settings.checkpoints.max_file_mb)
        # Finishing a rewind a killed process left is the whole command: that rewind is the newest checkpoint, so
        # rewinding on would undo it at once.
        result = await finish_interrupted_rewind(shadow, store, dry_run=dry_run) if shadow is not None else None
        if result is None:
            session = await Session.resume(store, _session(store, root, session_id), model=None)
            result = await Rewinder(store, root, shadow).rewind(
                session, turns=turns, only=only, force=force, dry_run=dry_run
            )
    if output_format == "json":
        import json

        json.dump(result.to_json(dry_run=dry_run), out, indent=2)
        out.write("\n")
    elif result.nothing:
        say(f"nothing to rewind in session {result.session_id[:8]}: no checkpoint left and no turn in its history")
    elif result.conflicts and not force:
        say(
            f"rewind refused, nothing was changed: you changed {', '.join(result.conflicts)} since the agent did; "
            "--force restores anyway, after keeping your versions as a checkpoint (rewind that to get them back)"
        )
    else:
        for line in describe_rewind(result, dry_run=dry_run):
            print(line, file=out)
    return 1 if result.nothing or (result.conflicts and not force) else 0


def list_checkpoints(root: Path, out: TextIO, *, session_id: str | None, output_format: str) -> int:
    """List a session's checkpoints (the latest session of `root` by default), newest first."""
    from code_puppy.sessions.checkpoints import CheckpointLog, checkpoint_lines
    from code_puppy.sessions.store import open_store

    with open_store(readonly=True) as store:
        info = _session(store, root, session_id)
        found = list(reversed(CheckpointLog(store.database).of_session(info.id)))
    if output_format == "json":
        import json

        json.dump({"session_id": info.id, "checkpoints": [item.to_json() for item in found]}, out, indent=2)
        out.write("\n")
        return 0
    if not found:
        print(f"no checkpoints in session {info.id[:8]}", file=out)
        return 0
    for line in checkpoint_lines(found):
        print(line, file=out)
    return 0


def _session(store: SqliteConversationStore, root: Path, session_id: str | None) -> SessionInfo:
    from code_puppy.errors import ConfigError
    from code_puppy.sessions.checkpoints import CheckpointLog
    from code_puppy.sessions.session import find_session

    if session_id is not None:
        return find_session(store, session_id)
    latest = store.sessions.latest(root)
    # A session whose conversation was rewound to nothing is no longer listed, but its checkpoints are still there.
    newest = CheckpointLog(store.database).latest_session(root)
    if newest is not None and (latest is None or newest[1] > latest.updated_at):
        latest = store.sessions.find(newest[0])[0]
    if latest is None:
        raise ConfigError(f"no session in {root} (--session ID names one; code-puppy sessions list --all)")
    return latest
