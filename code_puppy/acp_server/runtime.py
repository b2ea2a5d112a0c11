"""The sessions an ACP client opens, each a code-puppy session of the sessions store, run on the shared run path.

Each session has its own `Project` (its `cwd` finds the project root as in the terminal, and the client's MCP servers
join the configured ones for it alone), its agent built once, its permission mode, model and steering inbox. A prompt
is one `run_turn`, as in the chat and `-p`; approvals go to the client as `session/request_permission`.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, get_args

import pydantic_ai
from acp import RequestError
from acp.interfaces import Client
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    EmbeddedResourceContentBlock,
    HttpMcpServer,
    ListSessionsResponse,
    LoadSessionResponse,
    McpServerStdio,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ResourceContentBlock,
    SessionConfigOptionBoolean,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionInfo,
    SessionMode,
    SessionModeState,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    StopReason,
    TextContentBlock,
    TextResourceContents,
    ToolCallUpdate,
)
from pydantic_ai import RunContext
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolDenied

from code_puppy.acp_server.updates import UpdateSink, diff_content, locations, replay, tool_kind
from code_puppy.agents.deps import RunDeps
from code_puppy.agents.history_persistence import recover_interrupted_turn
from code_puppy.agents.proposed_edits import proposed_edit
from code_puppy.agents.sandboxed_shell import ESCALATE
from code_puppy.agents.steering import SteeringInbox, accepting_steers, held_steers
from code_puppy.config import McpServerConfig, PermissionMode
from code_puppy.core.events import ending
from code_puppy.core.project import Project
from code_puppy.core.run import TurnLimits, TurnOutcome, run_turn
from code_puppy.errors import ConfigError
from code_puppy.options import RunOptions
from code_puppy.paths import find_project_root
from code_puppy.sessions.runs import RunRegistry
from code_puppy.sessions.session import Session, find_session

pydantic_ai.BANNER_ENABLED = False

MODES: dict[PermissionMode, tuple[str, str]] = {
    "read-only": ("Read only", "Reads and searches; no editing or shell tools are offered."),
    "ask": ("Ask", "File changes and commands outside the allow-list ask first."),
    "accept-edits": ("Accept edits", "File changes in the project run; commands ask unless allow-listed."),
    "auto": ("Auto", "File changes and every command run; commands inside the OS sandbox."),
    "yolo": ("Yolo", "Nothing asks, nothing is confined."),
}
assert set(MODES) == set(get_args(PermissionMode))

ALLOW_ONCE, ALLOW_ALWAYS, REJECT_ONCE = "allow-once", "allow-always", "reject-once"


def config_failure(error: ConfigError) -> RequestError:
    """A config, model or store error as the JSON-RPC error of the request it affects, with the CLI's one line."""
    return RequestError(-32603, str(error), {"kind": type(error).__name__})


def unknown_session(session_id: str) -> RequestError:
    return RequestError.invalid_params({"message": f"no session {session_id} is open here", "sessionId": session_id})


def client_servers(servers: list[McpServerStdio | HttpMcpServer]) -> dict[str, McpServerConfig]:
    """The client's MCP servers as configured ones (a client's server replaces a configured one of its name)."""
    configs: dict[str, McpServerConfig] = {}
    for server in servers:
        if isinstance(server, McpServerStdio):
            configs[server.name] = McpServerConfig(
                command=server.command, args=tuple(server.args), env={env.name: env.value for env in server.env}
            )
        else:
            configs[server.name] = McpServerConfig(
                url=server.url, headers={header.name: header.value for header in server.headers}
            )
    return configs


def prompt_text(blocks: list[Any]) -> str:
    """The prompt's text: text blocks as they are, resource links as `@path` mentions, embedded text resources as
    context the model reads."""
    pieces: list[str] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            pieces.append(block.text)
        elif isinstance(block, ResourceContentBlock):
            pieces.append(f"@{block.uri.removeprefix('file://')}")
        elif isinstance(block, EmbeddedResourceContentBlock) and isinstance(block.resource, TextResourceContents):
            resource = block.resource
            pieces.append(f'<context uri="{resource.uri}">\n{resource.text}\n</context>')
        else:
            raise RequestError.invalid_params({"message": f"content of type {block.type} is not supported"})
    return "\n".join(pieces)


@dataclass
class LiveSession:
    """A session open in this process."""

    project: Project
    session: Session
    model_name: str
    inbox: SteeringInbox = field(default_factory=SteeringInbox)
    queued: list[str] = field(default_factory=list[str])
    """Text queued as the next turn (`_code_puppy/queue`), run when the running one ends."""
    turn: asyncio.Task[TurnOutcome] | None = None

    def modes(self) -> SessionModeState:
        return SessionModeState(
            current_mode_id=self.project.policy.mode,
            available_modes=[
                SessionMode(id=mode, name=name, description=description) for mode, (name, description) in MODES.items()
            ],
        )

    def config_options(self) -> list[SessionConfigOptionSelect | SessionConfigOptionBoolean]:
        names = dict.fromkeys([self.model_name, self.project.model_name, *self.project.settings.models])
        return [
            SessionConfigOptionSelect(
                id="model",
                name="Model",
                type="select",
                category="model",
                current_value=self.model_name,
                options=[SessionConfigSelectOption(value=name, name=name) for name in names],
            )
        ]


class AcpRuntime:
    """The sessions of one client connection."""

    def __init__(self, client: Client, options: RunOptions, capabilities: ClientCapabilities) -> None:
        self.client = client
        self.options = options
        self.capabilities = capabilities
        self.sessions: dict[str, LiveSession] = {}

    async def _project(self, cwd: str, servers: list[McpServerStdio | HttpMcpServer]) -> Project:
        path = Path(cwd)
        if not path.is_absolute() or not path.is_dir():
            raise RequestError.invalid_params({"message": f"cwd {cwd!r} is not an absolute path to a directory"})
        options = replace(self.options, project_root=find_project_root(path))
        try:
            project = await asyncio.to_thread(Project, options)
            if extra := client_servers(servers):
                mcp = {**project.settings.mcp_servers, **extra}
                project.settings = project.settings.model_copy(update={"mcp_servers": mcp})
            await project.start()
        except ConfigError as exc:
            raise config_failure(exc) from None
        return project

    def _live(self, session_id: str) -> LiveSession:
        live = self.sessions.get(session_id)
        if live is None:
            raise unknown_session(session_id)
        return live

    async def new_session(self, cwd: str, servers: list[McpServerStdio | HttpMcpServer]) -> NewSessionResponse:
        project = await self._project(cwd, servers)
        try:
            session = await Session.start(project.store, project.root, model=project.model_name)
        except ConfigError as exc:
            await project.close()
            raise config_failure(exc) from None
        live = self.sessions[session.id] = LiveSession(project, session, project.model_name)
        return NewSessionResponse(session_id=session.id, modes=live.modes(), config_options=live.config_options())

    async def load_session(
        self, cwd: str, session_id: str, servers: list[McpServerStdio | HttpMcpServer]
    ) -> LoadSessionResponse:
        if (open_already := self.sessions.get(session_id)) is not None:
            if open_already.turn is not None:
                raise RequestError.invalid_request({"message": f"session {session_id} is running a turn"})
            del self.sessions[session_id]
            await open_already.project.close()
        project = await self._project(cwd, servers)
        try:
            info = find_session(project.store, session_id)
            if info.id != session_id:
                raise ConfigError(f"no session matches '{session_id}' (code-puppy sessions list --all shows them)")
            session = await Session.resume(project.store, info, model=project.model_name)
            await recover_interrupted_turn(session)
        except ConfigError as exc:
            await project.close()
            raise RequestError.invalid_params({"message": str(exc), "sessionId": session_id}) from None
        live = self.sessions[session.id] = LiveSession(project, session, project.model_name)
        for update in replay(project.root, session.messages):
            await self.client.session_update(session.id, update)
        return LoadSessionResponse(modes=live.modes(), config_options=live.config_options())

    async def list_sessions(self, cwd: str | None) -> ListSessionsResponse:
        from code_puppy.sessions.store import open_store

        root = find_project_root(Path(cwd)) if cwd else None
        try:
            with open_store() as store:
                infos = store.sessions.recent(root)
        except ConfigError as exc:
            raise config_failure(exc) from None
        return ListSessionsResponse(
            sessions=[
                SessionInfo(
                    session_id=info.id,
                    cwd=info.project_dir,
                    title=info.title or None,
                    updated_at=info.updated_at.isoformat(),
                )
                for info in infos
            ]
        )

    async def set_mode(self, session_id: str, mode_id: str) -> SetSessionModeResponse:
        live = self._live(session_id)
        mode: PermissionMode | None = next((mode for mode in MODES if mode == mode_id), None)
        if mode is None:
            raise RequestError.invalid_params({"message": f"unknown mode {mode_id!r}; one of {', '.join(MODES)}"})
        try:
            live.project.require_sandbox(mode)
        except ConfigError as exc:
            raise config_failure(exc) from None
        live.project.policy.mode = mode
        return SetSessionModeResponse()

    async def set_config_option(
        self, session_id: str, config_id: str, value: str | bool
    ) -> SetSessionConfigOptionResponse:
        live = self._live(session_id)
        if config_id != "model" or not isinstance(value, str):
            raise RequestError.invalid_params({"message": f"unknown option {config_id!r}"})
        try:
            live.project.model(value)
            live.project.check_priced(value)
        except ConfigError as exc:
            raise config_failure(exc) from None
        live.model_name = value
        live.session.switch_model(value)
        return SetSessionConfigOptionResponse(config_options=live.config_options())

    async def prompt(self, session_id: str, blocks: list[Any]) -> PromptResponse:
        live = self._live(session_id)
        if live.turn is not None:
            raise RequestError.invalid_request(
                {"message": "a turn is running: send text into it with _code_puppy/steer or _code_puppy/queue"}
            )
        text = prompt_text(blocks)
        sink = UpdateSink(live.project.root, lambda update: self.client.session_update(live.session.id, update))
        live.turn = asyncio.create_task(self._turn(live, text, sink))
        try:
            outcome = await asyncio.shield(live.turn)
        except asyncio.CancelledError:  # the connection is closing: the turn ends and is saved first
            live.turn.cancel()
            await asyncio.wait([live.turn])
            raise
        finally:
            live.turn = None
        await sink.flush()
        if live.session.notice:
            sink.warning(live.session.notice)
            await sink.flush()
        return PromptResponse(stop_reason=self._stop_reason(outcome))

    @staticmethod
    def _stop_reason(outcome: TurnOutcome) -> StopReason:
        error = outcome.error
        if isinstance(error, asyncio.CancelledError):
            return "cancelled"
        status, message = ending(outcome)
        if status == "success":
            return "end_turn"
        if isinstance(error, UsageLimitExceeded) or status == "limit":
            return "max_turn_requests"
        raise RequestError(-32603, message or "the run failed")

    async def _turn(self, live: LiveSession, text: str, sink: UpdateSink) -> TurnOutcome:
        project = live.project
        settings = project.settings
        steers = held_steers(live.inbox, sink.event)

        async def follow_up(result: Any) -> str | None:
            if steered := await steers(result):
                return steered
            if live.queued:
                queued = live.queued.pop(0)
                sink.say(queued)
                return queued
            return None

        async def ask(ctx: RunContext[Any], requests: DeferredToolRequests, token: str) -> DeferredToolResults:
            return await self._approve(live, requests)

        registry = RunRegistry(project.store.database)
        async with accepting_steers(registry, live.session.id, project.root, live.inbox):
            return await run_turn(
                project.agent,
                RunDeps(live.session, steering=live.inbox, ask=ask),
                text,
                sink,
                model=project.model(live.model_name),
                limits=TurnLimits(
                    max_requests=self.options.max_requests,
                    max_continuations=settings.plugins.max_continuations,
                    idle_timeout=settings.run.idle_timeout,
                ),
                follow_up=follow_up,
                plugins=project.plugins,
            )

    async def _approve(self, live: LiveSession, requests: DeferredToolRequests) -> DeferredToolResults:
        """Ask the client about each call waiting for approval, as the chat asks its user: allow once, allow always
        (the call's scope, for the session), reject once; a command outside the sandbox only ever once."""
        policy = live.project.policy
        approvals: dict[str, bool | ToolDenied] = {}
        for call in requests.approvals:
            metadata: dict[str, Any] = requests.metadata.get(call.tool_call_id, {})
            escalate = metadata.get("sandbox") == ESCALATE
            scope = metadata.get("scope")
            if not escalate and scope is not None and scope in policy.session_allowed:
                approvals[call.tool_call_id] = True
                continue
            args = call.args_as_dict()
            summary = str(metadata.get("summary") or policy.summary(call.tool_name, args))
            edit = proposed_edit(live.project.root, call.tool_name, args)
            options = [PermissionOption(option_id=ALLOW_ONCE, name="Allow once", kind="allow_once")]
            if not escalate and scope is not None:
                options.append(PermissionOption(option_id=ALLOW_ALWAYS, name="Allow always", kind="allow_always"))
            options.append(PermissionOption(option_id=REJECT_ONCE, name="Reject", kind="reject_once"))
            response = await self.client.request_permission(
                session_id=live.session.id,
                tool_call=ToolCallUpdate(
                    tool_call_id=call.tool_call_id,
                    title=f"{call.tool_name} wants to {summary}",
                    kind=tool_kind(call.tool_name),
                    status="pending",
                    content=[diff_content(live.project.root, edit)] if edit is not None else None,
                    locations=locations(live.project.root, args),
                    raw_input=args,
                ),
                options=options,
            )
            outcome = response.outcome
            if not isinstance(outcome, AllowedOutcome):  # the client cancelled the turn while the question was open
                if live.turn is not None:
                    live.turn.cancel()
                approvals[call.tool_call_id] = ToolDenied("The user cancelled the turn.")
                continue
            if outcome.option_id == ALLOW_ALWAYS and scope is not None:
                policy.session_allowed.add(scope)
            if outcome.option_id in (ALLOW_ONCE, ALLOW_ALWAYS):
                approvals[call.tool_call_id] = True
            elif escalate:
                denied = metadata.get("denied")
                approvals[call.tool_call_id] = ToolDenied(
                    f"The user did not let it run outside the sandbox. Inside, it failed:\n{denied}"
                    if denied
                    else "The user did not let it run outside the sandbox, so it did not run."
                )
            else:
                approvals[call.tool_call_id] = ToolDenied(f"The user denied this call ({summary}).")
        calls = {call.tool_call_id: ToolDenied("No one can answer this call here.") for call in requests.calls}
        return requests.build_results(approvals=approvals, calls=calls)

    def cancel(self, session_id: str) -> None:
        """`session/cancel`: as Ctrl-C, the turn ends, what it finished is kept; text queued for it is dropped."""
        live = self.sessions.get(session_id)
        if live is not None and live.turn is not None:
            live.queued.clear()
            live.turn.cancel()

    async def extension(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        """`_code_puppy/steer` (into the running turn's next model request) and `_code_puppy/queue` (the next turn,
        run when the running one ends): `{"delivered": false}` when no turn of the session runs."""
        session_id, text = params.get("sessionId"), params.get("text")
        if not isinstance(session_id, str) or not isinstance(text, str) or not text.strip():
            raise RequestError.invalid_params({"message": "expected {'sessionId': ID, 'text': TEXT}"})
        live = self._live(session_id)
        if live.turn is None:
            return {"delivered": False}
        if name == "steer":
            return {"delivered": live.inbox.steer(text) != "closed"}
        live.queued.append(text)
        return {"delivered": True}

    async def close(self) -> None:
        """End every session: a running turn is cancelled and checkpointed, then its project closes."""
        for live in list(self.sessions.values()):
            if live.turn is not None:
                live.turn.cancel()
                await asyncio.wait([live.turn])
            with contextlib.suppress(Exception):
                await live.project.close()
        self.sessions.clear()
