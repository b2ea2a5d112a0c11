"""Recovering what a dead process journaled (issue 10.2): once, never twice, never onto a history it did not see."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from code_puppy.run.history_persistence import recover_interrupted_turn
from code_puppy.sessions.journal import Journal
from code_puppy.sessions.runs import process_started
from code_puppy.sessions.schema import Database, Location
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore
from tests.conftest import stored_info
from tests.sessions.conftest import LOCATION_ARGUMENT

DEAD_WRITER = """
import asyncio, sys
from pathlib import Path
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore

async def main():
    with SqliteConversationStore(LOCATION) as store:
        (info,) = store.sessions.find(sys.argv[2])
        session = await Session.resume(store, info, model="test")
        if len(sys.argv) > 3:  # another process saves the session after this one loaded it
            other = await Session.resume(store, info, model="test")
            await other.set_message_history([*other.messages, *turn("saved elsewhere")])
        journal = session.journal
        journal_id, current = session.begin_run(journal, "r-dead", "interrupted question")
        history = [*session.messages] if not current else []
        history += [ModelRequest(parts=[UserPromptPart("interrupted question")], run_id="r-dead"),
                    ModelResponse(parts=[TextPart("half an answer")], run_id="r-dead")]
        journal.append(journal_id, history)
        print("current" if current else "stale")

def turn(text):
    return [ModelRequest(parts=[UserPromptPart(text)]), ModelResponse(parts=[TextPart(text + " answered")])]

asyncio.run(main())
"""
"""Journals a turn of a session the way a run does, then exits without saving: a process that died mid-turn."""


def turn(text: str) -> list[ModelMessage]:
    return [ModelRequest(parts=[UserPromptPart(text)]), ModelResponse(parts=[TextPart(f"{text} answered")])]


def texts(messages: list[ModelMessage]) -> list[str]:
    return [
        str(part.content)
        for message in messages
        for part in message.parts
        if isinstance(part, UserPromptPart | TextPart)
    ]


async def seeded(store: SqliteConversationStore, project: Path) -> Session:
    session = await Session.start(store, project, model="test")
    await session.set_message_history(turn("first"))
    return session


def die_journaling(location: Location, session_id: str, *, stale: bool = False) -> str:
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(DEAD_WRITER).replace("LOCATION", LOCATION_ARGUMENT),
            str(location),
            session_id,
            *(["stale"] if stale else []),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return completed.stdout.strip()


async def test_a_journal_is_recovered_once_by_one_of_two_sessions(
    store: SqliteConversationStore, location: Location, project: Path
) -> None:
    session = await seeded(store, project)
    assert die_journaling(location, session.id) == "current"
    info = stored_info(store, session.id)
    assert info is not None
    first, second = [await Session.resume(store, info, model="test") for _ in range(2)]
    assert await recover_interrupted_turn(first) == "recovered an interrupted turn: 2 steps"
    assert await recover_interrupted_turn(second) is None  # claimed and deleted with the save that recovered it
    assert await recover_interrupted_turn(first) is None
    assert texts(first.messages) == ["first", "first answered", "interrupted question", "half an answer"]
    assert [s.id for s in store.sessions.recent(project)] == [session.id]  # no second copy anywhere


async def test_a_claimed_journal_whose_recovery_died_is_recovered_again_whole(
    store: SqliteConversationStore, location: Location, project: Path
) -> None:
    session = await seeded(store, project)
    die_journaling(location, session.id)
    claimer = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from code_puppy.sessions.journal import Journal
        from code_puppy.sessions.schema import Database
        journal = Journal(Database(LOCATION))
        (turn,) = journal.read(sys.argv[2])
        assert journal.claim(turn, into=sys.argv[2])
        """
    )  # claims, then dies before its save: the journal is now a dead process's again
    subprocess.run(
        [sys.executable, "-c", claimer.replace("LOCATION", LOCATION_ARGUMENT), str(location), session.id], check=True
    )
    info = stored_info(store, session.id)
    assert info is not None
    resumed = await Session.resume(store, info, model="test")
    assert await recover_interrupted_turn(resumed) == "recovered an interrupted turn: 2 steps"
    assert texts(resumed.messages)[-2:] == ["interrupted question", "half an answer"]


async def test_a_run_that_began_on_a_stale_history_is_recovered_as_its_own_session(
    store: SqliteConversationStore, location: Location, project: Path
) -> None:
    session = await seeded(store, project)
    assert die_journaling(location, session.id, stale=True) == "stale"
    info = stored_info(store, session.id)
    assert info is not None
    resumed = await Session.resume(store, info, model="test")
    note = await recover_interrupted_turn(resumed)
    assert note is not None and "went on in another process" in note
    assert texts(resumed.messages) == ["first", "first answered", "saved elsewhere", "saved elsewhere answered"]
    (sibling,) = [s for s in store.sessions.recent(project) if s.id != session.id]
    loaded = await store.load(sibling.id)
    assert loaded is not None
    # The interrupted turn with the history it saw, not spliced onto the one saved elsewhere.
    assert texts(loaded.messages) == ["first", "first answered", "interrupted question", "half an answer"]


@pytest.mark.parametrize("damage", ["UPDATE journal_entries SET message = '{not json'", "DELETE FROM journal_entries"])
async def test_a_journal_that_does_not_read_back_is_a_store_error_naming_the_file(
    store: SqliteConversationStore, location: Location, project: Path, damage: str
) -> None:
    from code_puppy.errors import StoreError

    session = await seeded(store, project)
    die_journaling(location, session.id)
    with store.database.write() as db:
        db.execute(damage)
    info = stored_info(store, session.id)
    assert info is not None
    resumed = await Session.resume(store, info, model="test")
    if damage.startswith("DELETE"):  # no rows left: only the prompt the header keeps
        assert await recover_interrupted_turn(resumed) == "recovered an interrupted turn: 1 step"
        return
    with pytest.raises(StoreError, match=f"^{location} is damaged"):
        await recover_interrupted_turn(resumed)


async def test_a_dead_writer_whose_pid_was_reused_is_recovered(
    store: SqliteConversationStore, location: Location, project: Path
) -> None:
    session = await seeded(store, project)
    die_journaling(location, session.id)
    reuser = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with store.database.write() as db:  # a later process got the dead writer's pid; it started at another time
            db.execute("UPDATE journals SET pid = ?", (reuser.pid,))
        info = stored_info(store, session.id)
        assert info is not None
        resumed = await Session.resume(store, info, model="test")
        (interrupted,) = Journal(store.database).read(session.id)
        assert interrupted.pid == reuser.pid and interrupted.orphaned

        assert await recover_interrupted_turn(resumed) == "recovered an interrupted turn: 2 steps"
    finally:
        reuser.kill()
        reuser.wait()
    assert texts(resumed.messages) == ["first", "first answered", "interrupted question", "half an answer"]


async def test_a_journal_whose_writer_runs_is_never_taken(
    store: SqliteConversationStore, location: Location, project: Path
) -> None:
    session = await seeded(store, project)
    die_journaling(location, session.id)
    with store.database.write() as db:  # the writer is alive: this very process, as it started
        db.execute("UPDATE journals SET pid = ?, pid_started = ?", (os.getpid(), process_started(os.getpid())))
    info = stored_info(store, session.id)
    assert info is not None
    resumed = await Session.resume(store, info, model="test")
    assert not Journal(store.database).read(session.id)[0].orphaned
    assert await recover_interrupted_turn(resumed) is None
    assert texts(resumed.messages) == ["first", "first answered"]


@pytest.mark.parametrize("writer", ["dead", "its pid reused by the claimers"])
async def test_of_two_readers_of_one_orphaned_journal_only_the_first_claim_wins(
    store: SqliteConversationStore, location: Location, project: Path, writer: str
) -> None:
    session = await seeded(store, project)
    die_journaling(location, session.id)
    if writer != "dead":  # the claimers' own pid, from a process that started long before them
        with store.database.write() as db:
            db.execute("UPDATE journals SET pid = ?, pid_started = '1'", (os.getpid(),))
    other = Database(location)  # a second reader's connection
    try:
        (mine,) = Journal(store.database).read(session.id)
        (theirs,) = Journal(other).read(session.id)
        assert mine.orphaned and theirs.orphaned

        assert Journal(other).claim(theirs, into=session.id)
        assert not Journal(store.database).claim(mine, into=session.id)
        assert not Journal(other).claim(theirs, into=session.id)  # claimed once: it is no dead process's any more
    finally:
        other.close()
    (claimed,) = Journal(store.database).read(session.id)
    assert (claimed.pid, claimed.pid_started, claimed.orphaned) == (os.getpid(), process_started(os.getpid()), False)


async def test_a_journal_of_another_host_is_never_taken(
    store: SqliteConversationStore, location: Location, project: Path
) -> None:
    session = await seeded(store, project)
    die_journaling(location, session.id)
    with store.database.write() as db:  # a container or machine sharing the store: its pids are not ours to judge
        db.execute("UPDATE journals SET host = 'another machine'")
    info = stored_info(store, session.id)
    assert info is not None
    resumed = await Session.resume(store, info, model="test")
    (interrupted,) = Journal(store.database).read(session.id)
    assert not interrupted.orphaned
    assert await recover_interrupted_turn(resumed) is None


async def test_a_journal_with_only_finished_tool_results_reads_back_prompt_first(
    store: SqliteConversationStore, project: Path
) -> None:
    session = await seeded(store, project)
    journal = session.journal
    assert journal is not None
    # The model's response could not be journaled (a full disk, for a moment), the tool's result could.
    journal_id, current = session.begin_run(journal, "r-1", "a question")
    journal.pending(journal_id, ModelRequest(parts=[UserPromptPart("a result")], run_id="r-1"))

    (turn,) = journal.read(session.id)

    assert current and texts(turn.messages) == ["a question", "a result"]
    journal.append(journal_id, [ModelRequest(parts=[UserPromptPart("a question")], run_id="r-1")])
    (turn,) = journal.read(session.id)
    assert texts(turn.messages) == ["a question"]  # a message row supersedes the pending rows and the prompt
