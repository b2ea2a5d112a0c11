"""`SqliteConversationStore`: pydantic-ai's `ConversationStore` over one SQLite file shared by every process, or over
the PostgreSQL database of `[storage] url` shared by every machine."""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import TracebackType

from pydantic import ConfigDict, TypeAdapter
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from code_puppy.paths import store_location

from .catalog import SessionCatalog, record_save
from .costs import CostBook
from .runs import THIS_HOST
from .schema import NO_LIMIT, Database, Location, delete_conversation, discard_journal, timestamp
from .search import continuation, index_saved, recount_turns

__all__ = ("SqliteConversationStore", "message_adapter", "open_store")

_record_adapter = TypeAdapter(ConversationRecord)
message_adapter: TypeAdapter[ModelMessage] = TypeAdapter(
    ModelMessage, config=ConfigDict(defer_build=True, ser_json_bytes="base64", val_json_bytes="base64")
)
"""The settings of `ModelMessagesTypeAdapter`, for one message: a stored row is exactly one item of its list."""


class SqliteConversationStore(ConversationStore):
    """A [`ConversationStore`][pydantic_ai.conversation_store.ConversationStore] in a SQLite database.

    Entries are append-only rows, and a save writes its new entries, the conversation's record and its session's
    metadata in one `BEGIN IMMEDIATE` transaction (on PostgreSQL: under one advisory lock), so the revision check
    holds across processes and a killed process leaves either the whole save or none of it. `read_history` is one
    recursive query.

    `delete_record` deletes the entries no remaining conversation's history or branches reach, as
    `InMemoryConversationStore` does. The methods run the (millisecond) SQLite work inline rather than in a
    worker thread: no await splits a transaction, so a cancelled task can't leave one half-done.
    """

    def __init__(self, location: Location, *, readonly: bool = False) -> None:
        self.database = Database(location, readonly=readonly)
        self.sessions = SessionCatalog(self.database)
        """The session metadata kept beside the conversations."""
        self.costs = CostBook(self.database)
        """What each model request cost."""

    def close(self) -> None:
        self.database.close()

    def __enter__(self) -> SqliteConversationStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        with self.database.read() as db:
            row = db.execute("SELECT record FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        return None if row is None else _record_adapter.validate_json(row[0])

    async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[ConversationRecord]:
        with self.database.read() as db:
            rows = db.execute(
                """
                SELECT record FROM conversations WHERE :scope IS NULL OR scope = :scope
                ORDER BY updated_at DESC LIMIT :limit
                """,
                {"scope": scope, "limit": NO_LIMIT if limit is None else limit},
            ).fetchall()
        return [_record_adapter.validate_json(record) for (record,) in rows]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        conversation_id = record.conversation_id
        # Serialized before the write lock is taken, so other processes wait only for the SQL.
        messages = [message_adapter.dump_json(entry.message).decode() for entry in new_entries]
        record_json = _record_adapter.dump_json(record).decode()
        with self.database.write() as db:
            stored = db.execute(
                "SELECT revision, family, head_id FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
            if (stored[0] if stored is not None else None) != expected_revision:
                raise ConversationConflict(conversation_id)
            family: str | None = stored[1] if stored is not None else None
            # Depth is the number of messages up to and including an entry: a history's length is its head's depth.
            depths: dict[str | None, int] = {None: 0}
            # The stored entries this write hangs on: the parents from outside it, and the head unless it's new.
            new_ids = {entry.id for entry in new_entries}
            for anchor in {record.head_id, *(entry.parent_id for entry in new_entries)} - new_ids - {None}:
                found = db.execute("SELECT depth, family FROM entries WHERE id = ?", (anchor,)).fetchone()
                if found is None:
                    # A concurrent delete or rewrite released the entry this history continues from.
                    raise ConversationConflict(conversation_id)
                depths[anchor] = found[0]
                family = family or found[1]
            family = family or conversation_id
            for entry in new_entries:
                depths[entry.id] = depths[entry.parent_id] + 1
            db.executemany(
                "INSERT INTO entries (id, parent_id, family, depth, message) VALUES (?, ?, ?, ?, ?)",
                [
                    (entry.id, entry.parent_id, family, depths[entry.id], message)
                    for entry, message in zip(new_entries, messages, strict=True)
                ],
            )
            db.execute(
                """
                INSERT INTO conversations (id, head_id, family, scope, revision, updated_at, record)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (id) DO UPDATE SET head_id = excluded.head_id, scope = excluded.scope,
                    revision = excluded.revision, updated_at = excluded.updated_at, record = excluded.record
                """,
                (
                    conversation_id,
                    record.head_id,
                    family,
                    record.scope,
                    record.revision,
                    timestamp(record.updated_at),
                    record_json,
                ),
            )
            if db.execute("SELECT 1 FROM sessions WHERE id = ?", (conversation_id,)).fetchone() is not None:
                if stored is None:
                    index_saved(db, conversation_id, messages, forked_from=record.forked_from)
                elif new_entries:
                    added, asked = continuation(db, stored[2], record.head_id)
                    index_saved(db, conversation_id, added, forked_from=None, asked=asked)
                elif record.head_id != stored[2]:
                    recount_turns(db, conversation_id)  # rewound to an earlier message, or to none
            record_save(
                db,
                record,
                message_count=depths[record.head_id],
                new_messages=[entry.message for entry in new_entries],
            )
            # The run of this process that journaled its steps has ended in this save (or a journal this process
            # claimed to recover is now part of it).
            discard_journal(db, conversation_id, writer=(THIS_HOST, os.getpid()))

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        with self.database.write() as db:
            stored = db.execute("SELECT revision FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
            if stored is None or stored[0] != expected_revision:
                raise ConversationConflict(conversation_id)
            delete_conversation(db, conversation_id)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        with self.database.read() as db:
            row = db.execute("SELECT id, parent_id, message FROM entries WHERE id = ?", (entry_id,)).fetchone()
        if row is None:
            raise KeyError(entry_id)
        return ConversationEntry(id=row[0], parent_id=row[1], message=message_adapter.validate_json(row[2]))

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        if head_id is None or limit == 0:
            return []
        with self.database.read() as db:
            rows: list[tuple[str, str | None, str]] = db.execute(
                """
                WITH RECURSIVE chain (n, id, parent_id, message) AS (
                    SELECT 1, id, parent_id, message FROM entries WHERE id = :head
                    UNION ALL
                    SELECT chain.n + 1, entries.id, entries.parent_id, entries.message
                    FROM chain JOIN entries ON entries.id = chain.parent_id
                    WHERE :limit < 0 OR chain.n < :limit
                )
                SELECT id, parent_id, message FROM chain ORDER BY n DESC
                """,
                {"head": head_id, "limit": -1 if limit is None else limit},
            ).fetchall()
        if not rows or (rows[0][1] is not None and len(rows) != limit):
            # The head, or an entry on the way, is gone: a concurrent delete released it.
            raise KeyError(head_id)
        return [
            ConversationEntry(id=entry_id, parent_id=parent_id, message=message_adapter.validate_json(message))
            for entry_id, parent_id, message in rows
        ]


def open_store(*, readonly: bool = False) -> SqliteConversationStore:
    """The sessions store of this user: the PostgreSQL database of `[storage] url`, else `sessions.db` in the data
    directory."""
    return SqliteConversationStore(store_location(), readonly=readonly)


def build_serializers() -> None:
    """Build the (deferred) message serializer now: its first build takes ~0.1 s of schema building, which a caller
    can do in a worker thread while it waits for something else."""
    message_adapter.dump_json(ModelRequest(parts=[UserPromptPart("")]))
