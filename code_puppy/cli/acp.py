"""`code-puppy acp`: the Agent Client Protocol server for editors."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from code_puppy.cli.common import NAME, debug_requested, ensure_own_scripts_on_path, guarded, leave
from code_puppy.options import PERMISSION_MODES

if TYPE_CHECKING:
    pass


@click.command("acp")
@click.option(
    "-m", "--model", type=NAME, metavar="MODEL", help="The sessions' default model (a model string or a [models] name)."
)
@click.option(
    "--permission-mode",
    type=click.Choice(PERMISSION_MODES),
    help="The sessions' starting permission mode (default from config: ask); the editor can switch it.",
)
@click.option("--allow", "allow", multiple=True, metavar="PATTERN", help="Allow a shell command pattern (repeatable).")
@click.option("--max-requests", type=click.IntRange(min=1), metavar="N", help="Stop a turn after N model requests.")
@click.option("--no-mcp", is_flag=True, help="Run without the configured MCP servers (the editor's still run).")
@click.option("--no-plugins", is_flag=True, help="Run without plugins.")
def acp_command(
    *,
    model: str | None,
    permission_mode: str | None,
    allow: tuple[str, ...],
    max_requests: int | None,
    no_mcp: bool,
    no_plugins: bool,
) -> None:
    """Serve the Agent Client Protocol on stdin/stdout, for editors (Zed, JetBrains, Neovim, Emacs).

    The editor starts `code-puppy acp` and talks JSON-RPC to it; sessions are the terminal's.
    """
    ensure_own_scripts_on_path()

    def run() -> int:
        from code_puppy.acp.server import AcpOptions, serve
        from code_puppy.options import RunOptions

        options = RunOptions(
            project_root=Path.cwd(),
            model=model,
            permission_mode=permission_mode,  # type: ignore[arg-type]  # click.Choice guarantees the literal
            allow=allow,
            max_requests=max_requests,
            no_mcp=no_mcp,
            no_plugins=no_plugins,
            debug=debug_requested(),
        )
        return serve(AcpOptions(options))

    leave(guarded(run))
