"""`code-puppy sessions import PATH…`: Claude Code transcripts and Codex rollouts into code-puppy sessions.

Each file becomes one session of the project its transcript ran in (the project root of its `cwd`, as code-puppy
finds it, when that folder exists here; the `cwd` itself otherwise). The session's id is derived from the file's own
session id (a UUID 5 of the format and that id, which is kept as an alias), so importing a file again finds the
session it made: a transcript that grew since (the session went on in Claude Code or Codex, or was being written)
adds its new messages and answers the calls that were open; one that did not adds nothing.
The session's created and updated times are those of its first and last message.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pydantic_ai import Conversation
from pydantic_ai.messages import ModelMessage

from code_puppy.paths import find_project_root

from .catalog import SessionInfo
from .schema import timestamp
from .session import Session
from .store import SqliteConversationStore
from .transcripts import NO_RESULT, NotARegularFile, Transcript, read_transcript

__all__ = ("import_paths", "session_id_for")

_NAMESPACE = uuid.UUID("6f0b1d36-58c4-4bd3-9d43-2f3b1a7c0e51")
"""Imported sessions' ids are UUID 5 names in this namespace."""


@dataclass
class Outcome:
    """What became of one file."""

    transcript: Transcript
    status: str
    """`imported`, `would import` (--dry-run), `updated` / `would update` (a transcript that grew since its import),
    `already imported`, `not imported` (a file named that could not be),
    or `skipped` (a file found in a folder that holds no conversation: Claude Code's sub-agent files, Codex's
    history.jsonl; or that is not a regular file, as a FIFO)."""
    session_id: str | None = None
    project_dir: Path | None = None
    reason: str = ""
    """Why it was not imported (or, already imported, not updated)."""
    added: int = 0
    """Messages an update added."""
    completed: int = 0
    """Results an update gave calls stored without one (the transcript was being written, or an older import lost
    them)."""

    def as_json(self) -> dict[str, Any]:
        transcript = self.transcript
        return {
            "file": str(transcript.path),
            "format": transcript.format,
            "status": self.status,
            "session_id": self.session_id,
            "project_dir": None if self.project_dir is None else str(self.project_dir),
            "messages": len(transcript.messages),
            "skipped": dict(sorted(transcript.skipped.items())),
            "malformed_lines": len(transcript.problems),
            **(
                {"added": self.added, "completed": self.completed} if self.status in ("updated", "would update") else {}
            ),
            **({"reason": self.reason} if self.reason else {}),
        }


def session_id_for(transcript: Transcript) -> str:
    """The code-puppy session id a transcript is imported as: the same for every import of that session."""
    key = transcript.session_key or transcript.path.stem
    return str(uuid.uuid5(_NAMESPACE, f"{transcript.format}:{key}"))


def files_under(paths: list[Path]) -> dict[Path, bool]:
    """The files to read, in order: each file named (True), and every `*.jsonl` under each folder named (False)."""
    found: dict[Path, bool] = {}
    for path in paths:
        for file in sorted(path.rglob("*.jsonl")) if path.is_dir() else [path]:
            found[file] = found.get(file, False) or not path.is_dir()
    return found


def import_paths(
    store: SqliteConversationStore | None,
    paths: list[Path],
    *,
    dry_run: bool,
    default_project: Path,
    out: TextIO,
    err: TextIO,
    as_json: bool,
) -> int:
    """Import every transcript under `paths` (with `dry_run`, only say what would be; `store` may then be None, when
    there is none yet); report on `out`, malformed lines on `err`. Exit 0 when every file was imported or had been, or
    was skipped; 1 when a file named could not be, or nothing was found."""
    outcomes: list[Outcome] = []
    for path, named in files_under(paths).items():
        try:
            transcript = read_transcript(path)
        except NotARegularFile:
            status = "not imported" if named else "skipped"
            outcomes.append(Outcome(Transcript(path=path), status, reason="not a regular file"))
            continue
        except OSError as exc:
            outcomes.append(Outcome(Transcript(path=path), "not imported", reason=f"cannot read it: {exc.strerror}"))
            continue
        for problem in transcript.problems if transcript.format else []:  # a file of neither kind is one line
            err.write(f"{problem}\n")
        outcome = _import(store, transcript, default_project, dry_run=dry_run)
        if outcome.status == "not imported" and not named:
            outcome.status = "skipped"
        outcomes.append(outcome)
    if as_json:
        out.write(json.dumps({"files": [outcome.as_json() for outcome in outcomes]}, indent=1) + "\n")
    else:
        for outcome in outcomes:
            out.write(_line(outcome) + "\n")
        if not outcomes:
            out.write("no .jsonl files found\n")
    return 1 if not outcomes or any(outcome.status == "not imported" for outcome in outcomes) else 0


def _import(
    store: SqliteConversationStore | None, transcript: Transcript, default_project: Path, *, dry_run: bool
) -> Outcome:
    if transcript.format is None:
        return Outcome(transcript, "not imported", reason="neither a Claude Code transcript nor a Codex rollout")
    if transcript.subagent_of is not None:
        reason = (
            f"a Claude Code sub-agent's transcript, of session {transcript.subagent_of or '(not named)'}: what the "
            "sub-agent found is in that session, as the result of the Task call that started it"
        )
        return Outcome(transcript, "skipped", reason=reason)
    if not transcript.messages:
        return Outcome(transcript, "not imported", reason="it holds no messages")
    session_id = session_id_for(transcript)
    project = _project(transcript, default_project)
    found = store.sessions.find(session_id) if store is not None else []
    if store is not None and found and found[0].id == session_id:
        return _update(store, transcript, found[0], dry_run=dry_run)
    if dry_run or store is None:
        return Outcome(transcript, "would import", session_id, project)
    try:
        store.sessions.create(project, session_id=session_id)
    except ValueError:  # another import of the same file got there first
        return Outcome(transcript, "already imported", session_id, project)
    session = Session(store, Conversation(conversation_id=session_id))
    session.project_dir = project
    asyncio.run(session.set_message_history(transcript.messages))
    _set_times(store, session_id, transcript.messages, first=True)
    _set_source(store, session_id, transcript)
    return Outcome(transcript, "imported", session_id, project)


def _update(store: SqliteConversationStore, transcript: Transcript, info: SessionInfo, *, dry_run: bool) -> Outcome:
    """Add what a transcript gained since it was imported as `info`: new messages, results of calls that were open,
    the rest of an answer or request that was being written (nothing when it did not grow). Nothing stored is lost:
    a history that changed branches off in the store, the old branch kept."""
    project = Path(info.project_dir)
    session = asyncio.run(Session.resume(store, info, model=None))
    stored, read = session.messages, transcript.messages
    if _grown_from(stored, read):
        kept = [old if _key(old) == _key(new) else new for old, new in zip(stored, read, strict=False)]
        added, completed = len(read) - len(stored), _unanswered(stored) - _unanswered(read[: len(stored)])
    elif _within(stored, read):  # an older import's, which lost results: what it kept is all in the transcript
        kept, added, completed = [], max(len(read) - len(stored), 0), _results(read) - _results(stored)
    else:
        reason = "the transcript no longer starts with the imported messages; nothing added"
        return Outcome(transcript, "already imported", info.id, project, reason=reason)
    if not added and kept == stored:
        _set_source(store, info.id, transcript)  # a session imported before sources were recorded
        return Outcome(transcript, "already imported", info.id, project)
    if dry_run:
        return Outcome(transcript, "would update", info.id, project, added=added, completed=completed)
    asyncio.run(session.set_message_history([*kept, *read[len(kept) :]]))
    _set_times(store, info.id, read[max(len(kept) - 1, 0) :], first=False)
    _set_source(store, info.id, transcript)
    return Outcome(transcript, "updated", info.id, project, added=added, completed=completed)


def _key(message: ModelMessage) -> list[tuple[str, object, object]]:
    """What identifies a message across an import and a later read of the same transcript."""
    return [
        (part.part_kind, getattr(part, "content", None), getattr(part, "tool_call_id", None)) for part in message.parts
    ]


def _grown_from(stored: list[ModelMessage], read: list[ModelMessage]) -> bool:
    """Whether `read` is `stored` and more: the same messages, except that calls stored as unanswered may have their
    results now, and the last answer and request stored may have more parts (the file was read while being written)."""
    if len(read) < len(stored):
        return False
    for index, (old, new) in enumerate(zip(stored, read, strict=False)):
        old_parts, new_parts = _key(old), _key(new)
        if index >= len(stored) - 2:
            new_parts = new_parts[: len(old_parts)]
        if len(old_parts) != len(new_parts) or not all(
            a == b or (a[0] == b[0] == "tool-return" and a[1] == NO_RESULT and a[2] == b[2])
            for a, b in zip(old_parts, new_parts, strict=True)
        ):
            return False
    return True


def _within(stored: list[ModelMessage], read: list[ModelMessage]) -> bool:
    """Whether every part `stored` holds is in `read`, in order, but for what older imports made of a transcript and
    a read leaves out: results saying a call was never answered, slash-command records as prompts."""
    parts = iter(part for message in read for part in _key(message))
    made = ("<command-", "<local-command-")
    return all(
        part in parts
        for message in stored
        for part in _key(message)
        if part[1] != NO_RESULT and not (part[0] == "user-prompt" and str(part[1]).lstrip().startswith(made))
    )


def _results(messages: list[ModelMessage]) -> int:
    return sum(1 for message in messages for part in message.parts if part.part_kind == "tool-return") - _unanswered(
        messages
    )


def _unanswered(messages: list[ModelMessage]) -> int:
    """How many calls of `messages` are still unanswered (have `NO_RESULT`)."""
    return sum(1 for message in messages for part in message.parts if getattr(part, "content", None) == NO_RESULT)


def _set_source(store: SqliteConversationStore, session_id: str, transcript: Transcript) -> None:
    if transcript.session_key is not None and transcript.format is not None:
        store.sessions.set_source(session_id, transcript.format, transcript.session_key)


def _set_times(store: SqliteConversationStore, session_id: str, messages: list[ModelMessage], *, first: bool) -> None:
    """The session's updated time is its last message's; with `first`, its created time is its first message's."""
    if times := [message.timestamp for message in messages if message.timestamp is not None]:
        with store.database.write() as db:
            if first:
                db.execute("UPDATE sessions SET created_at = ? WHERE id = ?", (timestamp(min(times)), session_id))
            db.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (timestamp(max(times)), session_id))


def _project(transcript: Transcript, default_project: Path) -> Path:
    if transcript.cwd is None:
        return default_project
    cwd = Path(transcript.cwd)
    return find_project_root(cwd) if cwd.is_dir() else cwd


def _line(outcome: Outcome) -> str:
    transcript = outcome.transcript
    if outcome.status in ("not imported", "skipped"):
        return f"{transcript.path}: {outcome.status}: {outcome.reason}"
    skipped = ", ".join(f"{count} {kind}" for kind, count in sorted(transcript.skipped.items()))
    return (
        f"{transcript.path}: {outcome.status} ({transcript.format}) as session {outcome.session_id} of "
        f"{outcome.project_dir}: {len(transcript.messages)} messages"
        + (f" ({outcome.added} new)" if outcome.added else "")
        + (f" ({outcome.completed} results added to calls stored without one)" if outcome.completed else "")
        + (f"; {outcome.reason}" if outcome.reason else "")
        + (f"; skipped {skipped}" if skipped else "")
        + (f"; {len(transcript.problems)} malformed line(s)" if transcript.problems else "")
    )
