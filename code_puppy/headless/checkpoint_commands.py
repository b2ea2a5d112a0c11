"""`code-puppy rewind` and `code-puppy checkpoints`: the checkpoints of a session, and rewinding them, from scripts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from code_puppy.checkpoints.rewind import Only, Rewinder, describe_rewind, finish_interrupted_rewind, open_shadow
from code_puppy.checkpoints.shadow import CheckpointError
from code_puppy.config import Settings, load_settings
from code_puppy.errors import ConfigError, say
from code_puppy.sessions.catalog import SessionInfo
from code_puppy.sessions.checkpoints import CheckpointLog, checkpoint_lines
from code_puppy.sessions.session import Session, find_session
from code_puppy.sessions.store import SqliteConversationStore, open_store


async def rewind(
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


def checkpoints(root: Path, out: TextIO, *, session_id: str | None, output_format: str) -> int:
    """List a session's checkpoints (the latest session of `root` by default), newest first."""
    with open_store(readonly=True) as store:
        info = _session(store, root, session_id)
        found = list(reversed(CheckpointLog(store.database).of_session(info.id)))
    if output_format == "json":
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
