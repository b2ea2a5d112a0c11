"""`code-puppy acp`: the Agent Client Protocol over stdio, on the `agent-client-protocol` SDK.

This module answers `initialize` with nothing heavier than the SDK loaded; the project, the agent and pydantic-ai
(`runtime.py`) are imported when the first request needs them. stdout carries protocol messages only: the process's
file descriptor 1 is pointed at stderr before anything runs, so a stray print, a plugin or a child process that
writes to stdout lands on stderr, and the protocol goes out on a private copy of the original stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import acp
from acp import RequestError
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    AuthenticateResponse,
    ClientCapabilities,
    CloseSessionResponse,
    ForkSessionResponse,
    HttpMcpServer,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    McpCapabilities,
    McpServerStdio,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionForkCapabilities,
    SessionListCapabilities,
    SessionResumeCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
)

from code_puppy import __version__
from code_puppy.options import RunOptions

if TYPE_CHECKING:
    from code_puppy.acp.runtime import AcpRuntime

STDIN_LIMIT = 50 * 1024 * 1024
"""The longest line read from the client (embedded context can be large)."""

MAX_DEPTH = 128
"""The deepest a client's message may nest arrays and objects (ACP's own messages need a handful of levels)."""

EXTENSIONS = {"steer": "_code_puppy/steer", "queue": "_code_puppy/queue"}
"""The extension methods this agent answers, advertised in `initialize`'s `_meta` under `code_puppy`."""

McpServers = list[Any]
"""The `mcpServers` a client passes (stdio, HTTP, SSE or ACP descriptions, as the SDK parsed them)."""


@dataclass(frozen=True)
class AcpOptions:
    """What `code-puppy acp` was started with: the `RunOptions` each session's project starts from (its root is the
    session's `cwd`)."""

    run: RunOptions


class CodePuppyAgent:
    """The ACP agent (`acp.interfaces.Agent`): answers `initialize` itself and hands every session method to the
    `AcpRuntime`, loaded with the first of them."""

    def __init__(self, options: AcpOptions) -> None:
        self.options = options
        self.client: Client | None = None
        self.client_capabilities = ClientCapabilities()
        self._runtime: AcpRuntime | None = None
        self._loading: asyncio.Lock | None = None
        self._stdin_closed = False

    def on_connect(self, conn: Client) -> None:
        self.client = conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        self.client_capabilities = client_capabilities or ClientCapabilities()
        return InitializeResponse(
            protocol_version=min(protocol_version, acp.PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True,
                # Images and audio whatever the model: it is chosen per session (and switched), after this answer; a
                # prompt with one its model's profile refuses is the prompt's error.
                prompt_capabilities=PromptCapabilities(embedded_context=True, image=True, audio=True),
                mcp_capabilities=McpCapabilities(http=True, sse=False),
                session_capabilities=SessionCapabilities(
                    list=SessionListCapabilities(),
                    fork=SessionForkCapabilities(),
                    resume=SessionResumeCapabilities(),
                    close=SessionCloseCapabilities(),
                ),
            ),
            agent_info=Implementation(name="code-puppy", title="code-puppy", version=__version__),
            auth_methods=[],
            field_meta={"code_puppy": {"extensions": EXTENSIONS}},
        )

    async def runtime(self) -> AcpRuntime:
        """The sessions' runtime; pydantic-ai and the agent are imported (in a worker thread) the first time."""
        self._loading = self._loading or asyncio.Lock()
        async with self._loading:
            if self._runtime is None:
                assert self.client is not None, "the connection calls on_connect first"
                runtime_class = await asyncio.to_thread(_runtime_class)
                self._runtime = runtime_class(self.client, self.options.run, self.client_capabilities)
                if self._stdin_closed:
                    self._runtime.stop_turns()
        return self._runtime

    def stdin_closed(self) -> None:
        """The client writes no more: running turns are cancelled (their prompts answer `cancelled`), and so is a
        prompt read before stdin closed whose turn has not started."""
        self._stdin_closed = True
        if self._runtime is not None:
            self._runtime.stop_turns()

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: McpServers | None = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        return await (await self.runtime()).new_session(cwd, _supported(mcp_servers))

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: McpServers | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse:
        return await (await self.runtime()).load_session(cwd, session_id, _supported(mcp_servers))

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        return await (await self.runtime()).list_sessions(cwd)

    async def fork_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: McpServers | None = None,
        **kwargs: Any,
    ) -> ForkSessionResponse:
        return await (await self.runtime()).fork_session(cwd, session_id, _supported(mcp_servers))

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: McpServers | None = None,
        **kwargs: Any,
    ) -> ResumeSessionResponse:
        return await (await self.runtime()).resume_session(cwd, session_id, _supported(mcp_servers))

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse:
        if self._runtime is None:  # nothing loaded: no session is open
            raise RequestError(-32602, f"no session {session_id} is open here")
        return await self._runtime.close_session(session_id)

    async def authenticate(self, method_id: str, **kwargs: Any) -> AuthenticateResponse:
        # No auth methods are advertised: the model's credentials come from the environment and the config, as in the
        # terminal, and a missing one is the error of `session/new`.
        raise RequestError(-32602, f"unknown auth method {method_id!r}: code-puppy offers none")

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> SetSessionModeResponse:
        return await (await self.runtime()).set_mode(session_id, mode_id)

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse:
        return await (await self.runtime()).set_config_option(session_id, config_id, value)

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        return await (await self.runtime()).prompt(session_id, prompt)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        if self._runtime is not None:  # no runtime yet: no session, nothing runs
            self._runtime.cancel(session_id)

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if f"_{method}" not in EXTENSIONS.values():
            raise RequestError.method_not_found(f"_{method}")
        return await (await self.runtime()).extension(method.rsplit("/", 1)[1], params)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        pass  # none are defined; JSON-RPC notifications get no answer, so an unknown one is ignored

    async def close(self) -> None:
        """End every session: running turns cancelled and checkpointed, MCP servers stopped, stores closed."""
        if self._runtime is not None:
            await self._runtime.close()


def _runtime_class() -> type[AcpRuntime]:
    from code_puppy.acp.runtime import AcpRuntime

    return AcpRuntime


def _supported(servers: McpServers | None) -> list[McpServerStdio | HttpMcpServer]:
    """The client's MCP servers this agent can run (stdio and HTTP, as advertised); any other kind is an error."""
    supported: list[McpServerStdio | HttpMcpServer] = []
    for server in servers or []:
        if not isinstance(server, McpServerStdio | HttpMcpServer):
            name = getattr(server, "name", "?")
            raise RequestError.invalid_params(
                {"message": f"MCP server '{name}': only stdio and http servers are supported"}
            )
        supported.append(server)
    return supported


async def _stdio(protocol_out: int) -> tuple[asyncio.StreamReader, Callable[[bytes], Awaitable[None]]]:
    """stdin as a stream, and how to write to the protocol's stdout: pipes (an editor) without blocking, a file or
    a terminal through a thread."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=STDIN_LIMIT)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    except ValueError:  # a regular file
        threading.Thread(target=_feed, args=(loop, reader), daemon=True, name="code-puppy acp stdin").start()
    out = os.fdopen(protocol_out, "wb", buffering=0)
    try:
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, out)
    except ValueError:  # a regular file

        async def write_file(data: bytes) -> None:
            await asyncio.to_thread(out.write, data)

        return reader, write_file
    writer = asyncio.StreamWriter(transport, protocol, None, loop)

    async def write_pipe(data: bytes) -> None:
        writer.write(data)
        await writer.drain()

    return reader, write_pipe


def _feed(loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader) -> None:
    try:
        while data := os.read(sys.stdin.fileno(), 65536):
            loop.call_soon_threadsafe(reader.feed_data, data)
    finally:
        loop.call_soon_threadsafe(reader.feed_eof)


class StdioTransport:
    """Newline-delimited JSON-RPC messages on stdin and the protocol's stdout (the SDK's `Transport` protocol).

    The SDK's own stdio framing drops a line that is not JSON without an answer, stops at a line that is JSON but not
    an object, and leaves an object that is neither a request nor a response unanswered (or fails on it). Here every
    such line gets its JSON-RPC error response (`-32700` parse error, for JSON nested deeper than `MAX_DEPTH` too;
    `-32600` invalid request, with the request's `id` when it has a valid one) and the connection goes on.

    When stdin closes, `stdin_closed` is called and the end of input is reported only once every request read has
    been answered and its answer written: the SDK cancels the handlers still running when the input ends, so a request
    read together with the end of input lost its answer.
    """

    def __init__(
        self, reader: asyncio.StreamReader, write: Callable[[bytes], Awaitable[None]], stdin_closed: Callable[[], None]
    ) -> None:
        self._reader = reader
        self._write = write
        self._stdin_closed = stdin_closed
        self._lock = asyncio.Lock()
        self._unanswered: list[str | int | None] = []
        """The ids of the requests read and not yet answered, in the order read (a client may reuse an id)."""
        self._all_answered = asyncio.Event()
        self._all_answered.set()

    async def send(self, message: dict[str, Any]) -> None:
        try:
            await self._put(message)
        finally:  # written or not (the client may be gone), the request is done with
            if "method" not in message and message.get("id") in self._unanswered:
                self._unanswered.remove(message["id"])
                if not self._unanswered:
                    self._all_answered.set()

    async def _put(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n"
        async with self._lock:
            await self._write(line.encode())

    async def receive(self) -> dict[str, Any] | None:
        while True:
            try:
                line = await self._reader.readline()
            except ValueError:  # a line over STDIN_LIMIT: what was read of it is gone
                await self._error(RequestError.invalid_request({"details": "message too long"}))
                continue
            if not line:
                self._stdin_closed()
                await self._all_answered.wait()
                return None
            if not line.strip():
                continue
            message: Any = None
            try:
                message = json.loads(line)
                too_deep = _deeper(message, MAX_DEPTH)
            except RecursionError:  # deeper than the parser itself goes
                too_deep = True
            except ValueError as exc:
                await self._error(RequestError.parse_error({"details": str(exc)}))
                continue
            if too_deep:
                await self._error(RequestError.parse_error({"details": f"nested deeper than {MAX_DEPTH} levels"}))
                continue
            if not isinstance(message, dict):
                await self._error(RequestError.invalid_request({"details": "a JSON-RPC message is an object"}))
                continue
            message = cast(dict[str, Any], message)
            if problem := _invalid(message):
                # Without a method the id may be one of this side's own requests: null, so the client never takes
                # the error for the answer to a request of its own.
                answer_id = _valid_id(message.get("id")) if "method" in message else None
                await self._error(RequestError.invalid_request({"details": problem}), answer_id)
                continue
            if "method" in message and "id" in message:
                self._unanswered.append(message["id"])
                self._all_answered.clear()
            return message

    async def close(self) -> None:
        pass  # stdout stays open for the process's life

    async def _error(self, error: RequestError, request_id: str | int | None = None) -> None:
        await self._put({"jsonrpc": "2.0", "id": request_id, "error": error.to_error_obj()})


def _deeper(value: Any, limit: int) -> bool:
    """Whether JSON `value` nests arrays and objects more than `limit` deep (the handlers, the SDK and pydantic recurse
    into what they are given)."""
    level: list[Any] = [value]
    for _ in range(limit):
        level = [
            item
            for container in level
            if isinstance(container, dict | list)
            for item in (container.values() if isinstance(container, dict) else container)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        ]
        if not level:
            return False
    return any(isinstance(item, dict | list) for item in level)


def _valid_id(request_id: Any) -> str | int | None:
    """`request_id` when it is one JSON-RPC allows (a string, an integer or null), else None."""
    return request_id if isinstance(request_id, str | int) and not isinstance(request_id, bool) else None


def _invalid(message: dict[str, Any]) -> str | None:
    """Why `message` is neither a JSON-RPC request (or notification) nor a response, or None."""
    if message.get("id") is not None and _valid_id(message["id"]) is None:
        return "id must be a string, an integer or null"
    if "method" in message:
        if not isinstance(message["method"], str):
            return "method must be a string"
        if message.get("params") is not None and not isinstance(message["params"], dict | list):
            return "params must be an object or an array"
        return None
    if "id" not in message or ("result" in message) == ("error" in message):
        return "a request has a method; a response has an id and either a result or an error"
    if "error" in message and not isinstance(message["error"], dict):
        return "error must be an object"
    return None


def serve(options: AcpOptions) -> int:
    """Serve one client on stdin/stdout until stdin closes, SIGTERM or SIGINT; 0 then."""
    protocol_out = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray output goes to stderr from now on
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="code-puppy acp: %(message)s")
    asyncio.run(_serve(options, protocol_out))
    return 0


async def _serve(options: AcpOptions, protocol_out: int) -> None:
    reader, write = await _stdio(protocol_out)
    agent = CodePuppyAgent(options)
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    try:
        # Unstable protocol on: session/fork, session/resume and session/close are in it (SDK 0.12).
        transport = StdioTransport(reader, write, agent.stdin_closed)
        await acp.run_agent(cast(acp.Agent, agent), transport, use_unstable_protocol=True)
    except asyncio.CancelledError:
        pass  # a signal: the sessions end below as when stdin closes
    finally:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(agent.close())
