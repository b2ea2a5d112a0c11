"""The sessions an ACP client opens, each a code-puppy session of the sessions store, run on the shared run path.

Each session has its own `Project` (its `cwd` finds the project root as in the terminal, and the client's MCP servers
join the configured ones for it alone), its agent built once, its permission mode, model and steering inbox. A prompt
is one `run_turn`, as in the chat and `-p`; approvals go to the client as `session/request_permission`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pydantic_ai
from acp import RequestError, update_agent_message_text
from acp.helpers import update_available_commands, update_current_mode
from acp.interfaces import Client
from acp.schema import (
    ClientCapabilities,
    CloseSessionResponse,
    ConfigOptionUpdate,
    ForkSessionResponse,
    HttpMcpServer,
    ListSessionsResponse,
    LoadSessionResponse,
    McpServerStdio,
    NewSessionResponse,
    PromptResponse,
    ResumeSessionResponse,
    SessionInfo,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
)
from pydantic_ai import RunContext
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

from code_puppy.acp.approvals import ask_client
from code_puppy.acp.commands import SessionCommands
from code_puppy.acp.files import ClientFiles
from code_puppy.acp.live import MODES, LiveSession
from code_puppy.acp.prompts import Prompt, prompt_parts, refused_attachment, stop_reason
from code_puppy.acp.updates import UpdateSink, replay
from code_puppy.config import McpServerConfig
from code_puppy.core.command_lines import run_command_lines
from code_puppy.core.project import Project
from code_puppy.core.turn import TurnOutcome
from code_puppy.errors import ConfigError, one_line
from code_puppy.options import PermissionMode, RunOptions
from code_puppy.paths import find_project_root
from code_puppy.run.history_persistence import recover_interrupted_turn
from code_puppy.sessions.catalog import SessionInfo as StoredSession
from code_puppy.sessions.session import Session, find_session

pydantic_ai.BANNER_ENABLED = False
logger = logging.getLogger(__name__)


def config_failure(error: ConfigError) -> RequestError:
    """A config, model or store error as the JSON-RPC error of the request it affects, with the CLI's one line."""
    return RequestError(-32603, str(error), {"kind": type(error).__name__})


def unknown_session(session_id: str) -> RequestError:
    return RequestError(-32602, f"no session {session_id} is open here")


def stored(project: Project, session_id: str) -> StoredSession:
    """The stored session whose id is exactly `session_id` (ACP clients pass whole ids, never prefixes)."""
    info = find_session(project.store, session_id)
    if info.id != session_id:
        raise ConfigError(f"no session matches '{session_id}' (code-puppy sessions list --all shows them)")
    return info


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


class AcpRuntime:
    """The sessions of one client connection."""

    def __init__(self, client: Client, options: RunOptions, capabilities: ClientCapabilities) -> None:
        self.client = client
        self.options = options
        self.capabilities = capabilities
        self.sessions: dict[str, LiveSession] = {}
        self.stopping = False
        """Whether stdin closed: no turn starts any more, every prompt answers `cancelled`."""

    async def _project(
        self, cwd: str, servers: list[McpServerStdio | HttpMcpServer], commands: SessionCommands
    ) -> Project:
        path = Path(cwd)
        if not path.is_absolute() or not path.is_dir():
            raise RequestError(-32602, f"cwd {cwd!r} is not an absolute path to a directory")
        options = replace(self.options, project_root=find_project_root(path))
        try:
            project = await asyncio.to_thread(Project, options)
        except ConfigError as exc:
            raise config_failure(exc) from None
        if extra := client_servers(servers):
            project.settings = project.settings.model_copy(
                update={"mcp_servers": {**project.settings.mcp_servers, **extra}}
            )
        try:
            await project.start(commands.register)
        except ConfigError as exc:
            await project.close()
            raise config_failure(exc) from None
        for line in commands.load_files(project.root):
            logger.warning("%s", line)
        return project

    def _live(self, session_id: str) -> LiveSession:
        live = self.sessions.get(session_id)
        if live is None:
            raise unknown_session(session_id)
        return live

    async def new_session(self, cwd: str, servers: list[McpServerStdio | HttpMcpServer]) -> NewSessionResponse:
        commands = SessionCommands()
        project = await self._project(cwd, servers, commands)
        try:
            session = await Session.start(project.store, project.root, model=project.model_name)
        except ConfigError as exc:
            await project.close()
            raise config_failure(exc) from None
        live = self.sessions[session.id] = LiveSession(project, session, project.model_name, commands=commands)
        self._announce_commands(live)
        return NewSessionResponse(session_id=session.id, modes=live.modes(), config_options=live.config_options())

    async def load_session(
        self, cwd: str, session_id: str, servers: list[McpServerStdio | HttpMcpServer]
    ) -> LoadSessionResponse:
        live = await self._open(cwd, session_id, servers)
        for update in replay(live.project.root, live.session.messages):
            await self.client.session_update(live.session.id, update)
        self._announce_commands(live)
        return LoadSessionResponse(modes=live.modes(), config_options=live.config_options())

    async def resume_session(
        self, cwd: str, session_id: str, servers: list[McpServerStdio | HttpMcpServer]
    ) -> ResumeSessionResponse:
        """`session/load` without the replay: the client shows the conversation already."""
        live = await self._open(cwd, session_id, servers)
        self._announce_commands(live)
        return ResumeSessionResponse(modes=live.modes(), config_options=live.config_options())

    async def _open(self, cwd: str, session_id: str, servers: list[McpServerStdio | HttpMcpServer]) -> LiveSession:
        """Open the stored session `session_id` (exactly that id) for `cwd`'s project; one open here is reopened."""
        if (open_already := self.sessions.get(session_id)) is not None:
            if open_already.running is not None:
                raise RequestError(-32600, f"session {session_id} is running a turn")
            await self.close_session(session_id)
        commands = SessionCommands()
        project = await self._project(cwd, servers, commands)
        try:
            session = await Session.resume(project.store, stored(project, session_id), model=project.model_name)
            await recover_interrupted_turn(session)
        except ConfigError as exc:
            await project.close()
            raise RequestError(-32602, str(exc)) from None
        live = self.sessions[session.id] = LiveSession(project, session, project.model_name, commands=commands)
        return live

    async def fork_session(
        self, cwd: str, session_id: str, servers: list[McpServerStdio | HttpMcpServer]
    ) -> ForkSessionResponse:
        """A new session of `cwd`'s project that starts with the stored history of `session_id` (sharing its stored
        messages, as the store forks), which goes on unchanged."""
        commands = SessionCommands()
        project = await self._project(cwd, servers, commands)
        try:
            session = await Session.fork(project.store, stored(project, session_id), model=project.model_name)
        except ConfigError as exc:
            await project.close()
            raise RequestError(-32602, str(exc)) from None
        live = self.sessions[session.id] = LiveSession(project, session, project.model_name, commands=commands)
        self._announce_commands(live)
        return ForkSessionResponse(session_id=session.id, modes=live.modes(), config_options=live.config_options())

    async def close_session(self, session_id: str) -> CloseSessionResponse:
        """`session/close`: a running turn is cancelled and saved, then the session's MCP servers stop."""
        live = self.sessions.pop(session_id, None)
        if live is None:
            raise unknown_session(session_id)
        await self._end(live)
        return CloseSessionResponse()

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
            raise RequestError(-32602, f"unknown mode {mode_id!r}; one of {', '.join(MODES)}")
        try:
            live.project.switch_mode(mode)
        except ConfigError as exc:
            raise config_failure(exc) from None
        return SetSessionModeResponse()

    async def set_config_option(
        self, session_id: str, config_id: str, value: str | bool
    ) -> SetSessionConfigOptionResponse:
        live = self._live(session_id)
        if config_id != "model" or not isinstance(value, str):
            raise RequestError(-32602, f"unknown option {config_id!r}")
        try:
            live.switch_model(value)
        except ConfigError as exc:
            raise config_failure(exc) from None
        return SetSessionConfigOptionResponse(config_options=live.config_options())

    async def prompt(self, session_id: str, blocks: list[Any]) -> PromptResponse:
        live = self._live(session_id)
        if live.running is not None:
            raise RequestError(
                -32600, "a turn is running: send text into it with _code_puppy/steer or _code_puppy/queue"
            )
        text, attachments = prompt_parts(blocks)
        if live.announcing is not None:
            await live.announcing
        if (reply := await self._command(live, text)) is not None:
            await self.client.session_update(live.session.id, update_agent_message_text(reply))
            return PromptResponse(stop_reason="end_turn")
        command = None
        if (found := live.commands.file_command(text)) is not None:
            # A file command's turn: its body is the prompt, its `allowed-tools` narrow the tools, and its `model`
            # (unless `-m` chose one) replaces the session's for this turn only.
            command, arguments = found
            text = command.expand(arguments)
        with contextlib.ExitStack() as narrowed:
            notes: list[str] = []
            model = narrowed.enter_context(live.command(command, warn=notes.append))
            if (refused := refused_attachment(model, attachments)) is not None:
                raise RequestError(-32602, refused)
            files = ClientFiles.of(self.client, live.session.id, self.capabilities)
            sink = UpdateSink(
                live.project.root, lambda update: self.client.session_update(live.session.id, update), files
            )
            for note in notes:
                sink.warning(note)
            if self.stopping:
                return PromptResponse(stop_reason="cancelled")
            handler = asyncio.current_task()
            live.running = asyncio.create_task(self._turn(live, Prompt(text, attachments, model, files, command), sink))
            try:
                outcome = await asyncio.shield(live.running)
            except asyncio.CancelledError:
                if live.running.cancelled() and handler is not None and not handler.cancelling():
                    return PromptResponse(stop_reason="cancelled")  # cancelled before its first step: nothing ran
                # The connection is closing: the turn ends and is saved first.
                live.running.cancel()
                await asyncio.wait([live.running])
                raise
            finally:
                live.running = None
        await sink.flush()
        if live.session.notice:
            sink.warning(live.session.notice)
            await sink.flush()
        return PromptResponse(stop_reason=stop_reason(outcome))

    async def _turn(self, live: LiveSession, prompt: Prompt, sink: UpdateSink) -> TurnOutcome:
        async def queued(result: Any) -> str | None:
            if live.queued:
                text = live.queued.pop(0)
                sink.say(text)
                return text
            return None

        async def ask(ctx: RunContext[Any], requests: DeferredToolRequests, token: str) -> DeferredToolResults:
            return await ask_client(
                self.client,
                live.session.id,
                live.project,
                requests,
                cancel=lambda: self.cancel(live.session.id),
                files=prompt.files,
            )

        text = prompt.text
        if prompt.command is not None:  # its `!` lines, asked about as the turn's calls are
            text = await run_command_lines(live, prompt.command, text, ask=ask, warn=sink.warning)
        async with live.steerable(cancel=lambda: self.cancel(live.session.id)):  # as `session/cancel`
            return await live.turn(
                text,
                sink,
                model=prompt.model,
                attachments=prompt.attachments,
                ask=ask,
                files=prompt.files,
                follow_up=queued,
            )

    def _announce_commands(self, live: LiveSession) -> None:
        """Send the session's slash commands once the client has the session's id (the answer goes out first)."""

        async def announce() -> None:
            await asyncio.sleep(0.05)
            with contextlib.suppress(Exception):
                await self.client.session_update(live.session.id, update_available_commands(live.commands.available()))

        live.announcing = asyncio.create_task(announce())

    async def _command(self, live: LiveSession, text: str) -> str | None:
        """Run the slash command `text` starts with, its reply; None when it starts with none (a model turn)."""
        if not text.startswith("/"):
            return None
        name, _, args = text[1:].partition(" ")
        args = args.strip()
        try:
            if name == "permissions":
                if args:
                    await self.set_mode(live.session.id, args)
                    await self.client.session_update(live.session.id, update_current_mode(args))
                return f"permission mode: {live.project.policy.mode}"
            if name == "model":
                if args:
                    response = await self.set_config_option(live.session.id, "model", args)
                    update = ConfigOptionUpdate(
                        session_update="config_option_update", config_options=response.config_options or []
                    )
                    await self.client.session_update(live.session.id, update)
                return f"model: {live.model_name}"
            return await live.commands.run_plugin(name, args)
        except RequestError as exc:
            return str(exc)
        except Exception as exc:  # a plugin's command: its failure is one line, as in the chat
            return f"✗ {one_line(exc, typed=True)}"

    def stop_turns(self) -> None:
        """stdin closed: every running turn is cancelled (as by `session/cancel`), and no other starts."""
        self.stopping = True
        for session_id in self.sessions:
            self.cancel(session_id)

    def cancel(self, session_id: str) -> None:
        """`session/cancel`: as Ctrl-C, the turn ends, what it finished is kept; text queued for it is dropped."""
        live = self.sessions.get(session_id)
        if live is not None and live.running is not None:
            live.queued.clear()
            live.running.cancel()

    async def extension(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        """`_code_puppy/steer` (into the running turn's next model request) and `_code_puppy/queue` (the next turn,
        run when the running one ends): `{"delivered": false}` when no turn of the session runs."""
        session_id, text = params.get("sessionId"), params.get("text")
        if not isinstance(session_id, str) or not isinstance(text, str) or not text.strip():
            raise RequestError(-32602, "expected {'sessionId': ID, 'text': TEXT}")
        live = self._live(session_id)
        if live.running is None:
            return {"delivered": False}
        if name == "steer":
            return {"delivered": live.inbox.steer(text) != "closed"}
        live.queued.append(text)
        return {"delivered": True}

    async def close(self) -> None:
        """End every session: a running turn is cancelled and checkpointed, then its project closes."""
        for live in list(self.sessions.values()):
            await self._end(live)
        self.sessions.clear()

    @staticmethod
    async def _end(live: LiveSession) -> None:
        if live.announcing is not None:
            live.announcing.cancel()
        if live.running is not None:
            live.running.cancel()
            await asyncio.wait([live.running])
        with contextlib.suppress(Exception):
            await live.project.close()
