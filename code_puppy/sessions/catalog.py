"""Session metadata kept beside each stored conversation: its project, title, model and usage."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic_ai.conversation_store import ConversationRecord
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from code_puppy.mentions import typed_text
from code_puppy.terminal_text import CONTROL_CHARACTERS

from .schema import NO_LIMIT, Connection, Database, delete_conversation, timestamp

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
    name: str | None = None
    """What the user called it (`sessions rename`, `/rename`, `--name`); unique, and `-r NAME` resumes it."""
    archived_at: datetime | None = None
    """When it was archived: hidden from lists, pickers and `-c` until unarchived."""
    turns: int = 0
    """User prompts the model answered in the session (0 until an older session is indexed: `indexed`)."""
    indexed: bool = True
    """Whether its prompts and answers are in the search index (sessions stored before it existed: not yet)."""

    @property
    def failed(self) -> bool:
        """Whether it holds prompts and every run of it failed before the model answered (a refused key, a server
        down): left out of lists unless asked for, kept so that what the user typed is not lost."""
        return self.indexed and self.turns == 0 and self.message_count > 0

    @property
    def label(self) -> str:
        """Its name, else its title, else `(untitled)`."""
        return self.name or self.title or "(untitled)"


_NAMES = [field.name for field in fields(SessionInfo)]
_COLUMNS = ", ".join(_NAMES)
_ADDED_LATER = {"name": "NULL", "archived_at": "NULL", "turns": "0", "indexed": "0"}
"""The columns of migration `m007_finding_sessions`, with what a store opened read-only without it reads as."""


def _info(row: Any) -> SessionInfo:
    values = dict(zip(_NAMES, row, strict=True))
    for moment in ("created_at", "updated_at", "archived_at"):
        if values[moment] is not None:
            values[moment] = datetime.fromisoformat(values[moment])
    values["indexed"] = bool(values["indexed"])
    return SessionInfo(**values)


def check_name(name: str) -> None:
    """Raises `ValueError` for a session name a terminal would not show as it is."""
    if CONTROL_CHARACTERS.search(name):
        raise ValueError("a session name cannot hold control characters (escape sequences, newlines, tabs)")


def title_of(messages: Sequence[ModelMessage], *, limit: int = TITLE_LENGTH) -> str:
    """The text of the first user prompt in `messages` with text, on one line and cut to `limit`, or `''`."""
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if not isinstance(part, UserPromptPart):
                continue
            words = typed_text(part.content).split()
            if words:
                text = " ".join(words)
                return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
    return ""


def record_save(
    db: Connection, record: ConversationRecord, *, message_count: int, new_messages: Sequence[ModelMessage]
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
        self._table: str | None = None

    @property
    def table(self) -> str:
        """What to select sessions from: the table, or, in a store opened read-only before its latest migrations,
        the table with the columns it lacks filled in."""
        if self._table is None and self._database.postgres:
            self._table = "sessions"  # always migrated when opened
        if self._table is None:
            with self._database.read() as db:
                have = {row[1] for row in db.execute("PRAGMA table_info(sessions)")}
            missing = {name: value for name, value in _ADDED_LATER.items() if name not in have}
            columns = ", ".join(f"{missing[name]} AS {name}" if name in missing else name for name in _NAMES)
            self._table = f"(SELECT {columns} FROM sessions) AS sessions" if missing else "sessions"
        return self._table

    def create(
        self, project_dir: Path, *, session_id: str, model: str | None = None, name: str | None = None, title: str = ""
    ) -> SessionInfo:
        """Record a session of `project_dir` under `session_id`.

        Raises:
            ValueError: If a session with `session_id` exists, or another is called `name`.
        """
        now = timestamp(datetime.now(UTC))
        # Not synced: the save that follows syncs the log, this row with it; a power cut before that loses only an
        # empty session. One fsync less under the write lock that concurrent agents share.
        with self._database.write(durable=False) as db:
            self._check_name_free(db, name, session_id)
            row = db.execute(
                f"""
                INSERT INTO sessions (id, project_dir, model, created_at, updated_at, name, title, indexed)
                VALUES (?, ?, ?, ?, ?, ?, ?, 1)
                ON CONFLICT (id) DO NOTHING RETURNING {_COLUMNS}
                """,
                (session_id, str(project_dir.resolve()), model, now, now, name, title),
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

    def rename(self, session_id: str, name: str | None) -> SessionInfo:
        """Call the session `name` (None: no name).

        Raises:
            KeyError: If there is no such session.
            ValueError: If another session is called `name`.
        """
        with self._database.write() as db:
            self._check_name_free(db, name, session_id)
            row = db.execute(f"UPDATE sessions SET name = ? WHERE id = ? RETURNING {_COLUMNS}", (name, session_id))
            found = row.fetchone()
        if found is None:
            raise KeyError(session_id)
        return _info(found)

    @staticmethod
    def _check_name_free(db: Connection, name: str | None, session_id: str) -> None:
        if name is None:
            return
        check_name(name)
        taken = db.execute("SELECT id FROM sessions WHERE name = ? AND id != ?", (name, session_id)).fetchone()
        if taken is not None:
            raise ValueError(f"another session ({taken[0][:8]}) is already called {name!r}")

    def archive(self, session_id: str, *, archived: bool = True) -> SessionInfo:
        """Hide the session from lists, pickers and `-c` (or show it again); its `archived_at` stays if it was.

        Raises:
            KeyError: If there is no such session.
        """
        moment = timestamp(datetime.now(UTC)) if archived else None
        with self._database.write() as db:
            row = db.execute(
                f"""
                UPDATE sessions SET archived_at = CASE WHEN ? THEN coalesce(archived_at, ?) END
                WHERE id = ? RETURNING {_COLUMNS}
                """,
                (archived, moment, session_id),
            ).fetchone()
        if row is None:
            raise KeyError(session_id)
        return _info(row)

    def find(self, reference: str) -> list[SessionInfo]:
        """The session `reference` names: an exact id, else an exact name, else the sessions whose id starts with it,
        newest first (none, one, or ambiguous); else an imported session by its id in the tool it came from, exact,
        else as a prefix. Archived sessions are found too."""
        if not reference:
            return []
        with self._database.read() as db:
            rows = db.execute(
                f"""
                SELECT {_COLUMNS} FROM {self.table}
                WHERE id = :ref OR name = :ref OR substr(id, 1, length(:ref)) = :ref
                ORDER BY id = :ref DESC, (name IS NOT NULL AND name = :ref) DESC, updated_at DESC
                """,
                {"ref": reference},
            ).fetchall()
        found = [_info(row) for row in rows]
        if found and reference in (found[0].id, found[0].name):
            return found[:1]
        return found or self._find_source(reference)

    def _find_source(self, reference: str) -> list[SessionInfo]:
        """The imported sessions whose id in the tool they came from is `reference`, else starts with it."""
        with self._database.read() as db, contextlib.suppress(sqlite3.OperationalError):  # a store before m008
            rows = db.execute(
                f"""
                SELECT {_COLUMNS}, source_id = :ref FROM {self.table} JOIN session_sources ON session_id = id
                WHERE source_id = :ref OR substr(source_id, 1, length(:ref)) = :ref
                ORDER BY source_id = :ref DESC, updated_at DESC
                """,
                {"ref": reference},
            ).fetchall()
            exact = [_info(row[:-1]) for row in rows if row[-1]]
            return exact[:1] or [_info(row[:-1]) for row in rows]
        return []

    def source(self, session_id: str) -> tuple[str, str] | None:
        """The tool an imported session came from and its id there; None for a session of code-puppy's own."""
        with self._database.read() as db, contextlib.suppress(sqlite3.OperationalError):  # a store before m008
            query = "SELECT tool, source_id FROM session_sources WHERE session_id = ?"
            row = db.execute(query, (session_id,)).fetchone()
            return None if row is None else (row[0], row[1])
        return None

    def set_source(self, session_id: str, tool: str, source_id: str) -> None:
        """Record the id session `session_id` has in `tool`, the tool it was imported from."""
        with self._database.write() as db:
            db.execute(
                """
                INSERT INTO session_sources (session_id, tool, source_id) VALUES (?, ?, ?)
                ON CONFLICT (session_id) DO UPDATE SET tool = excluded.tool, source_id = excluded.source_id
                """,
                (session_id, tool, source_id),
            )

    def recent(
        self,
        project_dir: Path | None = None,
        *,
        limit: int | None = None,
        archived: bool = False,
        failed: bool = True,
    ) -> list[SessionInfo]:
        """The sessions of `project_dir`, or of every project, with saved messages, a journaled turn (a prompt was
        submitted) or a saved history rewound to none, most recently updated first; the archived ones instead with
        `archived`; without the `failed` ones unless `failed`."""
        project = None if project_dir is None else str(project_dir.resolve())
        with self._database.read() as db:
            rows = db.execute(
                f"""
                SELECT {_COLUMNS} FROM {self.table}
                WHERE (
                    message_count > 0 OR id IN (SELECT session_id FROM journals) OR id IN (SELECT id FROM conversations)
                )
                    AND (:project IS NULL OR project_dir = :project) AND (archived_at IS NOT NULL) = :archived
                    AND (:failed OR NOT (indexed <> 0 AND turns = 0 AND message_count > 0))
                ORDER BY updated_at DESC, created_at DESC, id DESC LIMIT :limit
                """,
                {
                    "project": project,
                    "limit": NO_LIMIT if limit is None else limit,
                    "archived": archived,
                    "failed": failed,
                },
            ).fetchall()
        return [_info(row) for row in rows]

    def latest(self, project_dir: Path) -> SessionInfo | None:
        """The most recently updated session of `project_dir` not archived, the one `--continue` resumes."""
        sessions = self.recent(project_dir, limit=1)
        return sessions[0] if sessions else None

    def delete(self, session_id: str) -> bool:
        """Delete a session with its conversation and the entries no other conversation shares; whether it existed."""
        with self._database.write() as db:
            return delete_conversation(db, session_id)
