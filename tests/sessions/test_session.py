"""Session: resume of a long session, append-only saves, a rewrite that branches and keeps the old branch."""

from __future__ import annotations

from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from code_puppy.sessions.schema import Location
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore
from tests.conftest import stored_info


def pair(i: int) -> list[ModelMessage]:
    return [ModelRequest(parts=[UserPromptPart(f"question {i}")]), ModelResponse(parts=[TextPart(f"answer {i}")])]


def entry_rows(store: SqliteConversationStore) -> int:
    with store.database.read() as db:
        return db.execute("SELECT count(*) FROM entries").fetchone()[0]


async def test_resume_of_a_10000_message_session(tmp_path: Path, location: Location) -> None:
    with SqliteConversationStore(location) as store:
        session = await Session.start(store, tmp_path, model="m")
        history = [m for i in range(5_000) for m in pair(i)]
        await session.set_message_history(history)
        info = stored_info(store, session.id)
        assert info is not None and info.message_count == 10_000
        resumed = await Session.resume(store, info, model="m")
        assert len(resumed.messages) == 10_000
        assert resumed.messages[-1].parts[0].content == "answer 4999"  # type: ignore[union-attr]
        await resumed.set_message_history([*resumed.messages, *pair(5_000)])
        assert entry_rows(store) == 10_002  # the save appended two rows, nothing rewritten


async def test_a_rewritten_history_branches_and_the_old_branch_stays(tmp_path: Path, location: Location) -> None:
    with SqliteConversationStore(location) as store:
        session = await Session.start(store, tmp_path, model="m")
        original = [m for i in range(3) for m in pair(i)]
        await session.set_message_history(original)
        summary = ModelRequest(parts=[UserPromptPart("[summary of questions 0-1]")])
        compacted = [summary, *session.messages[4:]]
        await session.set_message_history(compacted)
        record = await store.read_record(session.id)
        assert record is not None and len(record.branches) == 1
        old_branch = await store.read_history(record.branches[0])
        assert [entry.message for entry in old_branch] == original
        info = stored_info(store, session.id)
        assert info is not None
        resumed = await Session.resume(store, info, model="m")
        assert [m.parts[0].content for m in resumed.messages] == [  # type: ignore[union-attr]
            "[summary of questions 0-1]",
            "question 2",
            "answer 2",
        ]


async def test_two_writers_of_one_session_never_lose_a_turn_the_second_moves_to_a_new_session(
    tmp_path: Path, store: SqliteConversationStore
) -> None:
    first = await Session.start(store, tmp_path, model="m")
    await first.set_message_history(pair(0))
    info = stored_info(store, first.id)
    assert info is not None
    other = await Session.resume(store, info, model="m")  # another process resumed it too
    await first.set_message_history([*first.messages, *pair(1)])
    await other.set_message_history([*other.messages, *pair(2)])
    assert other.id != first.id
    assert other.notice is not None and "changed by another code-puppy process" in other.notice
    kept, moved = await store.load(first.id), await store.load(other.id)
    assert kept is not None and moved is not None
    assert [m.parts[0].content for m in kept.messages] == ["question 0", "answer 0", "question 1", "answer 1"]  # type: ignore[union-attr]
    assert [m.parts[0].content for m in moved.messages] == ["question 0", "answer 0", "question 2", "answer 2"]  # type: ignore[union-attr]
