"""`code-puppy web`: a local dashboard of sessions and live runs, in the browser."""

from __future__ import annotations

from pathlib import Path

import click

from code_puppy.cli.common import NAME, debug_requested, ensure_own_scripts_on_path, guarded, leave
from code_puppy.options import PERMISSION_MODES


@click.command("web")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, help="0 picks a free port.")
@click.option("--host", default="127.0.0.1", show_default=True, type=NAME, help="The address to listen on.")
@click.option("--token", type=NAME, metavar="TOKEN", help="The access token (default: a new random one).")
@click.option("--no-open", is_flag=True, help="Do not open the browser.")
@click.option("-m", "--model", type=NAME, metavar="MODEL", help="The runs' default model (default from config).")
@click.option("--permission-mode", type=click.Choice(PERMISSION_MODES), help="The runs' default permission mode.")
def web(
    *, port: int, host: str, token: str | None, no_open: bool, model: str | None, permission_mode: str | None
) -> None:
    """Serve a dashboard of this machine's sessions and live runs on 127.0.0.1, behind a token.

    Prints one line, the address to open (the token in it); new runs start in the current directory.
    """
    ensure_own_scripts_on_path()

    def run() -> int:
        from code_puppy.options import RunOptions
        from code_puppy.paths import find_project_root
        from code_puppy.web.server import WebOptions, serve

        options = RunOptions(
            project_root=find_project_root(Path.cwd()),
            model=model,
            permission_mode=permission_mode,  # type: ignore[arg-type]  # click.Choice guarantees the literal
            debug=debug_requested(),
        )
        return serve(WebOptions(options, host=host, port=port, token=token, open_browser=not no_open))

    leave(guarded(run))
