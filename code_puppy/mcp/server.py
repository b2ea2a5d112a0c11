"""One MCP server: its configuration with `${VAR}` expanded, its process and connection, and its tools kept apart
from its crashes (`servers.py` puts the servers together)."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
from pydantic_ai import RunContext
from pydantic_ai.exceptions import ModelRetry, ToolFailed
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool

from code_puppy.config import ConfigError, McpServerConfig, data_dir
from code_puppy.errors import one_line
from code_puppy.sandbox import ProjectSandbox, SandboxUnavailable

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


def identifier(text: str) -> str:
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
    sandbox: ProjectSandbox | None = field(default=None, repr=False, kw_only=True)
    """The sandbox a server with `sandbox = true` runs in."""

    @property
    def transport(self) -> str:
        return "stdio" if self.config.command else "http"

    @property
    def log_file(self) -> Path:
        """Where a stdio server's stderr goes, so it never mixes with code-puppy's own output."""
        return data_dir() / "mcp-logs" / f"{identifier(self.name)}.log"

    def preferred_name(self, tool: str) -> str:
        prefix = self.config.tool_prefix
        if prefix is False:
            return tool
        return f"{identifier(self.name) if prefix is True else prefix}_{tool}"

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
            if self.config.sandbox:
                try:
                    command, *args = self._sandboxed([command, *args], cwd)
                except SandboxUnavailable as exc:
                    self.state, self.error = "failed", f"sandbox = true, and {exc}"
                    return
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

    def _sandboxed(self, argv: list[str], cwd: Path) -> list[str]:
        if self.sandbox is None:
            raise SandboxUnavailable("no sandbox was given to this server")
        return self.sandbox.get().argv(argv, cwd=cwd)

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
class ServerTools(AbstractToolset[Any]):
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


def _connection_closed(error: ModelRetry) -> bool:
    from fastmcp.exceptions import McpError
    from mcp.types import CONNECTION_CLOSED

    return isinstance(error.__cause__, McpError) and error.__cause__.error.code == CONNECTION_CLOSED
