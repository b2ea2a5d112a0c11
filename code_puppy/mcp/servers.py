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
  `ValueError("Environment variable ${X} is not defined")`, naming neither server nor key, where code-puppy skips
  that one server with a line naming both, and `code-puppy mcp list` shows that one server failed while the others
  run. The expansion function itself is private (`pydantic_ai.mcp._expand_env_vars`). So `expand_env` is ours, with
  the same syntax.
- `prefixed`: a tool's final name is decided across all servers (a clash turns the prefixed name into
  `SERVER_TOOL`), so each server's one `renamed` map carries the prefix; a `prefixed` layer under it would spell the
  prefix twice.

`pydantic_ai.mcp` costs most of a second to import, so it is imported when the first server starts, never for a
run without servers.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, CombinedToolset, ToolsetTool

from code_puppy.config import McpServerConfig
from code_puppy.errors import ConfigError, say
from code_puppy.mcp.server import McpServer, ServerTools, expand_env, identifier, permission_name
from code_puppy.sandbox import ProjectSandbox
from code_puppy.tools import MCP_PERMISSION_KEY, POLICY_TOOL_NAMES


def assign_names(wanted: Sequence[tuple[str, str, str]], reserved: frozenset[str]) -> list[str]:
    """Final names for `(server, tool, preferred name)` triples, in order.

    A preferred name that a built-in tool or another server's tool also wants becomes `SERVER_TOOL`; a name still
    taken gets `_2`, `_3`, …: a clash renames a tool, it never drops one.
    """
    wanted_by = Counter(preferred for _, _, preferred in wanted)
    taken = set(reserved)
    names: list[str] = []
    for server, tool, preferred in wanted:
        base = preferred if wanted_by[preferred] == 1 and preferred not in reserved else f"{identifier(server)}_{tool}"
        name, suffix = base, 2
        while name in taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        taken.add(name)
        names.append(name)
    return names


class McpServerGroup(AbstractToolset[Any]):
    """The tools of several MCP servers under clash-free names. The servers start, all at once, on the first tool
    listing inside `async with`, and stop when the last `async with` exits."""

    def __init__(
        self,
        servers: Sequence[McpServer],
        *,
        reserved_names: frozenset[str] = POLICY_TOOL_NAMES,
        report: Callable[[str], None] = say,
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

        return ServerTools(server, self.report).filtered(lambda _, tool: server.offers(tool.name)).prepared(mark)

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


@dataclass
class McpServers(AbstractCapability[Any]):
    """The tools of the enabled MCP servers, gated by the permission policy like every other tool.

    Servers start when a run first lists its tools and stay up while the agent is entered (a session holds
    `async with agent:`; a headless run enters it once), then stop. One that fails to start or crashes is reported
    in one line and its tools are withdrawn; the run goes on. One whose config names a `${VAR}` that is not set is
    skipped with one line when the agent is built.
    """

    servers: Mapping[str, McpServerConfig]
    _: KW_ONLY
    project_root: Path
    """Where stdio servers run (their `cwd` is relative to it)."""
    sandbox: ProjectSandbox | None = None
    """The sandbox of the servers with `sandbox = true`."""
    report: Callable[[str], None] = say
    """Receives the one-line notices: a server that failed or crashed, a tool renamed by a clash."""
    toolset: McpServerGroup | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        servers: list[McpServer] = []
        for name, config in self.servers.items():
            if not config.enabled:
                continue
            try:
                expanded = expand_env(name, config)
            except ConfigError as exc:  # one server's missing secret stops no run, as its crash would not
                self.report(f"{exc}; continuing without its tools")
                continue
            servers.append(McpServer(name, expanded, self.project_root, sandbox=self.sandbox))
        self.toolset = McpServerGroup(servers, report=self.report) if servers else None

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    def get_toolset(self) -> McpServerGroup | None:
        return self.toolset
