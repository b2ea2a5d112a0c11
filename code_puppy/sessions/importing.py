"""`code-puppy sessions import PATH…`: Claude Code transcripts and Codex rollouts into code-puppy sessions.

Each file becomes one session of the project its transcript ran in (the project root of its `cwd`, as code-puppy
finds it, when that folder exists here; the `cwd` itself otherwise). The session's id is derived from the file's own
session id (a UUID 5 of the format and that id), so importing a file again finds the session it made and adds
nothing. The session's created and updated times are those of its first and last message.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pydantic_ai import Conversation

from code_puppy.paths import find_project_root

from .schema import timestamp
from .session import Session
from .store import SqliteConversationStore
from .transcripts import Transcript, read_transcript

__all__ = ("import_paths", "session_id_for")

_NAMESPACE = uuid.UUID("6f0b1d36-58c4-4bd3-9d43-2f3b1a7c0e51")
"""Imported sessions' ids are UUID 5 names in this namespace."""


@dataclass
class Outcome:
    """What became of one file."""

    transcript: Transcript
    status: str
    """`imported`, `would import` (--dry-run), `already imported`, `not imported` (a file named that could not be),
    or `skipped` (a file found in a folder that holds no conversation: Claude Code's sub-agent files, Codex's
    history.jsonl)."""
    session_id: str | None = None
    project_dir: Path | None = None
    reason: str = ""
    """Why it was not imported."""

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
        except OSError as exc:
            outcomes.append(Outcome(Transcript(path=path), "not imported", reason=f"cannot read it: {exc.strerror}"))
            continue
        for problem in transcript.problems:
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
    if not transcript.messages:
        return Outcome(transcript, "not imported", reason="it holds no messages")
    session_id = session_id_for(transcript)
    project = _project(transcript, default_project)
    found = store.sessions.find(session_id) if store is not None else []
    if found and found[0].id == session_id:
        return Outcome(transcript, "already imported", session_id, Path(found[0].project_dir))
    if dry_run or store is None:
        return Outcome(transcript, "would import", session_id, project)
    try:
        store.sessions.create(project, session_id=session_id)
    except ValueError:  # another import of the same file got there first
        return Outcome(transcript, "already imported", session_id, project)
    session = Session(store, Conversation(conversation_id=session_id))
    session.project_dir = project
    asyncio.run(session.set_message_history(transcript.messages))
    if times := [message.timestamp for message in transcript.messages if message.timestamp is not None]:
        with store.database.write() as db:
            db.execute(
                "UPDATE sessions SET created_at = ?, updated_at = ? WHERE id = ?",
                (timestamp(min(times)), timestamp(max(times)), session_id),
            )
    return Outcome(transcript, "imported", session_id, project)


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
        + (f"; skipped {skipped}" if skipped else "")
        + (f"; {len(transcript.problems)} malformed line(s)" if transcript.problems else "")
    )
