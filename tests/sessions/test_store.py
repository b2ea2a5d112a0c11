"""SqliteConversationStore and the session catalog, on real SQLite files in tmp_path."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic_ai import Agent, Conversation
from pydantic_ai.conversation_store import ConversationConflict, ConversationEntry, ConversationRecord
from pydantic_ai.messages import (
    BinaryContent,
    BinaryImage,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RunUsage

from code_puppy.sessions import SessionInfo, SqliteConversationStore
from code_puppy.sessions.catalog import title_of
from code_puppy.sessions.schema import MIGRATIONS, Location, migrate
from tests.conftest import stored_info
from tests.sessions.conftest import LOCATION_ARGUMENT

REPO = Path(__file__).resolve().parents[2]


T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def turn(i: int) -> list[ModelMessage]:
    """A user prompt and the answer to it, the same for the same `i`."""
    return [
        ModelRequest(parts=[UserPromptPart(f"prompt {i}", timestamp=T0)]),
        ModelResponse(parts=[TextPart(f"answer {i}")], timestamp=T0),
    ]


def canonical(messages: list[ModelMessage]) -> list[ModelMessage]:
    """`messages` as they read back from JSON, which is what a store returns."""
    return ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(messages))


def count(store: SqliteConversationStore, table: str) -> int:
    with store.database.read() as db:
        return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


async def test_save_load_round_trip(store: SqliteConversationStore, location: Location):
    messages = [*turn(1), *turn(2)]
    conversation = Conversation(messages=messages, usage=RunUsage(requests=2, input_tokens=30, output_tokens=7))
    assert len(await store.save(conversation)) == 4

    with SqliteConversationStore(location) as other:
        loaded = await other.load(conversation.conversation_id)
    assert loaded == Conversation(
        messages=canonical(messages),
        usage=RunUsage(requests=2, input_tokens=30, output_tokens=7),
        conversation_id=conversation.conversation_id,
        revision=conversation.revision,
    )
    assert loaded is not None and loaded.new_message_index == 4
    assert await store.load("nope") is None
    assert await store.load(conversation.conversation_id, limit=3) == Conversation(
        messages=canonical(messages)[-3:],
        usage=conversation.usage,
        conversation_id=conversation.conversation_id,
        revision=conversation.revision,
    )


async def test_second_save_appends_only_new_messages(store: SqliteConversationStore):
    conversation = Conversation(messages=turn(1))
    await store.save(conversation)
    loaded = await store.load(conversation.conversation_id)
    assert loaded is not None
    loaded.messages.extend(turn(2))

    entries = await store.save(loaded)

    assert [entry.message for entry in entries] == turn(2)
    assert count(store, "entries") == 4
    assert await store.save(loaded) == []
    assert count(store, "entries") == 4


async def test_saving_a_run_result_twice_appends_once(store: SqliteConversationStore):
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(f"seen {len(messages)}")])

    agent = Agent(FunctionModel(answer))
    first = await agent.run("one")
    await store.save(first)
    loaded = await store.load(first.conversation_id)
    assert loaded is not None

    second = await agent.run("two", conversation=loaded)
    assert len(await store.save(second)) == 2
    assert await store.save(second) == []

    again = await store.load(first.conversation_id)
    assert again is not None
    assert again.messages == canonical(list(second.all_messages()))
    assert count(store, "entries") == 4


async def test_rewritten_history_branches_and_keeps_the_old_branch(store: SqliteConversationStore):
    original = [*turn(1), *turn(2), *turn(3)]
    await store.save(Conversation(conversation_id="c", messages=original))
    loaded = await store.load("c")
    assert loaded is not None
    old = await store.load_entries("c")
    assert old is not None
    # What a compaction does: keep the first prompt, summarize the middle, keep the last turn.
    summary = ModelResponse(parts=[TextPart("summary of turn 1 and 2")])
    loaded.messages = [loaded.messages[0], summary, *loaded.messages[-2:]]

    entries = await store.save(loaded)

    assert [entry.message for entry in entries] == [summary, *canonical(original)[-2:]]
    assert entries[0].parent_id == old[0].id
    current = await store.load("c")
    assert current is not None
    assert current.messages == [canonical(original)[0], summary, *canonical(original)[-2:]]
    record = await store.read_record("c")
    assert record is not None
    assert record.branches == [old[-1].id]
    assert await store.read_history(record.branches[0]) == old
    assert count(store, "entries") == 6 + 3
    assert stored_info(store, "c") is None  # no session row: the store works without one

    back = await store.branch("c", from_entry=old[-1].id, expected_revision=current.revision)
    assert back.messages == canonical(original)
    record = await store.read_record("c")
    assert record is not None
    assert record.branches == [entries[-1].id]


async def test_stale_revision_from_another_connection_conflicts(location: Location):
    with SqliteConversationStore(location) as first, SqliteConversationStore(location) as second:
        await first.save(Conversation(conversation_id="c", messages=turn(1)))
        mine = await first.load("c")
        theirs = await second.load("c")
        assert mine is not None and theirs is not None
        theirs.messages.extend(turn(2))
        await second.save(theirs)

        mine.messages.extend(turn(3))
        with pytest.raises(ConversationConflict):
            await first.save(mine)
        with pytest.raises(ConversationConflict):
            await first.save(Conversation(conversation_id="c", messages=turn(9)))

        stored = await first.load("c")
        assert stored is not None
        assert stored.messages == canonical([*turn(1), *turn(2)])
        assert count(first, "entries") == 4


async def test_write_record_checks_the_revision_inside_its_transaction(location: Location):
    with SqliteConversationStore(location) as first, SqliteConversationStore(location) as second:
        await first.save(Conversation(conversation_id="c", messages=turn(1)))
        seen = await first.read_record("c")
        assert seen is not None
        # Another process saves between this one's check in `save` and its `write_record`.
        theirs = await second.load("c")
        assert theirs is not None
        theirs.messages.extend(turn(2))
        await second.save(theirs)

        entry = ConversationEntry(parent_id=seen.head_id, message=turn(3)[0])
        late = replace(seen, head_id=entry.id, revision="late")
        with pytest.raises(ConversationConflict):
            await first.write_record(late, new_entries=[entry], expected_revision=seen.revision)
        with pytest.raises(ConversationConflict):
            await first.write_record(late, new_entries=[entry], expected_revision=None)
        assert count(first, "entries") == 4
        stored = await first.read_record("c")
        assert stored is not None and stored.revision == theirs.revision


async def test_write_record_rejects_a_head_the_store_does_not_have(store: SqliteConversationStore):
    with pytest.raises(ConversationConflict):
        await store.write_record(ConversationRecord(conversation_id="c", head_id="missing"), expected_revision=None)
    assert await store.read_record("c") is None
    with pytest.raises(KeyError):
        await store.read_history("missing")


async def test_two_sessions_in_one_database(store: SqliteConversationStore):
    a = Conversation(messages=turn(1))
    b = Conversation(messages=turn(2))
    await store.save(a)
    await store.save(b)
    a.messages.extend(turn(3))
    await store.save(a)

    loaded_a = await store.load(a.conversation_id)
    loaded_b = await store.load(b.conversation_id)
    assert loaded_a is not None and loaded_b is not None
    assert loaded_a.messages == canonical([*turn(1), *turn(3)])
    assert loaded_b.messages == canonical(turn(2))
    assert [record.conversation_id for record in await store.list_conversations()] == [
        a.conversation_id,
        b.conversation_id,
    ]


PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"


def every_part() -> list[ModelMessage]:
    return [
        ModelRequest(
            parts=[
                SystemPromptPart("You are a puppy.", timestamp=T0),
                UserPromptPart(["look at this", BinaryContent(PNG, media_type="image/png")], timestamp=T0),
            ],
            instructions="Be brief.",
        ),
        ModelResponse(
            parts=[
                ThinkingPart("hmm", signature="sig-123", provider_name="anthropic"),
                TextPart("Reading."),
                ToolCallPart("read_file", {"path": "a.py"}, tool_call_id="call-1"),
                ToolCallPart("shell", '{"command": "ls"}', tool_call_id="call-2"),
            ],
            model_name="claude",
        ),
        ModelRequest(
            parts=[
                ToolReturnPart("read_file", {"text": "x = 1", "lines": [1, 2]}, tool_call_id="call-1", timestamp=T0),
                ToolReturnPart("shell", b"\x00\xffraw", tool_call_id="call-2", timestamp=T0),
            ]
        ),
        ModelRequest(parts=[RetryFeedbackPart("try again", retry=RetryInfo("model_retry", attempt=1, max_retries=3))]),
        ModelResponse(parts=[TextPart("Done.")]),
    ]


async def test_every_part_type_round_trips(store: SqliteConversationStore, location: Location):
    messages = every_part()
    await store.save(Conversation(conversation_id="c", messages=messages))
    with SqliteConversationStore(location) as other:
        loaded = await other.load("c")
    assert loaded is not None

    assert loaded.messages == canonical(messages)
    dumped = ModelMessagesTypeAdapter.dump_json(loaded.messages)
    assert ModelMessagesTypeAdapter.dump_json(ModelMessagesTypeAdapter.validate_json(dumped)) == dumped
    # The two documented changes of a JSON round trip: an image comes back as `BinaryImage`, raw bytes as base64.
    assert loaded.messages[0].parts[1] == UserPromptPart(
        ["look at this", BinaryImage(PNG, media_type="image/png")], timestamp=T0
    )
    assert loaded.messages[2].parts[1] == ToolReturnPart("shell", "AP9yYXc=", tool_call_id="call-2", timestamp=T0)


async def test_migrations_are_applied_once_and_recorded(db_path: Path):
    def read_migrations() -> list[tuple[str, str]]:
        with sqlite3.connect(db_path) as db:
            return db.execute("SELECT name, applied_at FROM schema_migrations ORDER BY name").fetchall()

    SqliteConversationStore(db_path).close()
    applied = read_migrations()
    assert [name for name, _ in applied] == sorted(migration.__name__ for migration in MIGRATIONS)
    assert applied[0][0] == "m001_conversations"
    SqliteConversationStore(db_path).close()
    assert read_migrations() == applied

    calls: list[str] = []

    def m003_extra(db: sqlite3.Connection) -> None:
        calls.append("m003_extra")
        db.execute("CREATE TABLE extra (x)")

    db = sqlite3.connect(db_path, isolation_level=None)
    try:
        assert migrate(db, [*MIGRATIONS, m003_extra]) == ["m003_extra"]
        assert migrate(db, [*MIGRATIONS, m003_extra]) == []
    finally:
        db.close()
    assert calls == ["m003_extra"]
    assert [name for name, _ in read_migrations()] == sorted([name for name, _ in applied] + ["m003_extra"])


def test_opening_a_migrated_database_does_not_wait_for_a_writer(db_path: Path):
    SqliteConversationStore(db_path).close()
    writer = sqlite3.connect(db_path, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        SqliteConversationStore(db_path).close()
        assert time.monotonic() - started < 1
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_a_failed_migration_leaves_nothing_behind(db_path: Path):
    SqliteConversationStore(db_path).close()

    def m003_broken(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE half (x)")
        raise RuntimeError("boom")

    db = sqlite3.connect(db_path, isolation_level=None)
    try:
        with pytest.raises(RuntimeError, match="boom"):
            migrate(db, [*MIGRATIONS, m003_broken])
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "half" not in tables
        assert db.execute("SELECT count(*) FROM schema_migrations").fetchone() == (len(MIGRATIONS),)
    finally:
        db.close()


def test_title_is_the_first_prompt_on_one_line_shortened():
    long = "fix   the\nflaky test in tests/test_cli.py " + "and then some more words " * 4
    assert title_of([ModelRequest(parts=[SystemPromptPart("sys")]), *turn(1)]) == "prompt 1"
    title = title_of([ModelRequest(parts=[UserPromptPart(long)])])
    assert title == "fix the flaky test in tests/test_cli.py and then some more…"
    assert title_of([ModelRequest(parts=[UserPromptPart([BinaryContent(b"x", media_type="image/png")])])]) == ""


async def test_session_metadata_follows_saves(store: SqliteConversationStore, tmp_path: Path):
    project = tmp_path / "project"
    info = store.sessions.create(project, model="openai:gpt-5.1", session_id="s-1")
    assert info == SessionInfo(
        id=info.id,
        project_dir=str(project.resolve()),
        title="",
        model="openai:gpt-5.1",
        created_at=info.created_at,
        updated_at=info.created_at,
        input_tokens=0,
        output_tokens=0,
        requests=0,
        message_count=0,
        cache_epoch=0,
        history_version=0,
    )
    conversation = Conversation(
        conversation_id=info.id, messages=turn(1), usage=RunUsage(requests=1, input_tokens=12, output_tokens=3)
    )
    await store.save(conversation)
    conversation.messages.extend(turn(2))
    conversation.usage = RunUsage(requests=2, input_tokens=30, output_tokens=8)
    await store.save(conversation)
    record = await store.read_record(info.id)
    assert record is not None

    assert stored_info(store, info.id) == SessionInfo(
        id=info.id,
        project_dir=str(project.resolve()),
        title="prompt 1",
        model="openai:gpt-5.1",
        created_at=info.created_at,
        updated_at=record.updated_at,
        input_tokens=30,
        output_tokens=8,
        requests=2,
        message_count=4,
        cache_epoch=0,
        history_version=0,
        turns=2,
    )
    updated = store.sessions.update(info.id, model="anthropic:claude-sonnet-4-5", cache_epoch=2, history_version=5)
    assert (updated.model, updated.cache_epoch, updated.history_version, updated.title) == (
        "anthropic:claude-sonnet-4-5",
        2,
        5,
        "prompt 1",
    )
    assert stored_info(store, info.id) == updated
    with pytest.raises(KeyError):
        store.sessions.update("nope", model="x")
    with pytest.raises(ValueError, match="already exists"):
        store.sessions.create(project, session_id=info.id)


async def test_listing_finding_and_deleting_sessions(store: SqliteConversationStore, tmp_path: Path):
    here, there = tmp_path / "here", tmp_path / "there"
    for session_id, project in [("abc-1", here), ("abc-2", here), ("xyz-1", there)]:
        store.sessions.create(project, session_id=session_id)
        await store.save(Conversation(conversation_id=session_id, messages=turn(1)))
    store.sessions.create(here, session_id="abc-empty")  # not saved yet: found, not listed

    assert [info.id for info in store.sessions.recent(here)] == ["abc-2", "abc-1"]
    assert [info.id for info in store.sessions.recent()] == ["xyz-1", "abc-2", "abc-1"]
    assert [info.id for info in store.sessions.recent(limit=1)] == ["xyz-1"]
    latest = store.sessions.latest(here)
    assert latest is not None and latest.id == "abc-2"
    assert store.sessions.latest(tmp_path / "elsewhere") is None

    assert [info.id for info in store.sessions.find("abc")] == ["abc-empty", "abc-2", "abc-1"]  # ambiguous
    assert [info.id for info in store.sessions.find("abc-1")] == ["abc-1"]
    assert [info.id for info in store.sessions.find("x")] == ["xyz-1"]
    assert store.sessions.find("q") == []  # unknown
    assert store.sessions.find("") == []

    assert [info.id for info in store.sessions.find("abc-e")] == ["abc-empty"]

    assert store.sessions.delete("abc-1") is True
    assert store.sessions.delete("abc-1") is False
    assert stored_info(store, "abc-1") is None
    assert await store.load("abc-1") is None
    assert count(store, "entries") == 4

    await store.delete("abc-2")  # pydantic-ai's own delete removes the session row too
    assert [info.id for info in store.sessions.recent()] == ["xyz-1"]
    assert count(store, "entries") == 2


async def test_deleting_a_forked_conversation_keeps_the_shared_entries(store: SqliteConversationStore):
    await store.save(Conversation(conversation_id="original", messages=[*turn(1), *turn(2)]))
    fork = await store.fork("original", at=2, new_conversation_id="fork")
    fork.messages.extend(turn(3))
    await store.save(fork)
    assert count(store, "entries") == 6

    assert store.sessions.delete("original") is True
    assert count(store, "entries") == 4  # turn 2 went; turn 1, which the fork shares, stayed
    loaded = await store.load("fork")
    assert loaded is not None
    assert loaded.messages == canonical([*turn(1), *turn(3)])

    await store.delete("fork")
    assert count(store, "entries") == 0


async def test_deleting_a_fork_keeps_the_branches_its_original_left(store: SqliteConversationStore):
    await store.save(Conversation(conversation_id="original", messages=[*turn(1), *turn(2)]))
    loaded = await store.load("original")
    assert loaded is not None
    loaded.messages = turn(4)
    await store.save(loaded)
    record = await store.read_record("original")
    assert record is not None and len(record.branches) == 1
    old_branch = await store.read_history(record.branches[0])
    await store.fork("original", from_entry=old_branch[1].id, new_conversation_id="fork")

    await store.delete("fork")

    assert await store.read_history(record.branches[0]) == old_branch
    assert count(store, "entries") == 6


WRITER = """
import sys
from pathlib import Path
import anyio
from pydantic_ai import Conversation
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from code_puppy.sessions import SqliteConversationStore

async def main() -> None:
    store = SqliteConversationStore(Path(sys.argv[1]))
    store.sessions.create(Path.cwd(), session_id="crash")
    conversation = Conversation(conversation_id="crash")
    i = 0
    while True:
        i += 1
        conversation.messages += [
            ModelRequest(parts=[UserPromptPart(f"prompt {i} " + "x" * 2000)]),
            ModelResponse(parts=[TextPart(f"answer {i}")]),
        ]
        await store.save(conversation)
        print(len(conversation.messages), flush=True)

anyio.run(main)
"""


async def test_kill_9_mid_loop_leaves_a_consistent_resumable_database(db_path: Path, tmp_path: Path):
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db_path)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None
    saved = 0
    while saved < 300:
        line = writer.stdout.readline()
        assert line, "the writer died before it was killed"
        saved = int(line)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    writer.stdout.close()

    with sqlite3.connect(db_path) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []
    with SqliteConversationStore(db_path) as store:
        loaded = await store.load("crash")
        assert loaded is not None
        assert len(loaded.messages) >= saved
        assert len(loaded.messages) % 2 == 0
        assert loaded.messages[-1].parts == [TextPart(f"answer {len(loaded.messages) // 2}")]
        info = stored_info(store, "crash")
        assert info is not None and info.message_count == len(loaded.messages)


APPENDER = """
import sys
from pathlib import Path
import anyio
from pydantic_ai.conversation_store import ConversationConflict
from pydantic_ai.messages import ModelRequest, UserPromptPart
from code_puppy.sessions import SqliteConversationStore

async def main() -> None:
    store = SqliteConversationStore(LOCATION)
    for i in range(20):
        while True:
            conversation = await store.load("shared")
            assert conversation is not None
            conversation.messages.append(ModelRequest(parts=[UserPromptPart(f"{sys.argv[2]} {i}")]))
            try:
                await store.save(conversation)
                break
            except ConversationConflict:
                pass

anyio.run(main)
"""


async def test_processes_saving_one_conversation_lose_nothing(store: SqliteConversationStore, location: Location):
    await store.save(Conversation(conversation_id="shared", messages=turn(0)))
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER.replace("LOCATION", LOCATION_ARGUMENT), str(location), name],
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        for name in ("a", "b", "c")
    ]
    assert [writer.wait(timeout=60) for writer in writers] == [0, 0, 0]

    loaded = await store.load("shared")
    assert loaded is not None
    prompts = [
        str(part.content)
        for message in loaded.messages[2:]
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]
    assert len(prompts) == 60
    for name in "abc":
        assert [prompt for prompt in prompts if prompt.startswith(name)] == [f"{name} {i}" for i in range(20)]
