"""The chat's heavy half, loaded in the background while the user types: the project, and the conversation in it."""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic_ai
from pydantic_ai import RunContext
from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

from code_puppy.chat.approvals import Approver, Confirm
from code_puppy.chat.chat_sink import ChatSink, thousands
from code_puppy.checkpoints.rewind import Only, RewindResult
from code_puppy.config import Settings
from code_puppy.core.conversation import Conversation
from code_puppy.core.project import Project
from code_puppy.history.tokens import estimate_request_tokens
from code_puppy.options import RunOptions
from code_puppy.permissions.policy import PermissionPolicy
from code_puppy.plugins import RegisterCommand
from code_puppy.sessions.costs import CostTotals
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore

# The chat owns its screen: pydantic-ai's first-run banner would land in the middle of it.
pydantic_ai.BANNER_ENABLED = False


class ChatRuntime(Conversation):
    """The project (settings, plugins, store, the agent built once) and the chat's conversation in it: its session, its
    model and the chat's steering inbox. `/model`, `/new` and `/resume` change those, never the agent: MCP servers,
    plugin state and "always allow" approvals carry over."""

    def __init__(self, project: Project, session: Session, confirm: Confirm) -> None:
        super().__init__(project, session, project.model_name)
        self.sink: ChatSink | None = None
        """The running job's sink, whose `diff_shown` approvals add to."""
        self.recovered: str | None = None
        """The note about an interrupted turn the last open or resume recovered, until shown."""
        self._confirm = confirm
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
    def policy(self) -> PermissionPolicy:
        return self.project.policy

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

    async def ask(self, ctx: RunContext[Any], requests: DeferredToolRequests, token: str) -> DeferredToolResults | None:
        """Answers the approvals of the chat's runs, in its prompt."""
        approver = Approver(self.policy, self.project.root, self._confirm, self._diff_shown)
        return await approver(ctx, requests, token)

    def _diff_shown(self) -> set[str]:
        return self.sink.diff_shown if self.sink is not None else set()

    async def resume(self, reference: str) -> str | None:
        self.recovered = await super().resume(reference)
        return self.recovered

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
        """Rewind this chat's session (`checkpoints.rewind.Rewinder.rewind`)."""
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
