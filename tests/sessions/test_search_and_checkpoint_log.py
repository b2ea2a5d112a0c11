"""The search index and the checkpoints log on both backends (the store tests' `store` fixture: SQLite, PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from code_puppy.sessions.checkpoints import CheckpointLog
from code_puppy.sessions.search import MARK, SearchHit, catch_up, search
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore


def turn(prompt: str, answer: str) -> list[ModelMessage]:
    return [ModelRequest(parts=[UserPromptPart(prompt)]), ModelResponse(parts=[TextPart(answer)])]


async def test_search_finds_words_phrases_and_prefixes_and_catches_up_an_unindexed_session(
    store: SqliteConversationStore, tmp_path: Path
) -> None:
    first = await Session.start(store, tmp_path, model="m")
    await first.set_message_history(turn("fix the login of code-puppy", "Looked at main.py: the token expired"))
    second = await Session.start(store, tmp_path, model="m")
    await second.set_message_history(turn("rename the tests", "renamed them"))

    def found(query: str) -> list[SearchHit]:
        return search(store.database, query, project_dir=tmp_path)

    o, c = MARK
    assert found("login") == [SearchHit(first.id, [("user", f"fix the {o}login{c} of code-puppy")])]
    ((role, line),) = found('"the token" main.py')[0].lines
    # FTS5 marks a phrase as one span, PostgreSQL each of its words: the same words are marked either way.
    assert (role, line.replace(f"{c} {o}", " ")) == ("model", f"Looked at {o}main.py{c}: {o}the token{c} expired")
    assert [hit.session_id for hit in found("renam*")] == [second.id]
    assert found('"token the"') == found("login platypus") == found("logi") == []
    assert search(store.database, "login", project_dir=tmp_path / "elsewhere") == []

    with store.database.write() as db:  # as a session stored before the index existed
        db.execute("DELETE FROM search_text WHERE session_id = ?", (second.id,))
        db.execute("UPDATE sessions SET indexed = 0, turns = 0 WHERE id = ?", (second.id,))
    assert found("renam*") == []
    assert catch_up(store.database) == 1
    assert catch_up(store.database) == 0
    assert [hit.session_id for hit in found("renam*")] == [second.id]
    assert store.sessions.find(second.id)[0].turns == 1


def test_the_checkpoints_log_records_turns_and_marks_rewinds(store: SqliteConversationStore, tmp_path: Path) -> None:
    log = CheckpointLog(store.database)
    turn_id = log.add(
        "s1", tmp_path, kind="turn", changes={"a.py": (None, ("100644", "abc"))}, prompt="add a", run_ids=["r1"]
    )
    rewind_id = log.add("s1", tmp_path, kind="rewind", changes={"a.py": (("100644", "abc"), None)}, rewinds=[turn_id])

    first, second = log.of_session("s1")
    assert (first.id, first.kind, first.prompt, first.run_ids, first.changes) == (
        turn_id,
        "turn",
        "add a",
        ("r1",),
        {"a.py": (None, ("100644", "abc"))},
    )
    assert first.rewound_at is not None and second.rewound_at is None
    assert (second.id, second.kind, second.changes) == (rewind_id, "rewind", {"a.py": (("100644", "abc"), None)})
    assert log.get(rewind_id) == second and log.get(rewind_id + 100) is None
    latest = log.latest_session(tmp_path)
    assert latest is not None and latest == ("s1", second.created_at)
    assert log.of_session("s2") == [] and log.latest_session(tmp_path / "other") is None
