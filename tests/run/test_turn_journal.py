"""`TurnJournal` in a real agent run over a real session store: what is journaled at each step, as the model sees it
happen (the scripted model reads the journal back before it answers)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from code_puppy.run.deps import RunDeps
from code_puppy.run.history_persistence import HistoryPersistence
from code_puppy.run.turn_journal import TurnJournal
from code_puppy.sessions.journal import InterruptedTurn
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore
from tests.conftest import stored_info
from tests.scripted_model import Reply, scripted


def shown(messages: list[ModelMessage]) -> list[str]:
    """Each part of `messages` as `kind:content`: `user:…`, `text:…`, `call:NAME`, `return:NAME=…`."""
    found: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                found.append(f"user:{part.content}")
            elif isinstance(part, TextPart):
                found.append(f"text:{part.content}")
            elif isinstance(part, ToolCallPart):
                found.append(f"call:{part.tool_name}")
            elif isinstance(part, ToolReturnPart):
                found.append(f"return:{part.tool_name}={part.content}")
    return found


def earlier_turn(text: str) -> list[ModelMessage]:
    return [ModelRequest(parts=[UserPromptPart(text)]), ModelResponse(parts=[TextPart(f"{text} answered")])]


@dataclass
class Journaled:
    """What the session's journal holds each time the model is asked (read back from the store)."""

    session: Session
    seen: list[list[InterruptedTurn]]

    def reply(self, reply: Reply) -> Any:
        def step(messages: list[ModelMessage], info: AgentInfo) -> Reply:
            journal = self.session.journal
            assert journal is not None
            self.seen.append(journal.read(self.session.id))
            return reply

        return step

    def at(self, request: int) -> tuple[bool, list[str]]:
        """Whether the journal of request `request` (0-based) is a snapshot, and its messages."""
        (turn,) = self.seen[request]
        return turn.snapshot, shown(turn.messages)


def agent(model: Any, *extra: AbstractCapability[Any]) -> Agent[RunDeps, str]:
    built = Agent(model, deps_type=RunDeps, capabilities=[*extra, TurnJournal(), HistoryPersistence()])

    @built.tool_plain
    def echo(text: str) -> str:
        """Say `text` back."""
        return f"echo {text}"

    return built


@pytest.fixture
async def session(store: SqliteConversationStore, project: Path) -> Session:
    started = await Session.start(store, project, model="test")
    await started.set_message_history(earlier_turn("first"))
    return started


async def test_each_step_is_journaled_as_it_completes_and_the_save_removes_the_journal(
    store: SqliteConversationStore, session: Session
) -> None:
    journaled = Journaled(session, [])
    model = scripted(
        journaled.reply([ToolCallPart("echo", {"text": "a"}, tool_call_id="c1")]),
        journaled.reply([ToolCallPart("echo", {"text": "b"}, tool_call_id="c2")]),
        journaled.reply("done"),
    )

    revision = session.conversation.revision

    result = await agent(model.model).run("second", message_history=session.messages, deps=RunDeps(session))

    # Only what the run added: the history it continued is stored already.
    assert journaled.at(0) == (False, ["user:second"])
    assert journaled.at(1) == (False, ["user:second", "call:echo", "return:echo=echo a"])
    assert journaled.at(2) == (
        False,
        ["user:second", "call:echo", "return:echo=echo a", "call:echo", "return:echo=echo b"],
    )
    (turn,) = journaled.seen[0]
    assert (turn.run_id, turn.base_revision, turn.orphaned) == (result.run_id, revision, False)  # alive: this process
    assert turn.base_head is not None
    journal = session.journal
    assert journal is not None and journal.read(session.id) == []  # saved with the run: nothing left to recover
    assert shown(session.messages)[:2] == ["user:first", "text:first answered"]


async def test_a_run_begun_on_a_stale_history_journals_all_of_it(
    store: SqliteConversationStore, session: Session
) -> None:
    info = stored_info(store, session.id)
    assert info is not None
    elsewhere = await Session.resume(store, info, model="test")  # another process goes on with the session
    await elsewhere.set_message_history([*elsewhere.messages, *earlier_turn("meanwhile")])
    journaled = Journaled(session, [])
    model = scripted(
        journaled.reply([ToolCallPart("echo", {"text": "a"}, tool_call_id="c1")]),
        journaled.reply("done"),
    )

    await agent(model.model).run("second", message_history=session.messages, deps=RunDeps(session))

    (turn,) = journaled.seen[0]
    assert (turn.snapshot, turn.base_head) == (True, None)
    assert journaled.at(1) == (
        True,
        ["user:first", "text:first answered", "user:second", "call:echo", "return:echo=echo a"],
    )


@dataclass
class Rewrite(AbstractCapability[Any]):
    """Rewrites the run's history before its second request, as compaction or a history processor does."""

    how: str
    requests: int = 0

    async def before_model_request(self, ctx: RunContext[Any], request_context: Any) -> Any:
        self.requests += 1
        if self.requests == 2:
            if self.how == "keep the last exchange":
                del ctx.messages[:-2]
            elif self.how == "summarize the first message":  # the length and the last earlier message kept
                ctx.messages[0] = ModelRequest(parts=[UserPromptPart("summary")])
            else:  # "annotate a response": one of the run's own messages replaced, the length kept
                call = ToolCallPart("echo", {"text": "a"}, tool_call_id="c1")
                ctx.messages[-2] = ModelResponse(parts=[TextPart("annotated"), call])
        return request_context


FIRST = ["user:first", "text:first answered"]
RUN = ["user:second", "call:echo"]
A = ["return:echo=echo a"]
LATER = ["call:echo", "return:echo=echo b"]


@pytest.mark.parametrize(
    ("how", "rewritten"),
    [
        ("keep the last exchange", ["call:echo", *A, *LATER]),
        ("summarize the first message", ["user:summary", FIRST[1], *RUN, *A, *LATER]),
        ("annotate a response", [*FIRST, "user:second", "text:annotated", "call:echo", *A, *LATER]),
    ],
)
async def test_a_history_rewritten_mid_run_is_journaled_whole(
    store: SqliteConversationStore, session: Session, how: str, rewritten: list[str]
) -> None:
    journaled = Journaled(session, [])
    model = scripted(
        journaled.reply([ToolCallPart("echo", {"text": "a"}, tool_call_id="c1")]),
        journaled.reply([ToolCallPart("echo", {"text": "b"}, tool_call_id="c2")]),
        journaled.reply("done"),
    )

    await agent(model.model, Rewrite(how)).run("second", message_history=session.messages, deps=RunDeps(session))

    assert journaled.at(1) == (False, [*RUN, "return:echo=echo a"])
    assert journaled.at(2) == (True, rewritten)  # before the third request: the history as rewritten, whole


@pytest.mark.parametrize("sink", [False, True], ids=["stderr", "the turn's sink"])
async def test_a_journal_that_cannot_be_written_is_said_once_and_the_run_goes_on(
    store: SqliteConversationStore, session: Session, capsys: pytest.CaptureFixture[str], sink: bool
) -> None:
    """Said on stderr, or by the turn's sink when it has one (in the chat a line on stderr would land in the middle of
    the screen)."""
    with store.database.write() as db:  # every step refused, as a full disk would
        db.execute("CREATE TRIGGER refuse BEFORE INSERT ON journal_entries BEGIN SELECT RAISE(ABORT, 'full'); END")
    model = scripted(
        [ToolCallPart("echo", {"text": "a"}, tool_call_id="c1")],
        [ToolCallPart("echo", {"text": "b"}, tool_call_id="c2")],
        "done",
    )
    warnings: list[str] = []

    deps = RunDeps(session, warn=warnings.append if sink else None)
    result = await agent(model.model).run("second", message_history=session.messages, deps=deps)

    assert result.output == "done"
    line = "could not journal this turn (full); it is saved when it ends"
    assert (capsys.readouterr().err, warnings) == (("", [line]) if sink else (f"code-puppy: {line}\n", []))
    assert shown(session.messages)[-1] == "text:done"


async def test_a_run_without_a_stored_session_journals_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    model = scripted([ToolCallPart("echo", {"text": "a"}, tool_call_id="c1")], "done")
    result = await agent(model.model).run("hi", deps=RunDeps(Session.in_memory()))
    assert result.output == "done" and capsys.readouterr().err == ""


async def test_a_journal_that_cannot_begin_is_said_once_and_the_run_goes_on(
    store: SqliteConversationStore, session: Session, capsys: pytest.CaptureFixture[str]
) -> None:
    with store.database.write() as db:
        db.execute("CREATE TRIGGER refuse BEFORE INSERT ON journals BEGIN SELECT RAISE(ABORT, 'full'); END")
    model = scripted([ToolCallPart("echo", {"text": "a"}, tool_call_id="c1")], "done")

    result = await agent(model.model).run("second", message_history=session.messages, deps=RunDeps(session))

    assert result.output == "done"
    assert capsys.readouterr().err == "code-puppy: could not journal this turn (full); it is saved when it ends\n"


SAVER = """
import asyncio, sys
from pathlib import Path
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore

async def main():
    with SqliteConversationStore(Path(sys.argv[1])) as store:
        (info,) = store.sessions.find(sys.argv[2])
        session = await Session.resume(store, info, model="test")
        turn = [ModelRequest(parts=[UserPromptPart("meanwhile")]), ModelResponse(parts=[TextPart("answered")])]
        await session.set_message_history([*session.messages, *turn])

asyncio.run(main())
"""
"""Another process: resumes the session and saves a turn of its own."""


async def test_a_run_whose_session_went_on_elsewhere_moves_its_journal_and_leaves_none_behind(
    store: SqliteConversationStore, session: Session, db_path: Path
) -> None:
    journal = session.journal
    assert journal is not None

    async def answer(messages: list[ModelMessage], info_: AgentInfo) -> AsyncIterator[str]:
        saver = await asyncio.create_subprocess_exec(sys.executable, "-c", SAVER, str(db_path), session.id)
        assert await saver.wait() == 0  # another process went on with the session meanwhile
        assert len(journal.read(session.id)) == 1
        yield "done"

    old_id = session.id
    model = FunctionModel(stream_function=answer)
    await agent(model).run("second", message_history=session.messages, deps=RunDeps(session))

    assert session.id != old_id and session.notice is not None  # the run's history went on as a new session
    assert journal.read(old_id) == [] and journal.read(session.id) == []
    assert shown(session.messages) == ["user:first", "text:first answered", "user:second", "text:done"]


async def test_a_new_session_is_listed_under_its_prompt_from_its_first_step(
    store: SqliteConversationStore, project: Path
) -> None:
    older = await Session.start(store, project, model="test")
    await older.set_message_history(earlier_turn("an older session"))
    fresh = await Session.start(store, project, model="test")
    listed: list[list[tuple[str, str]]] = []

    def look(messages: list[ModelMessage], info: AgentInfo) -> Reply:
        listed.append([(item.id, item.title) for item in store.sessions.recent(project)])
        return "done"

    await agent(scripted(look).model).run("a new question", deps=RunDeps(fresh))

    assert listed == [[(fresh.id, "a new question"), (older.id, "an older session")]]  # newest first, titled
