"""The chat's heavy half, loaded in the background while the user types: the project, and the conversation in it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import pydantic_ai
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelRequest, UserContent, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

from code_puppy.chat.approvals import Approver, Confirm
from code_puppy.chat.chat_sink import ChatSink, thousands
from code_puppy.checkpoints.rewind import Only, RewindResult
from code_puppy.config import Settings
from code_puppy.core.project import Project
from code_puppy.core.turn import TurnLimits, TurnOutcome, run_turn
from code_puppy.history.tokens import estimate_request_tokens
from code_puppy.options import RunOptions
from code_puppy.permissions.policy import PermissionPolicy
from code_puppy.plugins import RegisterCommand
from code_puppy.run.deps import RunDeps
from code_puppy.run.history_persistence import recover_interrupted_turn
from code_puppy.run.steering import SteeringInbox, accepting_steers, held_steers
from code_puppy.sessions.costs import CostTotals
from code_puppy.sessions.runs import RunRegistry
from code_puppy.sessions.session import Session, find_session
from code_puppy.sessions.store import SqliteConversationStore

# The chat owns its screen: pydantic-ai's first-run banner would land in the middle of it.
pydantic_ai.BANNER_ENABLED = False


class ChatRuntime:
    """The project (settings, plugins, store, the agent built once) and the conversation open in it: its session, its
    model and the chat's steering inbox. `/model`, `/new` and `/resume` change those, never the agent: MCP servers,
    plugin state and "always allow" approvals carry over."""

    def __init__(self, project: Project, session: Session, confirm: Confirm) -> None:
        self.project = project
        self.session = session
        self.model_name = project.model_name
        self.inbox = SteeringInbox()
        self.sink: ChatSink | None = None
        """The running job's sink, whose `diff_shown` approvals add to."""
        self.recovered: str | None = None
        """The note about an interrupted turn the last open or resume recovered, until shown."""
        self._confirm = confirm
        self._registry = RunRegistry(project.store.database)
        self._session_cost: tuple[tuple[str, int], CostTotals] | None = None
        self._titling: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(
        cls, options: RunOptions, confirm: Confirm, *, register_command: RegisterCommand | None = None
    ) -> ChatRuntime:
        """Read the config, plugins and store in a worker thread (the prompt stays live), then start the agent."""
        project = await asyncio.to_thread(Project, options)
        try:
            await project.start(register_command)
            session, recovered = await project.open_session()
        except BaseException:
            await project.close()
            raise
        runtime = cls(project, session, confirm)
        runtime.recovered = recovered
        return runtime

    @property
    def settings(self) -> Settings:
        return self.project.settings

    @property
    def store(self) -> SqliteConversationStore:
        return self.project.store

    @property
    def agent(self) -> Agent[RunDeps, str]:
        return self.project.agent

    @property
    def policy(self) -> PermissionPolicy:
        return self.project.policy

    @property
    def model(self) -> Model:
        return self.project.model(self.model_name)

    async def close(self) -> None:
        for task in self._titling:
            task.cancel()
        await asyncio.gather(*self._titling, return_exceptions=True)
        await self.project.close()

    def title_after_first_turn(self) -> None:
        """After a session's first turn, ask its model for a short title in the background (`[sessions]
        auto_title`); the request is the session's, of kind `title`."""
        session = self.session
        prompts = sum(
            isinstance(message, ModelRequest) and any(isinstance(part, UserPromptPart) for part in message.parts)
            for message in session.messages
        )
        if prompts != 1 or not self.settings.sessions.auto_title:
            return
        task = asyncio.create_task(self._write_title(session, self.model))
        self._titling.add(task)
        task.add_done_callback(self._titling.discard)

    async def _write_title(self, session: Session, model: Model) -> None:
        from code_puppy.core.session_title import write_title
        from code_puppy.cost.spending import CostMeter

        meter = CostMeter(self.project.spending, kind="title", session_id=session.id)
        try:
            title = await write_title(model, session.messages, capabilities=[meter])
        except Exception:  # a title is a nicety: on any failure (a budget, the provider) the first prompt stays it
            return
        if title:
            self.store.sessions.update(session.id, title=title)

    async def fork(self) -> Session:
        """Go on in a fork of this chat's session (its history, sharing the stored messages); the fork."""
        info = find_session(self.store, self.session.id)
        self.session = await Session.fork(self.store, info, model=self.model_name)
        return self.session

    @contextlib.asynccontextmanager
    async def steerable(self) -> AsyncGenerator[None]:
        """While a job runs: `code-puppy steer` from another terminal reaches it."""
        async with accepting_steers(self._registry, self.session.id, self.project.root, self.inbox):
            yield

    async def turn(
        self, prompt: str, sink: ChatSink, *, model: Model | None = None, attachments: Sequence[UserContent] = ()
    ) -> TurnOutcome:
        """One user turn through the shared run path (on `model`, the chat's by default), with `attachments`; text
        held as a run ended runs as its follow-up."""
        self.sink = sink
        settings = self.project.settings
        return await run_turn(
            self.agent,
            RunDeps(self.session, steering=self.inbox, ask=self._ask),
            prompt,
            sink,
            model=model or self.model,
            limits=TurnLimits(
                max_requests=self.project.options.max_requests,
                max_continuations=settings.plugins.max_continuations,
                idle_timeout=settings.run.idle_timeout,
            ),
            follow_up=held_steers(self.inbox, sink.event),
            plugins=self.project.plugins,
            attachments=attachments,
        )

    async def _ask(
        self, ctx: RunContext[Any], requests: DeferredToolRequests, token: str
    ) -> DeferredToolResults | None:
        approver = Approver(self.policy, self.project.root, self._confirm, self._diff_shown)
        return await approver(ctx, requests, token)

    def _diff_shown(self) -> set[str]:
        return self.sink.diff_shown if self.sink is not None else set()

    def switch_model(self, name: str) -> None:
        """Go on with model `name` (`ConfigError` when it cannot be set up, or has no price while a budget is set);
        the agent stays."""
        self.project.check_priced(name)
        self.model_name = name
        self.session.switch_model(name)

    async def new_session(self) -> None:
        self.session = await Session.start(self.store, self.project.root, model=self.model_name)

    async def resume(self, id_or_prefix: str) -> None:
        info = find_session(self.store, id_or_prefix)
        self.session = await Session.resume(self.store, info, model=self.model_name)
        self.recovered = await recover_interrupted_turn(self.session)

    def session_cost(self) -> CostTotals:
        """What the session has cost over its life (read again from the store when this process has made a request
        since, or the session changed)."""
        spending = self.project.spending
        key = (self.session.id, spending.invocation.requests)
        if self._session_cost is None or self._session_cost[0] != key:
            self._session_cost = (key, spending.session_total(self.session.id))
        return self._session_cost[1]

    async def rewind(
        self, *, turns: int = 1, to_turn: int | None = None, only: Only | None = None, force: bool = False
    ) -> RewindResult:
        """Rewind this chat's session (`core.rewind.Rewinder.rewind`)."""
        return await self.project.rewinder().rewind(self.session, turns=turns, to_turn=to_turn, only=only, force=force)

    def context_used(self) -> str:
        """`ctx 12.3k/128k 9%`: what the session's history takes of the context (the same estimate history
        processors and compaction go by), over the model's window when known."""
        messages = self.session.messages
        if not messages:
            return "ctx –"
        tokens = estimate_request_tokens(messages)
        window = self.model.context_window
        shown = f"ctx {thousands(tokens)}"
        return f"{shown}/{thousands(window)} {tokens * 100 // window}%" if window else shown
