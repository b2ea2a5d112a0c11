"""`McpServers`: the tools of the configured MCP servers, each server on pydantic-ai's `MCPToolset` (a FastMCP client).

Each server's tools go through pydantic-ai's toolset combinators: `filtered` (`allow_tools`/`deny_tools`), `prepared`
(the permission name `mcp__SERVER__TOOL` the policy reads), `renamed` (the name the model sees), and a
`CombinedToolset` merges the servers. This module adds what they lack: servers started lazily, all at once, each
within its timeout; one that fails to start or crashes reported in one line, its tools withdrawn, the run going on;
stdio servers under a shell that ends their process group; names that never clash with a built-in tool or another
server's (a clash renames, with a note).

Not used, and why:
- `load_mcp_toolsets` and its `${VAR:-default}` expansion: it reads one `mcpServers` JSON file, while our servers
  come from config.toml layers and trusted `.mcp.json` files, with keys it does not know (`timeout`, `tool_prefix`,
  `allow_tools`, `deny_tools`, `enabled`). It expands the whole file at once, and a missing variable is
  `ValueError("Environment variable ${X} is not defined")`, naming neither server nor key, where code-puppy exits 2
  naming both and `code-puppy mcp list` shows that one server failed while the others run. The expansion function
  itself is private (`pydantic_ai.mcp._expand_env_vars`). So `expand_env` is ours, with the same syntax.
- `prefixed`: a tool's final name is decided across all servers (a clash turns the prefixed name into
  `SERVER_TOOL`), so each server's one `renamed` map carries the prefix; a `prefixed` layer under it would spell the
  prefix twice.

`pydantic_ai.mcp` costs most of a second to import, so it is imported when the first server starts, never for a
run without servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelRetry, ToolFailed
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, CombinedToolset, ToolsetTool

from code_puppy.agents.permissions import MCP_PERMISSION_KEY, POLICY_TOOL_NAMES
from code_puppy.config import ConfigError, McpServerConfig, data_dir
from code_puppy.errors import one_line

if TYPE_CHECKING:
    from pydantic_ai.mcp import MCPToolset

ServerState = Literal["stopped", "running", "failed", "crashed"]
"""`stopped`: not started in this session (yet); `failed`: did not start; `crashed`: stopped answering mid-session."""

STOP_TIMEOUT = 10.0
"""Seconds a stopping server gets; the MCP SDK closes stdin, then sends SIGTERM and SIGKILL to the process group."""

PROCESS_GROUP_KEEPER = '"$@"; status=$?; trap "" TERM; kill -TERM 0 2>/dev/null; exit $status'
"""The `sh -c` script a stdio server runs under: the MCP SDK starts the shell as the leader of a new process group,
the server runs as its child, and when the server exits, for whatever reason, the shell ends the rest of the group
(SIGTERM) before it exits with the server's status. The SDK kills the group only when a server it is stopping will
not exit; a server that crashed (at start, say) left its children running."""

_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def report_to_stderr(message: str) -> None:
    print(f"code-puppy: {message}", file=sys.stderr, flush=True)


def permission_name(server: str, tool: str) -> str:
    """The name an allow-list uses for one MCP tool, independent of the prefix the model sees."""
    return f"mcp__{server}__{tool}"


def referenced_variables(config: McpServerConfig) -> set[str]:
    """The environment variables a server's config reads through `${VAR}`: secrets the shell tool must not see."""
    values = [config.command or "", *config.args, *config.env.values(), config.url or "", *config.headers.values()]
    return {match.group(1) for value in values for match in _ENV_REFERENCE.finditer(value)}


def expand_env(name: str, config: McpServerConfig) -> McpServerConfig:
    """`config` with `${VAR}` and `${VAR:-default}` expanded; a missing variable is a `ConfigError` naming it."""

    def expand(value: str, key: str) -> str:
        def substitute(match: re.Match[str]) -> str:
            variable, default = match.group(1), match.group(2)
            if variable in os.environ:
                return os.environ[variable]
            if default is not None:
                return default
            raise ConfigError(f"MCP server '{name}': environment variable {variable} is not set (used in {key})")

        return _ENV_REFERENCE.sub(substitute, value)

    return config.model_copy(
        update={
            "command": config.command and expand(config.command, "command"),
            "args": tuple(expand(arg, "args") for arg in config.args),
            "env": {key: expand(value, f"env.{key}") for key, value in config.env.items()},
            "cwd": config.cwd and expand(config.cwd, "cwd"),
            "url": config.url and expand(config.url, "url"),
            "headers": {key: expand(value, f"headers.{key}") for key, value in config.headers.items()},
        }
    )


def assign_names(wanted: Sequence[tuple[str, str, str]], reserved: frozenset[str]) -> list[str]:
    """Final names for `(server, tool, preferred name)` triples, in order.

    A preferred name that a built-in tool or another server's tool also wants becomes `SERVER_TOOL`; a name still
    taken gets `_2`, `_3`, …: a clash renames a tool, it never drops one.
    """
    wanted_by = Counter(preferred for _, _, preferred in wanted)
    taken = set(reserved)
    names: list[str] = []
    for server, tool, preferred in wanted:
        base = preferred if wanted_by[preferred] == 1 and preferred not in reserved else f"{_identifier(server)}_{tool}"
        name, suffix = base, 2
        while name in taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        taken.add(name)
        names.append(name)
    return names


def _identifier(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)


@dataclass
class McpServer:
    """One configured server (environment references already expanded) and its connection in this session."""

    name: str
    config: McpServerConfig
    project_root: Path
    state: ServerState = "stopped"
    error: str | None = None
    """Why the server failed or crashed, in one line."""
    toolset: MCPToolset[Any] | None = field(default=None, repr=False)
    _abandoned: asyncio.Future[Any] | None = field(default=None, repr=False)
    """A start given up on, still shutting its server down."""

    @property
    def transport(self) -> str:
        return "stdio" if self.config.command else "http"

    @property
    def log_file(self) -> Path:
        """Where a stdio server's stderr goes, so it never mixes with code-puppy's own output."""
        return data_dir() / "mcp-logs" / f"{_identifier(self.name)}.log"

    def preferred_name(self, tool: str) -> str:
        prefix = self.config.tool_prefix
        if prefix is False:
            return tool
        return f"{_identifier(self.name) if prefix is True else prefix}_{tool}"

    def offers(self, tool: str) -> bool:
        """Whether `allow_tools`/`deny_tools` let the model see `tool` (the server's own name for it)."""
        allow, deny = self.config.allow_tools, self.config.deny_tools
        if allow is not None and not any(fnmatch.fnmatchcase(tool, pattern) for pattern in allow):
            return False
        return not any(fnmatch.fnmatchcase(tool, pattern) for pattern in deny)

    async def start(self) -> None:
        """Connect (spawning a stdio server); a failure is recorded in `state` and `error`, never raised."""
        from pydantic_ai.mcp import MCPToolset

        timeout = self.config.timeout
        # The deadline below bounds the whole start, spawn included; the client's own one is only a backstop.
        timeouts: dict[str, Any] = {"init_timeout": timeout + 1, "read_timeout": timeout}
        log_start = 0
        if self.config.command:
            from fastmcp.client.transports import StdioTransport

            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            log_start = self.log_file.stat().st_size if self.log_file.exists() else 0
            cwd = self.project_root / (self.config.cwd or ".")
            command, args = self.config.command, list(self.config.args)
            if os.name == "posix":
                command, args = "/bin/sh", ["-c", PROCESS_GROUP_KEEPER, "sh", command, *args]
            # keep_alive=False: the process ends with the session instead of outliving it.
            client: Any = StdioTransport(
                command,
                args,
                env=self.config.env or None,
                cwd=str(cwd),
                keep_alive=False,
                log_file=self.log_file,
            )
            toolset = MCPToolset[Any](client, id=self.name, tool_error_behavior="failed", **timeouts)
        else:
            assert self.config.url is not None
            headers = self.config.headers or None
            toolset = MCPToolset[Any](
                self.config.url, id=self.name, headers=headers, tool_error_behavior="failed", **timeouts
            )
        entering = asyncio.ensure_future(toolset.__aenter__())
        try:
            await asyncio.wait([entering], timeout=timeout)
        finally:  # also when this start is cancelled: whatever it opened, `stop()` closes
            if not entering.done():
                # An unresponsive server takes the MCP client seconds to shut down (stdin closed, a grace period,
                # then SIGTERM): let that happen in the background while the run goes on.
                entering.cancel()
                self._abandoned = entering
            elif not entering.cancelled() and entering.exception() is None:
                self.toolset = toolset
        if self.toolset is not None:
            self.state, self.error = "running", None
        else:
            error = entering.exception() if entering.done() and not entering.cancelled() else None
            reason = self._reason(error, log_start) if error else f"no answer within {timeout:g} s"
            self.state, self.error = "failed", reason

    def _reason(self, exc: BaseException, log_start: int) -> str:
        reason = one_line(exc)
        if self.config.command and self.log_file.exists():
            with self.log_file.open("rb") as log:
                log.seek(log_start)
                lines = [line.strip() for line in log.read().decode(errors="replace").splitlines() if line.strip()]
            if lines:
                reason += f" (stderr: {lines[-1][:200]})"
        return reason

    async def stop(self) -> None:
        """Disconnect and end the process; shielded, so a cancelled run still cleans up."""
        toolset, abandoned = self.toolset, self._abandoned
        self.state, self.error, self.toolset, self._abandoned = "stopped", None, None, None
        with anyio.move_on_after(STOP_TIMEOUT, shield=True):
            if abandoned is not None:
                await asyncio.wait([abandoned])
                if not abandoned.cancelled():
                    abandoned.exception()  # retrieved: the start was already reported as failed
            if toolset is not None:
                with contextlib.suppress(Exception):
                    await toolset.__aexit__(None, None, None)


@dataclass
class _ServerTools(AbstractToolset[Any]):
    """A server's tools, under its own names, while it runs; none once it failed or crashed. A crash fails the call
    that met it, never the run."""

    server: McpServer
    report: Callable[[str], None]

    @property
    def id(self) -> str:
        return self.server.name

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        connection = self.server.toolset
        if self.server.state != "running" or connection is None:
            return {}
        try:
            return await connection.get_tools(ctx)
        except Exception as exc:
            self._crashed(exc)
            return {}

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        server, connection = self.server, self.server.toolset
        if server.state != "running" or connection is None:
            raise ToolFailed(f"MCP server '{server.name}' is not running ({server.error or server.state}).")
        try:
            return await connection.call_tool(name, tool_args, ctx, tool)
        except ModelRetry as exc:
            # MCPToolset turns protocol errors into retries; a closed connection means the server is gone, and
            # anything else fails this call without spending the run's retry budget.
            if not _connection_closed(exc):
                raise ToolFailed(exc.message) from exc
            error: Exception = exc
        except ToolFailed:
            raise
        except Exception as exc:
            error = exc
        self._crashed(error)
        raise ToolFailed(f"MCP server '{server.name}' crashed ({server.error}); its tools are no longer available.")

    def _crashed(self, error: Exception) -> None:
        server = self.server
        if server.state == "running":
            server.state, server.error = "crashed", one_line(error)
            self.report(f"MCP server '{server.name}' crashed: {server.error}; continuing without its tools")


class McpServerGroup(AbstractToolset[Any]):
    """The tools of several MCP servers under clash-free names. The servers start, all at once, on the first tool
    listing inside `async with`, and stop when the last `async with` exits."""

    def __init__(
        self,
        servers: Sequence[McpServer],
        *,
        reserved_names: frozenset[str] = POLICY_TOOL_NAMES,
        report: Callable[[str], None] = report_to_stderr,
    ) -> None:
        self.servers = list(servers)
        self.reserved_names = reserved_names
        self.report = report
        self.names: dict[str, dict[str, str]] = {server.name: {} for server in self.servers}
        """Per server, as of the latest listing: the name the model sees for each tool -> the server's own name."""
        self._offered = [self._offered_by(server) for server in self.servers]
        self._listed = CombinedToolset[Any]([])
        """The latest listing. Each tool it returned carries the toolsets it came from, so it dispatches every call,
        also one to a tool an earlier listing named."""
        self._entered = 0
        self._start_lock: asyncio.Lock | None = None
        self._noted_renames: set[tuple[str, str]] = set()

    def _offered_by(self, server: McpServer) -> AbstractToolset[Any]:
        def mark(ctx: RunContext[Any], tools: list[ToolDefinition]) -> list[ToolDefinition]:
            return [
                replace(
                    tool,
                    metadata={**(tool.metadata or {}), MCP_PERMISSION_KEY: permission_name(server.name, tool.name)},
                )
                for tool in tools
            ]

        return _ServerTools(server, self.report).filtered(lambda _, tool: server.offers(tool.name)).prepared(mark)

    @property
    def id(self) -> str:
        return "mcp_servers"

    async def __aenter__(self) -> McpServerGroup:
        self._entered += 1
        return self

    async def __aexit__(self, *args: Any) -> None:
        self._entered -= 1
        if self._entered == 0:
            await _run_to_end(asyncio.gather(*(server.stop() for server in self.servers)), cancel=False)

    async def start(self) -> None:
        """Start, all at once, the servers not yet tried in this session; report those that fail."""
        assert self._entered, "start servers only inside `async with group:`, which stops them"
        self._start_lock = self._start_lock or asyncio.Lock()
        async with self._start_lock:
            pending = [server for server in self.servers if server.state == "stopped"]
            await _run_to_end(asyncio.gather(*(server.start() for server in pending)), cancel=True)
        for server in pending:
            if server.state == "failed":
                self.report(f"MCP server '{server.name}' failed to start: {server.error}; continuing without its tools")

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        await self.start()
        listings = await asyncio.gather(*(offered.get_tools(ctx) for offered in self._offered))
        wanted = [
            (server.name, tool, server.preferred_name(tool))
            for server, listing in zip(self.servers, listings, strict=True)
            for tool in listing
        ]
        names: dict[str, dict[str, str]] = {server.name: {} for server in self.servers}
        for (server, tool, preferred), name in zip(wanted, assign_names(wanted, self.reserved_names), strict=True):
            names[server][name] = tool
            if name != preferred and (server, tool) not in self._noted_renames:
                self._noted_renames.add((server, tool))
                self.report(f"MCP tool '{tool}' of server '{server}' is offered as '{name}' (name clash)")
        self.names = names
        self._listed = CombinedToolset(
            [offered.renamed(names[server.name]) for server, offered in zip(self.servers, self._offered, strict=True)]
        )
        return await self._listed.get_tools(ctx)

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        return await self._listed.call_tool(name, tool_args, ctx, tool)


async def _run_to_end(work: asyncio.Future[Any], *, cancel: bool) -> None:
    """Await `work` (its own tasks) so that a cancelled caller cannot cut a server's start or stop short.

    Inside pydantic-ai's anyio task groups a cancelled caller is cancelled again at every await, which interrupts
    the MCP client's own clean-up halfway and leaves the server process running. So `work` gets at most one
    cancellation (`cancel`: a start is abandoned, a stop always finishes), the caller waits for it, then re-raises.
    """
    try:
        await asyncio.shield(work)
    except asyncio.CancelledError:
        if cancel:
            work.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait([work])
        if not work.cancelled():
            work.exception()  # retrieved: the caller's cancellation is what propagates
        raise


def _connection_closed(error: ModelRetry) -> bool:
    from fastmcp.exceptions import McpError
    from mcp.types import CONNECTION_CLOSED

    return isinstance(error.__cause__, McpError) and error.__cause__.error.code == CONNECTION_CLOSED


@dataclass
class McpServers(AbstractCapability[Any]):
    """The tools of the enabled MCP servers, gated by the permission policy like every other tool.

    Servers start when a run first lists its tools and stay up while the agent is entered (a session holds
    `async with agent:`; a headless run enters it once), then stop. One that fails to start or crashes is reported
    in one line and its tools are withdrawn; the run goes on. A missing `${VAR}` is a `ConfigError` here, at build.
    """

    servers: Mapping[str, McpServerConfig]
    _: KW_ONLY
    project_root: Path
    """Where stdio servers run (their `cwd` is relative to it)."""
    report: Callable[[str], None] = report_to_stderr
    """Receives the one-line notices: a server that failed or crashed, a tool renamed by a clash."""
    toolset: McpServerGroup | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        servers = [
            McpServer(name, expand_env(name, config), self.project_root)
            for name, config in self.servers.items()
            if config.enabled
        ]
        self.toolset = McpServerGroup(servers, report=self.report) if servers else None

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    def get_toolset(self) -> McpServerGroup | None:
        return self.toolset
