"""`Conversation`: one conversation a front end holds in a project, and a turn of it. Every front end (the chat, a
headless run, an editor's session) keeps one, so a turn is set up, steered, narrowed and switched the same way."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from code_puppy.core.turn import FollowUp, TurnLimits, TurnOutcome, run_turn
from code_puppy.errors import ConfigError, one_line
from code_puppy.models import definition_model_name, model_alias
from code_puppy.run.deps import AskUser, EditorFiles, RunDeps
from code_puppy.run.history_persistence import recover_interrupted_turn
from code_puppy.run.steering import SteeringInbox, accepting_steers, held_steers
from code_puppy.sessions.runs import RunRegistry
from code_puppy.sessions.session import Session, find_session

if TYPE_CHECKING:
    from pydantic_ai.messages import UserContent
    from pydantic_ai.models import Model

    from code_puppy.core.events import EventSink
    from code_puppy.core.project import Project
    from code_puppy.definitions.file_commands import FileCommand


@dataclass
class Conversation:
    """A session of `project` on a model, with the steering inbox its turns read. Switching the model or the session
    keeps the project's agent: its MCP servers, plugin state and "always" approvals carry over."""

    project: Project
    session: Session
    model_name: str
    """The model the turns run on (`/model` and an editor's model option switch it)."""
    inbox: SteeringInbox = field(default_factory=SteeringInbox)
    """Text that reaches the running turn (the chat's Enter, `code-puppy steer`, an editor's `_code_puppy/steer`)."""

    @property
    def model(self) -> Model:
        return self.project.model(self.model_name)

    def switch_model(self, name: str) -> None:
        """Go on with model `name` (`sonnet` is Claude's current Sonnet, as with `-m`).

        Raises:
            ConfigError: It cannot be set up, or has no price while a budget is set.
        """
        name = model_alias(self.project.settings, name)
        self.project.check_priced(name)
        self.model_name = name
        self.session.switch_model(name)

    async def new_session(self) -> None:
        self.session = await Session.start(self.project.store, self.project.root, model=self.model_name)

    async def resume(self, reference: str) -> str | None:
        """Go on in the stored session `reference` names (`find_session`); the note about a turn it recovered."""
        from code_puppy.durable.runs import refuse_interrupted_durable_run

        info = find_session(self.project.store, reference)
        refuse_interrupted_durable_run(info.id)
        self.session = await Session.resume(self.project.store, info, model=self.model_name)
        return await recover_interrupted_turn(self.session)

    async def fork(self) -> Session:
        """Go on in a fork of this session (its history, sharing the stored messages); the fork."""
        info = find_session(self.project.store, self.session.id)
        self.session = await Session.fork(self.project.store, info, model=self.model_name)
        return self.session

    @contextlib.asynccontextmanager
    async def steerable(self, cancel: Callable[[], object] | None = None) -> AsyncGenerator[None]:
        """While a turn runs: `code-puppy steer` from another terminal reaches it; `code-puppy steer --cancel` (or the
        dashboard's Cancel) calls `cancel`, the front end's own cancel of the turn."""
        registry = RunRegistry(self.project.store.database)
        async with accepting_steers(registry, self.session.id, self.project.root, self.inbox, cancel=cancel):
            yield

    @contextlib.contextmanager
    def command(self, command: FileCommand | None, *, warn: Callable[[str], None]) -> Generator[Model]:
        """For the turn of a file command: its `allowed-tools` narrow the tools (and grant them, for a trusted one),
        and its `model` (unless `-m` chose one) replaces this conversation's; a model that cannot be set up here
        (an unknown name, a missing credential) leaves the turn on this conversation's, told through `warn`. The
        model the turn runs on."""
        if command is None:
            yield self.model
            return
        try:
            model = self.model
            if command.model is not None and self.project.options.model is None:
                name = definition_model_name(self.project.settings, command.model, self.model_name)
                try:
                    model = self.project.model(name)
                except ConfigError as exc:
                    warn(f"/{command.name} runs on {self.model_name}: its model cannot be used here ({one_line(exc)})")
            self.project.narrow_to(command)
            yield model
        finally:
            self.project.narrow_to(None)

    def limits(self, *, timeout: float | None = None, timeout_from: float | None = None) -> TurnLimits:
        settings = self.project.settings
        return TurnLimits(
            max_requests=self.project.options.max_requests,
            max_continuations=settings.plugins.max_continuations,
            timeout=timeout,
            timeout_from=timeout_from,
            idle_timeout=settings.run.idle_timeout,
        )

    async def turn(
        self,
        prompt: str,
        sink: EventSink,
        *,
        model: Model | None = None,
        attachments: Sequence[UserContent] = (),
        ask: AskUser | None = None,
        files: EditorFiles | None = None,
        follow_up: FollowUp | None = None,
        timeout: float | None = None,
        timeout_from: float | None = None,
    ) -> TurnOutcome:
        """One user turn on the shared run path (`run_turn`), on `model` (this conversation's by default). `ask`
        answers approvals (none: they are refused), `files` is the editor's; text steered as a run ended runs as its
        follow-up, then `follow_up`'s. `timeout` counts from `timeout_from` (monotonic), else from now."""
        steers = held_steers(self.inbox, sink.event)

        async def then(result: Any) -> str | None:
            if steered := await steers(result):
                return steered
            return await follow_up(result) if follow_up is not None else None

        return await run_turn(
            self.project.agent,
            RunDeps(self.session, steering=self.inbox, ask=ask, files=files, warn=sink.warning),
            prompt,
            sink,
            model=model or self.model,
            limits=self.limits(timeout=timeout, timeout_from=timeout_from),
            follow_up=then,
            plugins=self.project.plugins,
            attachments=attachments,
        )
