"""`code-puppy mcp list` and `code-puppy mcp tools`: the configured MCP servers."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from code_puppy.cli.common import NAME, guarded

if TYPE_CHECKING:
    from pydantic_ai import RunContext

    from code_puppy.config import McpServerConfig
    from code_puppy.mcp.server import McpServer
    from code_puppy.sandbox import ProjectSandbox


@click.group()
def mcp() -> None:
    """Inspect the configured MCP servers."""


@mcp.command("list")
def mcp_list() -> None:
    """Start each enabled server and show its status and tool count."""

    _run_mcp_command(list_servers)


@mcp.command("tools")
@click.argument("name", type=NAME)
def mcp_tools(name: str) -> None:
    """Start server NAME and show its tools as the model sees them, with their descriptions."""

    _run_mcp_command(lambda project_root: show_tools(project_root, name))


def _run_mcp_command(command: Callable[[Path], int]) -> NoReturn:
    from code_puppy.paths import find_project_root

    sys.exit(guarded(lambda: command(find_project_root(Path.cwd()))))


EXIT_FAILED = 1


def list_servers(project_root: Path) -> int:
    """One line per configured server: name, transport, number of tools offered, status."""
    import asyncio

    from code_puppy.config import load_settings
    from code_puppy.sandbox import ProjectSandbox

    settings = load_settings(project_root)
    configs = settings.mcp_servers
    if not configs:
        click.echo("No MCP servers configured: add [mcp_servers.NAME] to config.toml (see the README).")
        return 0
    sandbox = ProjectSandbox(settings.sandbox, project_root)
    servers = [_server(name, config, project_root, sandbox) for name, config in configs.items()]
    rows = [("NAME", "TRANSPORT", "TOOLS", "STATUS"), *asyncio.run(_rows(servers))]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    for row in rows:
        click.echo("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[3]]))
    return 0


def _server(name: str, config: McpServerConfig, project_root: Path, sandbox: ProjectSandbox) -> McpServer:
    """The server to list; one whose `${VAR}` is missing is listed as failed, not started."""
    from code_puppy.config import ConfigError
    from code_puppy.mcp.server import McpServer, expand_env

    try:
        return McpServer(name, expand_env(name, config), project_root, sandbox=sandbox)
    except ConfigError as exc:
        return McpServer(name, config, project_root, "failed", str(exc).removeprefix(f"MCP server '{name}': "))


def _listing_context() -> RunContext[None]:
    """Listing tools asks no model, but a `RunContext` needs one."""
    from pydantic_ai import RunContext
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import RunUsage

    return RunContext(deps=None, model=TestModel(), usage=RunUsage())


async def _rows(servers: list[McpServer]) -> list[tuple[str, str, str, str]]:
    """Read while the servers run: stopping them clears their state."""
    from code_puppy.mcp.servers import McpServerGroup

    async with McpServerGroup([server for server in servers if server.config.enabled], report=lambda _: None) as group:
        await group.get_tools(_listing_context())
        rows: list[tuple[str, str, str, str]] = []
        for server in servers:
            count, status = "-", "disabled"
            if server.state == "running":
                count, status = str(len(group.names[server.name])), "running"
            elif server.config.enabled:
                status = f"{server.state}: {server.error}"
            rows.append((server.name, server.transport, count, status))
    return rows


def show_tools(project_root: Path, name: str) -> int:
    """Server NAME's tools under the names the model sees, with their permission names and descriptions."""
    import asyncio

    from code_puppy.config import ConfigError, load_settings
    from code_puppy.mcp.server import McpServer, expand_env
    from code_puppy.sandbox import ProjectSandbox

    settings = load_settings(project_root)
    configs = settings.mcp_servers
    if name not in configs:
        known = ", ".join(sorted(configs)) or "none configured"
        raise ConfigError(f"unknown MCP server '{name}' (configured: {known})")
    sandbox = ProjectSandbox(settings.sandbox, project_root)
    server = McpServer(name, expand_env(name, configs[name]), project_root, sandbox=sandbox)
    tools = asyncio.run(_tools(server))
    if isinstance(tools, str):
        click.echo(f"code-puppy: error: MCP server '{name}' failed to start: {tools}", err=True)
        return EXIT_FAILED
    for shown, permission, description in tools:
        click.echo(f"{shown}  (allow with: {permission})")
        for line in (description or "(no description)").strip().splitlines():
            click.echo(f"    {line.rstrip()}")
    if not tools:
        click.echo(f"MCP server '{name}' offers no tools.")
    return 0


async def _tools(server: McpServer) -> list[tuple[str, str, str | None]] | str:
    """(name the model sees, permission name, description) of each tool the server offers, or why it failed."""
    from code_puppy.mcp.servers import McpServerGroup
    from code_puppy.tools import MCP_PERMISSION_KEY

    async with McpServerGroup([server], report=lambda _: None) as group:
        tools = await group.get_tools(_listing_context())
        if server.state != "running":
            return server.error or server.state
        return [
            (name, (tool.tool_def.metadata or {})[MCP_PERMISSION_KEY], tool.tool_def.description)
            for name, tool in tools.items()
        ]
