"""`code-puppy sessions list|show|export|check|repair`: what the command line shows of stored sessions."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TextIO

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from code_puppy.agents.history_groups import describe_groups

from .catalog import SessionInfo
from .checkpoints import CheckpointLog, checkpoint_lines
from .journal import Journal
from .repair import check, repair
from .session import find_session
from .store import SqliteConversationStore


def list_sessions(store: SqliteConversationStore, project_dir: Path | None, out: TextIO) -> None:
    """One line per session, newest first: id, updated, messages, model, title."""
    sessions = store.sessions.recent(project_dir)
    if not sessions:
        where = f" in {project_dir}" if project_dir is not None else ""
        print(f"no sessions{where}", file=out)
        return
    print(f"{'ID':<10}{'UPDATED':<18}{'MSGS':>5}  {'MODEL':<28}TITLE", file=out)
    for info in sessions:
        updated = info.updated_at.astimezone().strftime("%Y-%m-%d %H:%M")
        model = (info.model or "-")[:27]
        print(
            f"{info.id[:8]:<10}{updated:<18}{info.message_count:>5}  {model:<28}{info.title or '(untitled)'}", file=out
        )


def show_session(store: SqliteConversationStore, id_or_prefix: str, out: TextIO, *, groups: bool = False) -> None:
    """A readable transcript: prompts, answers, and each tool call with the first line of its result.

    With `groups`, the history groups a history processor will see on the next turn instead, with why each is
    protected and its estimated tokens.
    """
    info = find_session(store, id_or_prefix)
    conversation = asyncio.run(store.load(info.id))
    messages = conversation.messages if conversation is not None else []
    print(f"session {info.id} · {info.project_dir} · {info.model or '-'} · {info.message_count} messages", file=out)
    if groups:
        print(f"cache epoch {info.cache_epoch} · history version {info.history_version}", file=out)
    for line in describe_groups(messages) if groups else transcript(messages):
        print(line, file=out)
    if groups:
        return
    if found := list(reversed(CheckpointLog(store.database).of_session(info.id))):
        print("\ncheckpoints (newest first):", *checkpoint_lines(found), sep="\n", file=out)
    for interrupted in Journal(store.database).read(info.id):
        print(
            "\n-- a turn that did not finish (journaled, not yet part of the history; "
            "it is recovered when the session is next continued, unless it is still running) --",
            file=out,
        )
        for line in transcript(interrupted.messages):
            print(line, file=out)


def transcript(messages: Sequence[ModelMessage]) -> list[str]:
    lines: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(message, ModelRequest) and isinstance(part, UserPromptPart):
                content = part.content if isinstance(part.content, str) else " ".join(map(str, part.content))
                lines += ["", "› " + content.replace("\n", "\n  ")]
            elif isinstance(part, SystemPromptPart):
                lines.append(f"[system] {part.content[:200]}")
            elif isinstance(part, ToolReturnPart):
                first = (part.model_response_str().strip().splitlines() or [""])[0]
                outcome = "" if part.outcome == "success" else f"{part.outcome}: "
                lines.append(f"  ↳ {outcome}{first[:120]}")
            elif isinstance(message, ModelResponse) and isinstance(part, ToolCallPart):
                lines.append(f"⚙ {part.tool_name}({part.args_as_json_str()[:120]})")
            elif isinstance(part, TextPart) and part.content.strip():
                lines += ["", part.content.strip()]
            elif isinstance(part, ThinkingPart) and part.content.strip():
                lines.append(f"(thinking) {part.content.strip()[:200]}")
    return lines


def export_session(store: SqliteConversationStore, id_or_prefix: str, out: TextIO) -> None:
    """JSON: the session's metadata and its messages in pydantic-ai's `ModelMessagesTypeAdapter` form."""
    info = find_session(store, id_or_prefix)
    conversation = asyncio.run(store.load(info.id))
    messages = conversation.messages if conversation is not None else []
    document = {
        "session": _metadata(info),
        "messages": ModelMessagesTypeAdapter.dump_python(messages, mode="json"),
    }
    json.dump(document, out, indent=2)
    out.write("\n")


def _metadata(info: SessionInfo) -> dict[str, object]:
    data = asdict(info)
    data["created_at"] = info.created_at.isoformat()
    data["updated_at"] = info.updated_at.isoformat()
    return data


def check_store(out: TextIO) -> int:
    """`sessions check`: 0 when every page of sessions.db reads back sound, 1 with SQLite's findings."""
    path, problems = _examined()
    if problems is None:
        print(f"no sessions database at {path} yet", file=out)
        return 0
    if not problems:
        print(f"{path}: ok", file=out)
        return 0
    print(f"{path} is damaged:", *(f"  {problem}" for problem in problems[:20]), sep="\n", file=out)
    print("`code-puppy sessions repair` moves it aside and keeps what can still be read", file=out)
    return 1


def repair_store(out: TextIO) -> int:
    """`sessions repair`: rebuild a damaged sessions.db from what can still be read; a sound one is left alone."""
    path, problems = _examined()
    if not problems:
        print(f"{path}: ok, nothing to repair" if problems == [] else f"no sessions database at {path}", file=out)
        return 0
    report = repair(path)
    print(f"moved the damaged database to {report.moved_to}", file=out)
    kept = f"kept {report.sessions} sessions and {report.messages} messages"
    if report.shortened_sessions:
        kept += f"; {report.shortened_sessions} of them end where a damaged page cut their history short"
    if report.lost_sessions:
        kept += f"; {report.lost_sessions} sessions could not be read at all and were left out"
    print(f"rebuilt {path}: {kept}", file=out)
    return 0


def _examined() -> tuple[Path, list[str] | None]:
    """This user's sessions.db and what `integrity_check` finds wrong with it (None: there is none)."""
    from code_puppy.paths import data_dir

    path = data_dir() / "sessions.db"
    if not path.is_file():
        return path, None
    try:
        return path, check(path)
    except sqlite3.DatabaseError as exc:
        return path, [str(exc)]
