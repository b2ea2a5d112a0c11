"""Session metadata kept beside each stored conversation: its project, title, model and usage."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic_ai.conversation_store import ConversationRecord
from pydantic_ai.messages import ModelMessage, ModelRequest, TextContent, UserPromptPart

from .schema import Database, delete_conversation, timestamp

__all__ = ("TITLE_LENGTH", "SessionCatalog", "SessionInfo", "record_save", "title_of")

TITLE_LENGTH = 60
"""The longest a session title gets, in characters."""


@dataclass(frozen=True)
class SessionInfo:
    """A session: one stored conversation of a project directory, with what the CLI lists it by."""

    id: str
    """The session's id, which is also its conversation's `conversation_id`."""
    project_dir: str
    """The absolute path of the project directory the session was started in."""
    title: str
    """The first user prompt on one line, shortened to `TITLE_LENGTH` characters; empty until one is saved."""
    model: str | None
    """The model the session last ran with."""
    created_at: datetime
    updated_at: datetime
    """When the conversation was last saved, or the session created if it wasn't yet."""
    input_tokens: int
    output_tokens: int
    requests: int
    message_count: int
    """The number of messages in the conversation's current history."""
    cache_epoch: int
    history_version: int


_NAMES = [field.name for field in fields(SessionInfo)]
_COLUMNS = ", ".join(_NAMES)


def _info(row: Any) -> SessionInfo:
    values = dict(zip(_NAMES, row, strict=True))
    for moment in ("created_at", "updated_at"):
        values[moment] = datetime.fromisoformat(values[moment])
    return SessionInfo(**values)


def title_of(messages: Sequence[ModelMessage], *, limit: int = TITLE_LENGTH) -> str:
    """The text of the first user prompt in `messages` with text, on one line and cut to `limit`, or `''`."""
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if not isinstance(part, UserPromptPart):
                continue
            items = [part.content] if isinstance(part.content, str) else part.content
            words = " ".join(
                item if isinstance(item, str) else item.content for item in items if isinstance(item, str | TextContent)
            ).split()
            if words:
                text = " ".join(words)
                return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
    return ""


def record_save(
    db: sqlite3.Connection, record: ConversationRecord, *, message_count: int, new_messages: Sequence[ModelMessage]
) -> None:
    """Bring the session row of `record`'s conversation, if it has one, up to date with a save being written in `db`."""
    db.execute(
        """
        UPDATE sessions SET updated_at = ?, input_tokens = ?, output_tokens = ?, requests = ?, message_count = ?,
            title = CASE WHEN title = '' THEN ? ELSE title END
        WHERE id = ?
        """,
        (
            timestamp(record.updated_at),
            record.usage.input_tokens,
            record.usage.output_tokens,
            record.usage.requests,
            message_count,
            title_of(new_messages),
            record.conversation_id,
        ),
    )


class SessionCatalog:
    """The sessions in a database: create, update, find, list and delete them.

    A save of a session's conversation updates its usage, message count, `updated_at` and, until it has one, its
    title, in the same transaction: so create a session before its conversation's first save. Until that save or
    the start of its first run's journal, `find` sees the session but `recent` and `latest` don't.
    """

    def __init__(self, database: Database) -> None:
        self._database = database

    def create(self, project_dir: Path, *, session_id: str, model: str | None = None) -> SessionInfo:
        """Record a session of `project_dir` under `session_id`.

        Raises:
            ValueError: If a session with `session_id` exists.
        """
        now = timestamp(datetime.now(UTC))
        # Not synced: the save that follows syncs the log, this row with it; a power cut before that loses only an
        # empty session. One fsync less under the write lock that concurrent agents share.
        with self._database.write(durable=False) as db:
            row = db.execute(
                f"""
                INSERT INTO sessions (id, project_dir, model, created_at, updated_at) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (id) DO NOTHING RETURNING {_COLUMNS}
                """,
                (session_id, str(project_dir.resolve()), model, now, now),
            ).fetchone()
        if row is None:
            raise ValueError(f"Session {session_id!r} already exists.")
        return _info(row)

    def update(
        self,
        session_id: str,
        *,
        model: str | None = None,
        title: str | None = None,
        cache_epoch: int | None = None,
        history_version: int | None = None,
    ) -> SessionInfo:
        """Set the fields given; the others, and `updated_at`, stay as they are.

        Raises:
            KeyError: If there is no such session.
        """
        with self._database.write() as db:
            row = db.execute(
                f"""
                UPDATE sessions SET model = coalesce(?, model), title = coalesce(?, title),
                    cache_epoch = coalesce(?, cache_epoch), history_version = coalesce(?, history_version)
                WHERE id = ? RETURNING {_COLUMNS}
                """,
                (model, title, cache_epoch, history_version, session_id),
            ).fetchone()
        if row is None:
            raise KeyError(session_id)
        return _info(row)

    def find(self, id_or_prefix: str) -> list[SessionInfo]:
        """The session with this id, or those whose id starts with it, newest first: none, one, or ambiguous."""
        if not id_or_prefix:
            return []
        with self._database.read() as db:
            rows = db.execute(
                f"""
                SELECT {_COLUMNS} FROM sessions WHERE substr(id, 1, length(:id)) = :id
                ORDER BY id = :id DESC, updated_at DESC
                """,
                {"id": id_or_prefix},
            ).fetchall()
        return [_info(rows[0])] if rows and rows[0][0] == id_or_prefix else [_info(row) for row in rows]

    def recent(self, project_dir: Path | None = None, *, limit: int | None = None) -> list[SessionInfo]:
        """The sessions of `project_dir`, or of every project, with saved messages or a journaled turn (a prompt was
        submitted), most recently updated first."""
        project = None if project_dir is None else str(project_dir.resolve())
        with self._database.read() as db:
            rows = db.execute(
                f"""
                SELECT {_COLUMNS} FROM sessions
                WHERE (message_count > 0 OR id IN (SELECT session_id FROM journals))
                    AND (:project IS NULL OR project_dir = :project)
                ORDER BY updated_at DESC, created_at DESC, id DESC LIMIT :limit
                """,
                {"project": project, "limit": -1 if limit is None else limit},
            ).fetchall()
        return [_info(row) for row in rows]

    def latest(self, project_dir: Path) -> SessionInfo | None:
        """The most recently updated session of `project_dir`, the one `--continue` resumes."""
        sessions = self.recent(project_dir, limit=1)
        return sessions[0] if sessions else None

    def delete(self, session_id: str) -> bool:
        """Delete a session with its conversation and the entries no other conversation shares; whether it existed."""
        with self._database.write() as db:
            return delete_conversation(db, session_id)
