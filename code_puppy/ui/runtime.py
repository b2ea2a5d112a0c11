"""The chat's heavy half, imported in the background while the user types: model, session store, agent, turns."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic_ai
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

from code_puppy.agents.builder import build_pydantic_agent
from code_puppy.agents.history_persistence import recover_interrupted_turn
from code_puppy.agents.permissions import PermissionPolicy
from code_puppy.agents.steering import SteeringInbox, accepting_steers, held_steers
from code_puppy.cli_runner import TurnOutcome, open_store, run_turn
from code_puppy.config import PermissionMode, Settings
from code_puppy.models import resolve_model
from code_puppy.plugins import RegisterCommand
from code_puppy.plugins.discovery import load_plugins
from code_puppy.plugins.host import PluginHost
from code_puppy.sessions.runs import RunRegistry
from code_puppy.sessions.session import Session, find_session, open_session
from code_puppy.sessions.store import SqliteConversationStore
from code_puppy.ui.approvals import Approver, Confirm
from code_puppy.ui.chat_sink import ChatSink

# The chat owns its screen: pydantic-ai's first-run banner would land in the middle of it.
pydantic_ai.BANNER_ENABLED = False


@dataclass
class ChatRuntime:
    """One chat's model, session and agent; rebuilt in place by /model, /new and /resume."""

    project_root: Path
    settings: Settings
    model_name: str
    model: Model
    store: SqliteConversationStore
    session: Session
    confirm: Confirm
    """Asks the user about a call waiting for approval."""
    permission_mode: PermissionMode | None = None
    allow: tuple[str, ...] = ()
    max_requests: int | None = None
    inbox: SteeringInbox = field(default_factory=SteeringInbox)
    sink: ChatSink | None = None
    """The running job's sink, whose `diff_shown` approvals add to."""
    plugins: PluginHost | None = None
    """The chat's plugins: started when the chat loads, shut down when it closes."""
    agent: Agent[None, str] = field(init=False)
    policy: PermissionPolicy = field(init=False)
    recovered: str | None = field(default=None, init=False)
    """The note about an interrupted turn the last resume recovered, until shown."""

    def __post_init__(self) -> None:
        self.registry = RunRegistry(self.store.database)
        self._build()

    @classmethod
    async def open(
        cls,
        project_root: Path,
        settings: Settings,
        model_name: str,
        confirm: Confirm,
        *,
        continue_last: bool = False,
        resume: str | None = None,
        register_command: RegisterCommand | None = None,
        no_plugins: bool = False,
        debug: bool = False,
        **options: Any,
    ) -> ChatRuntime:
        model = resolve_model(settings, model_name)
        plugins = (
            PluginHost(project_dir=project_root, debug=debug)
            if no_plugins
            else load_plugins(settings, project_root, debug=debug)
        )
        await plugins.startup(settings)
        if register_command is not None:
            await plugins.register_commands(register_command)
        store = open_store()
        try:
            session = await open_session(
                store, project_root, model=model_name, continue_last=continue_last, resume=resume
            )
        except BaseException:
            store.close()
            raise
        runtime = cls(project_root, settings, model_name, model, store, session, confirm, plugins=plugins, **options)
        runtime.recovered = await recover_interrupted_turn(session)
        await runtime.agent.__aenter__()
        return runtime

    def _build(self, *, keep_allowed: bool = True) -> None:
        previous: PermissionPolicy | None = getattr(self, "policy", None)
        mode = previous.mode if previous is not None else self.permission_mode
        self.agent = build_pydantic_agent(
            self.settings,
            model=self.model,
            project_root=self.project_root,
            permission_mode=mode,
            allow=self.allow,
            session=self.session,
            steering=self.inbox,
            ask=self._ask,
            plugins=self.plugins.for_agent(self.session) if self.plugins is not None else None,
        )
        self.policy = next(c for c in self.agent.root_capability.capabilities if isinstance(c, PermissionPolicy))
        if previous is not None and keep_allowed:
            self.policy.session_allowed = previous.session_allowed

    async def _rebuild(self, *, keep_allowed: bool) -> None:
        old = self.agent
        self._build(keep_allowed=keep_allowed)
        await self.agent.__aenter__()
        await old.__aexit__(None, None, None)

    async def _ask(
        self, ctx: RunContext[Any], requests: DeferredToolRequests, token: str
    ) -> DeferredToolResults | None:
        return await Approver(self.policy, self.project_root, self.confirm, self._diff_shown)(ctx, requests, token)

    def _diff_shown(self) -> set[str]:
        return self.sink.diff_shown if self.sink is not None else set()

    async def close(self) -> None:
        try:
            await self.agent.__aexit__(None, None, None)
            if self.plugins is not None:
                await self.plugins.shutdown()
        finally:
            self.store.close()

    @contextlib.asynccontextmanager
    async def steerable(self) -> AsyncGenerator[None]:
        """While a job runs: `code-puppy steer` from another terminal reaches it."""
        async with accepting_steers(self.registry, self.session.id, self.project_root, self.inbox):
            yield

    async def turn(self, prompt: str, sink: ChatSink) -> TurnOutcome:
        """One user turn through the shared run path; text held as a run ended runs as its follow-up."""
        self.sink = sink
        return await run_turn(
            self.agent,
            self.session,
            prompt,
            sink,
            max_requests=self.max_requests,
            follow_up=held_steers(self.inbox, sink.event),
            plugins=self.plugins,
            max_continuations=self.settings.plugins.max_continuations,
            idle_timeout=self.settings.run.idle_timeout,
        )

    async def switch_model(self, name: str) -> None:
        self.model = resolve_model(self.settings, name)
        self.model_name = name
        self.session.switch_model(name)
        await self._rebuild(keep_allowed=True)

    async def new_session(self) -> None:
        self.session = await Session.start(self.store, self.project_root, model=self.model_name)
        await self._rebuild(keep_allowed=False)

    async def resume(self, id_or_prefix: str) -> None:
        info = find_session(self.store, id_or_prefix)
        self.session = await Session.resume(self.store, info, model=self.model_name)
        self.recovered = await recover_interrupted_turn(self.session)
        await self._rebuild(keep_allowed=False)

    def context_used(self) -> str:
        """`ctx 12.3k/128k 9%`: the last response's input plus output tokens, over the window when known."""
        tokens = _last_context_tokens(self.session.messages)
        if tokens is None:
            return "ctx –"
        window = self.model.context_window
        shown = f"ctx {_k(tokens)}"
        return f"{shown}/{_k(window)} {tokens * 100 // window}%" if window else shown


def _last_context_tokens(messages: list[ModelMessage]) -> int | None:
    for message in reversed(messages):
        if isinstance(message, ModelResponse) and message.usage.input_tokens:
            return message.usage.input_tokens + message.usage.output_tokens
    return None


def _k(count: int) -> str:
    return f"{count / 1000:.1f}k" if count >= 1000 else str(count)
