"""Rewinding a session: the agent's file changes put back, the conversation branched to before a turn, or both.

Checkpoints are undone newest first, like an undo stack: `turns=N` is the session's last N checkpoints that are not
rewound yet (turns that changed files, and rewinds, which are undoable too). Each file goes back to its state before
the earliest change among them, and only if it is still what the latest change left: a file the user changed since is
a conflict, and nothing is written unless `force`. Every rewind first snapshots the files as they are, and is itself
recorded as a checkpoint from those versions, so the user's edits overwritten by a forced rewind come back with one
more rewind.

All or nothing: every blob is read before any file is written, and a record in the shadow repository
(`rewind.json`) says what is being written; a process killed mid-rewind leaves it, and the next start finishes the
rewind from it (`finish_interrupted_rewind`): the writes are idempotent, so finishing is always possible.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from code_puppy.checkpoints.capability import TurnChanges
from code_puppy.checkpoints.git_format import Change, Entry
from code_puppy.checkpoints.shadow import CheckpointError, ShadowRepo
from code_puppy.config import ConfigError
from code_puppy.mentions import typed_text
from code_puppy.paths import write_json
from code_puppy.run.history_persistence import persist_rewound_history
from code_puppy.sessions.catalog import SessionInfo
from code_puppy.sessions.checkpoints import Checkpoint, CheckpointLog
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore

Only = Literal["code", "conversation"]
RECORD = "rewind.json"
"""The record of a rewind in progress, in the shadow repository's directory."""


@dataclass(frozen=True)
class Turn:
    """A user turn in a session's current history: where it starts, its prompt, and the run that began it."""

    index: int
    prompt: str
    run_id: str | None
    started: datetime | None = None
    """When its prompt was sent."""


@dataclass
class RewindResult:
    """What a rewind did, or would do (`dry_run`), or why it did nothing (`conflicts`)."""

    session_id: str
    checkpoints: list[Checkpoint] = field(default_factory=list[Checkpoint])
    """The checkpoints undone, newest first."""
    writes: dict[str, Entry | None] = field(default_factory=dict[str, Entry | None])
    """Each file put back (None: deleted, since the turn created it)."""
    current: dict[str, Entry | None] = field(default_factory=dict[str, Entry | None])
    """Each file's state when the rewind began (None: it did not exist)."""
    conflicts: list[str] = field(default_factory=list[str])
    """Files changed since the checkpoint (by the user, mostly): not overwritten without `force`."""
    unrestorable: list[str] = field(default_factory=list[str])
    """Files the checkpoints could not snapshot (too big): left as they are."""
    turn: Turn | None = None
    """The turn the conversation goes back to before, when it does."""
    messages_before: int = 0
    messages_after: int = 0
    applied: bool = False
    rewind_checkpoint: int | None = None
    """The checkpoint recording this rewind (undoable in turn)."""
    interrupted: bool = False
    """It is a rewind a killed process left half done, finished (`finish_interrupted_rewind`)."""

    @property
    def nothing(self) -> bool:
        return not self.interrupted and not self.checkpoints and self.turn is None

    def to_json(self, *, dry_run: bool) -> dict[str, Any]:
        status = (
            "finished"
            if self.interrupted
            else "conflict"
            if self.conflicts and not self.applied
            else "nothing"
            if self.nothing
            else "ok"
        )
        return {
            "session_id": self.session_id,
            "status": status,
            "dry_run": dry_run,
            "checkpoints": [checkpoint.id for checkpoint in self.checkpoints],
            "restored": sorted(path for path, entry in self.writes.items() if entry is not None),
            "deleted": sorted(path for path, entry in self.writes.items() if entry is None),
            "conflicts": self.conflicts,
            "unrestorable": self.unrestorable,
            "conversation": None
            if self.turn is None
            else {
                "prompt": self.turn.prompt,
                "messages_before": self.messages_before,
                "messages_after": self.messages_after,
            },
            "rewind_checkpoint": self.rewind_checkpoint,
        }


def describe_rewind(result: RewindResult, *, dry_run: bool = False) -> list[str]:
    """What a rewind did (or, `dry_run`, would do), for a person."""
    if result.interrupted:
        return [f"{interrupted_line(result, dry_run=dry_run)}, and nothing more (rewind again to go further back)"]
    verb = "would rewind" if dry_run else "rewound"
    count = len(result.checkpoints)
    what = f"{count} checkpoint{'' if count == 1 else 's'}" if count else "the conversation"
    lines = [f"{verb} {what} of session {result.session_id[:8]}"]
    if result.writes:
        lines.append(f"  files: {files_line(result)}")
    elif result.checkpoints:
        lines.append("  files: already as they were before")
    if result.unrestorable:
        lines.append(f"  not restorable (too big to checkpoint): {', '.join(result.unrestorable)}")
    if result.conflicts:
        lines.append(f"  your edits to {', '.join(result.conflicts)} were overwritten; rewind again to get them back")
    if result.turn is not None:
        prompt = " ".join(result.turn.prompt.split())[:60]
        lines.append(
            f"  conversation: back to before “{prompt}” ({result.messages_before} → {result.turn.index} messages; "
            "the old branch is kept)"
        )
    return lines


def interrupted_line(result: RewindResult, *, dry_run: bool = False) -> str:
    """The one line about a rewind a killed process left half done, finished (or, `dry_run`, still to finish)."""
    count = len(result.writes)
    files = f"{count} file{'' if count == 1 else 's'}"
    if dry_run:
        return f"would finish a rewind that was interrupted: {files} to restore"
    return f"finished a rewind that was interrupted: {files} restored"


def files_line(result: RewindResult) -> str:
    """`4 files: app.py, doomed.txt (restored), new.py (deleted)`."""
    names = [
        f"{path} (deleted)" if entry is None else f"{path} (restored)" if result.current.get(path) is None else path
        for path, entry in sorted(result.writes.items())
    ]
    return f"{len(names)} file{'' if len(names) == 1 else 's'}: {', '.join(names)}"


def user_turns(messages: Sequence[ModelMessage]) -> list[Turn]:
    """The turns of a history: each request with a user prompt that begins a run (steers inside a run do not)."""
    turns: list[Turn] = []
    previous: str | None = None
    for index, message in enumerate(messages):
        run_id = message.run_id
        starts = index == 0 or run_id is None or run_id != previous
        previous = run_id
        if not (starts and isinstance(message, ModelRequest)):
            continue
        prompts = [part for part in message.parts if isinstance(part, UserPromptPart)]
        if prompts:
            text = typed_text(prompts[0].content)
            turns.append(Turn(index, text, run_id, message.timestamp or prompts[0].timestamp))
    return turns


class Rewinder:
    """Rewinds the sessions of one project; `shadow` is None where git is missing (only conversations rewind)."""

    def __init__(self, store: SqliteConversationStore, root: Path, shadow: ShadowRepo | None) -> None:
        self.store = store
        self.root = root
        self.shadow = shadow
        self.log = CheckpointLog(store.database)

    async def rewind(
        self,
        session: Session,
        *,
        turns: int = 1,
        only: Only | None = None,
        force: bool = False,
        dry_run: bool = False,
        to_turn: int | None = None,
    ) -> RewindResult:
        """Rewind the session's last `turns` checkpoints (or, `only="conversation"`, user turns); see the module.

        `to_turn` (the chat's `/rewind N`) instead goes back to before the `to_turn`th last turn of the history: every
        checkpoint since it began is undone, and the conversation branches to before it.

        Raises:
            ConfigError: Code to restore without git.
            CheckpointError: The shadow repository failed, or is held by another process for too long.
        """
        result = RewindResult(session.id)
        messages = session.messages
        history_turns = user_turns(messages)
        result.messages_before = result.messages_after = len(messages)
        live = [checkpoint for checkpoint in self.log.of_session(session.id) if checkpoint.rewound_at is None]
        if to_turn is not None:
            if len(history_turns) < to_turn:
                return result
            result.turn = history_turns[-to_turn]
            started = result.turn.started
            if only != "conversation":
                since = [checkpoint for checkpoint in live if started is None or checkpoint.created_at >= started]
                result.checkpoints = list(reversed(since))
            if only == "code":
                result.turn = None
        elif only == "conversation":
            result.turn = history_turns[-turns] if len(history_turns) >= turns else None
        else:
            result.checkpoints = list(reversed(live[-turns:]))
            if only is None:
                result.turn = _turn_before(result.checkpoints, history_turns, turns)
        if not result.checkpoints:
            if result.turn is not None and not dry_run:
                await self._cut(session, result)
            return result
        if self.shadow is None:
            raise ConfigError("git is not installed, so files cannot be restored; rewind with --only conversation")
        with self.shadow.lock():
            current = self._plan(self.shadow, result)
            if (result.conflicts and not force) or dry_run:
                return result
            self._apply(self.shadow, result, session, current)
            if result.turn is not None:
                await self._cut(session, result)
            (self.shadow.directory / RECORD).unlink(missing_ok=True)
        result.applied = True
        return result

    def _plan(self, shadow: ShadowRepo, result: RewindResult) -> dict[str, Entry | None]:
        """Fill in `result`'s writes and conflicts against the files as they are now; each file's entry now."""
        target: dict[str, Entry | None] = {}
        expected: dict[str, Entry | None] = {}
        for checkpoint in reversed(result.checkpoints):  # oldest first
            for path, (before, after) in checkpoint.changes.items():
                target.setdefault(path, before)
                expected[path] = after
        now = shadow.snapshot_held()
        current = result.current = shadow.entries(now, target)
        result.unrestorable = sorted(set(target) & shadow.skipped)
        # Changed since, and not back to what the rewind restores (a user who undid it by hand is no conflict).
        result.conflicts = sorted(
            path
            for path in target
            if current[path] not in (expected[path], target[path]) and path not in shadow.skipped
        )
        result.writes = {
            path: entry for path, entry in target.items() if current[path] != entry and path not in shadow.skipped
        }
        return current

    def _apply(
        self, shadow: ShadowRepo, result: RewindResult, session: Session, current: Mapping[str, Entry | None]
    ) -> None:
        blobs = shadow.read_blobs(entry[1] for entry in result.writes.values() if entry is not None)
        record = {
            "session_id": session.id,
            "project_dir": str(self.root),
            "checkpoints": [checkpoint.id for checkpoint in result.checkpoints],
            "writes": {path: entry for path, entry in result.writes.items()},
            "before": {path: current[path] for path in result.writes},
            "cut_run_id": result.turn.run_id if result.turn is not None else None,
        }
        write_json(shadow.directory / RECORD, record)
        result.rewind_checkpoint = _finish_files(shadow, self.log, record, blobs)

    async def _cut(self, session: Session, result: RewindResult) -> None:
        """Branch the conversation to just before `result.turn`: the store keeps the old branch (as compaction does)."""
        assert result.turn is not None
        await persist_rewound_history(session, session.messages[: result.turn.index])
        result.messages_after = result.turn.index
        result.applied = True


def _turn_before(checkpoints: Sequence[Checkpoint], turns: Sequence[Turn], count: int) -> Turn | None:
    """The history turn to go back to before: the earliest rewound turn's, if it is still in the history; with no
    checkpoint to rewind, the `count`th last turn."""
    if not checkpoints:
        return turns[-count] if len(turns) >= count else None
    first_runs = [
        checkpoint.run_ids[0] for checkpoint in checkpoints if checkpoint.kind == "turn" and checkpoint.run_ids
    ]
    found = [turn for turn in turns if turn.run_id is not None and turn.run_id in first_runs]
    return found[0] if found else None


def _finish_files(
    shadow: ShadowRepo, log: CheckpointLog, record: Mapping[str, Any], blobs: Mapping[str, bytes]
) -> int | None:
    """Write every file of a rewind record, then record the rewind (once) and mark its checkpoints rewound."""
    writes = _entries(record["writes"])
    for path, entry in sorted(writes.items()):
        write_file(shadow.root, path, entry, blobs[entry[1]] if entry is not None else None)
    ids: list[int] = record["checkpoints"]
    first = log.get(ids[0]) if ids else None
    if first is None or first.rewound_at is not None:
        return None  # recorded before the process died
    before = _entries(record["before"])
    changes: dict[str, Change] = {path: (before[path], writes[path]) for path in writes}
    return log.add(record["session_id"], Path(record["project_dir"]), kind="rewind", changes=changes, rewinds=ids)


def _entries(values: Mapping[str, Any]) -> dict[str, Entry | None]:
    return {path: (str(value[0]), str(value[1])) if value else None for path, value in values.items()}


async def finish_interrupted_rewind(
    shadow: ShadowRepo, store: SqliteConversationStore, *, dry_run: bool = False
) -> RewindResult | None:
    """Finish a rewind a killed process left half done (its record), or, `dry_run`, only say what it would write; None
    when there is none.

    Raises:
        CheckpointError: The record's blobs cannot be read, or a file cannot be written.
    """
    path = shadow.directory / RECORD
    if not path.is_file():
        return None
    with shadow.lock():
        if not path.is_file():
            return None  # another process finished it
        try:
            record: dict[str, Any] = json.loads(path.read_text())
        except ValueError:
            if not dry_run:
                path.unlink()  # written atomically: a record that does not parse was never one
            return None
        log = CheckpointLog(store.database)
        result = RewindResult(record["session_id"], interrupted=True)
        result.checkpoints = [item for number in record["checkpoints"] if (item := log.get(number)) is not None]
        result.writes, result.current = _entries(record["writes"]), _entries(record["before"])
        run_id: str | None = record.get("cut_run_id")
        found: list[SessionInfo] = store.sessions.find(result.session_id) if run_id is not None else []
        session = await Session.resume(store, found[0], model=None) if found else None
        if session is not None:
            # None when the conversation was cut before the process died.
            result.turn = next((turn for turn in user_turns(session.messages) if turn.run_id == run_id), None)
            result.messages_before = result.messages_after = len(session.messages)
        if dry_run:
            return result
        blobs = shadow.read_blobs(entry[1] for entry in result.writes.values() if entry is not None)
        result.rewind_checkpoint = _finish_files(shadow, log, record, blobs)
        if session is not None and result.turn is not None:
            await persist_rewound_history(session, session.messages[: result.turn.index])
            result.messages_after = result.turn.index
        path.unlink()
    result.applied = True
    return result


def record_turn(
    turn: TurnChanges, session: Session, prompt: str, run_ids: Sequence[str]
) -> tuple[int | None, str | None]:
    """Record a turn's file changes as its checkpoint (none when it changed nothing); its id, and the note for the
    user (files too big to keep, a snapshot or a save that failed)."""
    notes: list[str] = []
    if turn.failure:
        notes.append(f"the checkpoint of this turn may be incomplete: {turn.failure}")
    if turn.skipped:
        notes.append(f"not checkpointed (over [checkpoints] max_file_mb, cannot be rewound): {', '.join(turn.skipped)}")
    checkpoint = None
    if turn.changes and isinstance(session.store, SqliteConversationStore):
        try:
            checkpoint = CheckpointLog(session.store.database).add(
                session.id,
                session.project_dir or Path.cwd(),
                kind="turn",
                changes=turn.changes,
                prompt=prompt,
                run_ids=run_ids,
                skipped=turn.skipped,
            )
        except sqlite3.Error as exc:
            notes.append(f"the checkpoint of this turn could not be saved: {exc}")
    return checkpoint, "; ".join(notes) or None


def open_shadow(root: Path, *, max_file_mb: float) -> tuple[ShadowRepo | None, str | None]:
    """The project's shadow repository, or None and the one line saying why checkpoints are off."""
    from code_puppy.paths import data_dir

    try:
        return ShadowRepo.open(root, data_dir(), max_file_mb=max_file_mb), None
    except CheckpointError as exc:
        return None, f"checkpoints are off: {exc}"


def write_file(root: Path, path: str, entry: Entry | None, content: bytes | None) -> None:
    """Put `path` (project-relative) back as `entry` with `content`, or delete it (None); atomic for each file.

    A parent that would lead outside `root` through a symlink, or into a `.git` folder, is refused. Folders a deleted
    file leaves empty are removed up to the root, as git does.
    """
    target = root / path
    parts = Path(path).parts
    if not parts or ".." in parts or any(part.casefold() == ".git" for part in parts):
        raise CheckpointError(f"refusing to write {path}: outside the project's files")
    parent = target.parent
    if parent.exists() and root.resolve() not in (parent.resolve(), *parent.resolve().parents):
        raise CheckpointError(f"refusing to write {path}: its folder leads outside the project")
    if entry is None:
        if target.is_symlink() or target.is_file():
            target.unlink()
        directory = target.parent
        while directory != root and directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
            directory = directory.parent
        return
    assert content is not None
    if parent.exists() and not parent.is_dir():
        parent.unlink()  # a file where the folder was: the folder is what the checkpoint had
    parent.mkdir(parents=True, exist_ok=True)
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    temporary = parent / f".{target.name}.code-puppy-rewind"
    temporary.unlink(missing_ok=True)
    mode, _ = entry
    if mode == "120000":
        os.symlink(os.fsdecode(content), temporary)
    else:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o755 if mode == "100755" else 0o644)
        with os.fdopen(descriptor, "wb") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
    os.replace(temporary, target)
