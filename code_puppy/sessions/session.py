"""`Session`: the main conversation's durable history, written through to the store on every change."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import ValidationError
from pydantic_ai import Conversation
from pydantic_ai.conversation_store import ConversationConflict, ConversationStore, InMemoryConversationStore
from pydantic_ai.messages import ModelMessage
from pydantic_ai.usage import RunUsage

from code_puppy.config import ConfigError

from .catalog import SessionInfo, check_name
from .journal import Journal
from .schema import store_error
from .store import SqliteConversationStore


class SessionNotSaved(Exception):
    """A session's history could not be written to the store; the message says which session, where, and why."""


class Session:
    """One conversation of a project: its messages and usage, saved through a `ConversationStore`.

    Setting the history saves it: the store appends the messages it lacks, and when the history was rewritten
    (compaction, a history processor) the rewrite branches off and the old branch stays stored. A save that finds
    the session changed by another process never overwrites it: the history goes to a new session instead, and
    `notice` says so.
    """

    def __init__(
        self,
        store: ConversationStore,
        conversation: Conversation,
        *,
        model: str | None = None,
        cache_epoch: int = 0,
        history_version: int = 0,
    ) -> None:
        self.store = store
        self.conversation = conversation
        self.model = model
        self.notice: str | None = None
        """A one-line message for the user about the last save, e.g. a conflict that moved the session."""
        self.cache_epoch = cache_epoch
        """How many times already-sent history was rewritten (history processors, compaction); saved with it."""
        self.history_version = history_version
        """The revision of the history as history processors see it (history/processing.py); saved with it."""
        self._stored_revision = (cache_epoch, history_version)
        self._stored_usage = conversation.usage
        self._run_usage: dict[str, RunUsage] = {}
        self._before_first_save: Callable[[], object] | None = None
        """The catalog change a new or resumed session makes with its first save, so that an invocation that fails
        before it (a bad processor path, a missing variable) leaves no empty session or changed model behind."""

    project_dir: Path | None = None
    """The project the session belongs to, when it is stored."""

    @property
    def id(self) -> str:
        return self.conversation.conversation_id

    @property
    def messages(self) -> list[ModelMessage]:
        return list(self.conversation.messages)

    @property
    def usage(self) -> RunUsage:
        """Usage over the session's life: what was stored when it was opened plus every run since."""
        total = self._stored_usage
        for usage in self._run_usage.values():
            total = total + usage
        return total

    @property
    def journal(self) -> Journal | None:
        """Where this session's runs journal their steps; None for a session kept only in memory."""
        return Journal(self.store.database) if isinstance(self.store, SqliteConversationStore) else None

    def begin_run(self, journal: Journal, run_id: str | None, prompt: str | None) -> tuple[int, bool]:
        """A run of this session starts: it is listed from now on. The id of its journal, begun with `prompt`, and
        whether the stored session is still the one this run continues (`Journal.begin`)."""
        self._create_row()
        return journal.begin(self.id, run_id, prompt, revision=self.conversation.revision)

    async def sibling(self) -> Session:
        """A new, empty session of the same project and model, in the same store, listed at once."""
        assert isinstance(self.store, SqliteConversationStore) and self.project_dir is not None
        sibling = await Session.start(self.store, self.project_dir, model=self.model)
        sibling._create_row()
        return sibling

    @classmethod
    def in_memory(cls) -> Session:
        """A session kept only in memory, for agents built without a session store."""
        return cls(InMemoryConversationStore(), Conversation())

    @classmethod
    async def start(
        cls, store: SqliteConversationStore, project_dir: Path, *, model: str | None, name: str | None = None
    ) -> Session:
        """A new, empty session of `project_dir` (called `name`); it is listed once its first save lands."""
        session = cls(store, Conversation(conversation_id=new_session_id()), model=model)
        session.project_dir = project_dir
        session._before_first_save = lambda: store.sessions.create(
            project_dir, model=session.model, session_id=session.id, name=name
        )
        return session

    @classmethod
    async def fork(cls, store: SqliteConversationStore, info: SessionInfo, *, model: str | None) -> Session:
        """A new session of the same project whose history is `info`'s, sharing its stored messages (the store's
        `fork`); the original goes on unchanged. Listed at once."""
        fork_id = new_session_id()
        # Its title says what it is a fork of, never only that: a copy of the source's would list them as twins.
        source = (info.name or info.title).removesuffix(" (fork)")
        title = f"{source} (fork)" if source else ""
        store.sessions.create(Path(info.project_dir), session_id=fork_id, model=model or info.model, title=title)
        if await store.read_record(info.id) is None:  # nothing saved yet (a journaled first turn): an empty fork
            conversation = Conversation(conversation_id=fork_id)
        else:
            conversation = await store.fork(info.id, new_conversation_id=fork_id)
        session = cls(
            store,
            conversation,
            model=model or info.model,
            cache_epoch=info.cache_epoch,
            history_version=info.history_version,
        )
        session._stored_revision = (0, 0)  # the fork's row starts from the defaults: its first save sets them
        session.project_dir = Path(info.project_dir)
        return session

    @classmethod
    async def resume(cls, store: SqliteConversationStore, info: SessionInfo, *, model: str | None) -> Session:
        """Continue a stored session from its current history."""
        conversation = await store.load(info.id) or Conversation(conversation_id=info.id)
        session = cls(
            store, conversation, model=model, cache_epoch=info.cache_epoch, history_version=info.history_version
        )
        session.project_dir = Path(info.project_dir)
        if model is not None and model != info.model:
            session._before_first_save = lambda: store.sessions.update(info.id, model=session.model)
        return session

    def rename(self, name: str) -> None:
        """Call the session `name` (a new one is recorded now, listed once it has a turn).

        Raises:
            ValueError: Another session is called `name`.
        """
        assert isinstance(self.store, SqliteConversationStore)
        self._create_row()
        self.store.sessions.rename(self.id, name)

    def switch_model(self, model: str) -> None:
        """Record that the session goes on with `model`: now if it is stored, else with its first save."""
        self.model = model
        if self._before_first_save is None and isinstance(self.store, SqliteConversationStore):
            self.store.sessions.update(self.id, model=model)

    async def set_message_history(
        self, messages: Sequence[ModelMessage], *, run_id: str | None = None, run_usage: RunUsage | None = None
    ) -> None:
        """Make `messages` the session's history and save it; a run's usage counts once however often it is set.

        Raises:
            SessionNotSaved: The store failed (a full disk, say); the history is set in memory all the same, and the
                next save writes it.
        """
        if run_id is not None and run_usage is not None:
            self._run_usage[run_id] = run_usage
        self.conversation.messages = list(messages)
        self.conversation.usage = self.usage
        try:
            self._create_row()
            try:
                await self.store.save(self.conversation)
            except ConversationConflict:
                await self._move_to_new_session()
            revision = (self.cache_epoch, self.history_version)
            if revision != self._stored_revision and isinstance(self.store, SqliteConversationStore):
                self.store.sessions.update(self.id, cache_epoch=revision[0], history_version=revision[1])
                self._stored_revision = revision
        except sqlite3.Error as exc:
            where = f" to {self.store.database.path}" if isinstance(self.store, SqliteConversationStore) else ""
            raise SessionNotSaved(f"session {self.id[:8]} could not be saved{where}: {exc}") from exc

    def list_now(self) -> None:
        """Record a new session now rather than with its first save (a durable run names it before its turn starts,
        and a process resuming the run opens it by id)."""
        self._create_row()

    def go_back_to(self, length: int) -> None:
        """Hold only the first `length` messages of the history, in memory: the next save continues the session from
        there, branching off what followed (a resumed durable run replays a turn that was saved already)."""
        self.conversation.messages = self.messages[:length]

    def _create_row(self) -> None:
        if self._before_first_save is not None:
            self._before_first_save()
            self._before_first_save = None

    async def _move_to_new_session(self) -> None:
        old_id = self.id
        new_id = new_session_id()
        if (journal := self.journal) is not None:
            journal.move_own(old_id, new_id)  # the new session's first save, below, ends it with the run
        catalog = self.store.sessions if isinstance(self.store, SqliteConversationStore) else None
        if catalog is not None:
            catalog.create(self.project_dir or Path.cwd(), model=self.model, session_id=new_id)
        self.conversation = Conversation(
            messages=list(self.conversation.messages), usage=self.conversation.usage, conversation_id=new_id
        )
        await self.store.save(self.conversation)
        self._stored_revision = (0, 0)  # the new session's row starts from the defaults
        self.notice = (
            f"session {old_id[:8]} was changed by another code-puppy process since this one loaded it; "
            f"nothing was overwritten: this conversation continues as session {new_id[:8]}"
        )


def new_session_id() -> str:
    """A random id: pydantic-ai's time-ordered uuid7s share their first 8 characters (what `sessions list` shows and
    people type after `-r`) with every other session started within the same minute."""
    return str(uuid.uuid4())


async def open_session(
    store: SqliteConversationStore,
    project_dir: Path,
    *,
    model: str | None,
    continue_last: bool = False,
    resume: str | None = None,
    fork: bool = False,
    name: str | None = None,
) -> Session:
    """A new session, the latest of `project_dir` (`-c`), or the one `resume` names (`-r`: an id, a name, a unique id
    prefix); with `fork`, a fork of the one continued. `name` names the session opened (`--name`).

    Everything the run needs from the store is read here, before anything is sent: a row that cannot be read is a
    `StoreError` naming the file; a name another session has is a `ConfigError`.
    """
    try:
        found: SessionInfo | None = None
        if resume is not None:
            found = find_session(store, resume)
        elif continue_last:
            found = store.sessions.latest(project_dir)
            if found is None:
                raise ConfigError(f"no session to continue in {project_dir}; start one without -c")
        if name is not None:
            try:
                check_name(name)
            except ValueError as exc:
                raise ConfigError(f"--name: {exc}") from None
            other = store.sessions.find(name)
            if other and other[0].name == name and (found is None or fork or other[0].id != found.id):
                raise ConfigError(f"--name: another session ({other[0].id[:8]}) is already called {name!r}")
        if found is None:
            return await Session.start(store, project_dir, model=model, name=name)
        session = await (Session.fork if fork else Session.resume)(store, found, model=model)
        if name is not None:
            store.sessions.rename(session.id, name)
        return session
    except (sqlite3.DatabaseError, ValidationError) as exc:
        raise store_error(store.database.path, exc) from None


def find_session(store: SqliteConversationStore, reference: str) -> SessionInfo:
    """The one session `reference` names (an exact id, an exact name, a unique id prefix, else an imported session's
    id in the tool it came from); `ConfigError` (exit 2) when it names none or several."""
    matches = store.sessions.find(reference)
    if not matches:
        raise ConfigError(f"no session matches '{reference}' (code-puppy sessions list --all shows them)")
    if len(matches) > 1:
        listed = ", ".join(f"{info.id} ({info.name or info.title or 'untitled'})" for info in matches[:10])
        raise ConfigError(f"'{reference}' matches {len(matches)} sessions: {listed}")
    return matches[0]
