"""`code-puppy web`'s server: the checks before it listens, the one line it prints, and uvicorn serving the app."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import secrets
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from code_puppy.errors import ConfigError
from code_puppy.options import RunOptions


@dataclass(frozen=True)
class WebOptions:
    """What `code-puppy web` was asked."""

    run: RunOptions
    """The runs the dashboard starts: the project (the current directory), the model and mode when given."""
    host: str = "127.0.0.1"
    port: int = 0
    """0: a free port, the one printed."""
    token: str | None = None
    """None: a new random one; required for a host that is not a loopback address."""
    open_browser: bool = True


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on `host:port`, before anything is printed: the address printed is one that answers.

    Raises:
        ConfigError: The address cannot be used, in one line.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def serve(options: WebOptions) -> int:
    """Check, open the store, listen, print the address line, open the browser, serve until SIGINT or SIGTERM.

    Raises:
        ConfigError: A non-loopback host without `--token`, an address in use, a store that cannot be opened.
    """
    if not loopback(options.host) and options.token is None:
        raise ConfigError(f"--host {options.host} is reachable from other machines: set --token TOKEN explicitly")
    if options.token is not None and len(options.token) < 8:
        raise ConfigError("--token: use at least 8 characters")
    import uvicorn

    from code_puppy.config import load_settings
    from code_puppy.models import choose_model_name
    from code_puppy.sessions.store import open_store
    from code_puppy.web.app import Dashboard, build_app
    from code_puppy.web.live import LiveRuns

    token = options.token or secrets.token_urlsafe(24)
    opener: Path | None = None
    settings = load_settings(options.run.project_root)
    store = open_store()
    try:
        store.sessions.recent(None, limit=1)  # a store that cannot be read says so now, not on the first page
        runs = LiveRuns(options.run)
        try:
            model = choose_model_name(settings, options.run.model)
        except ConfigError:  # none chosen yet: the page asks for one with each run
            model = ""
        dashboard = Dashboard(
            store,
            runs,
            model=model,
            mode=options.run.permission_mode or settings.permissions.mode,
        )
        sock = listen(options.host, options.port)
        app = build_app(dashboard, token=token, on_shutdown=runs.close)
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, timeout_graceful_shutdown=2, lifespan="on", log_config=None
        )
        server = uvicorn.Server(config)
        dashboard.stopping = lambda: server.should_exit
        shown = f"[{options.host}]" if ":" in options.host else options.host
        url = f"http://{shown}:{sock.getsockname()[1]}/?token={token}"
        print(f"code-puppy web: {url}", flush=True)
        if options.open_browser and _has_a_desktop():
            opener = _open_privately(url)
        # uvicorn stops on SIGINT and SIGTERM (a running turn is cancelled and saved first), then raises the signal
        # again: SIGTERM ends the process as it would have, SIGINT arrives here.
        asyncio.run(server.serve(sockets=[sock]))
    except KeyboardInterrupt:
        return 130
    finally:
        store.close()
        if opener is not None:
            opener.unlink(missing_ok=True)
    return 0


def _open_privately(url: str) -> Path:
    """Open `url` in the browser through a page only this user can read, which sends the browser on to it: the token
    never appears in the browser's command line, which every local user can list (`ps`). The page is removed when the
    server stops."""
    import html
    import tempfile
    import webbrowser

    descriptor, name = tempfile.mkstemp(prefix="code-puppy-web-", suffix=".html")  # 0600
    with os.fdopen(descriptor, "w", encoding="utf-8") as page:
        target = html.escape(url, quote=True)
        page.write(f'<!doctype html><meta http-equiv="refresh" content="0;url={target}"><a href="{target}">open</a>\n')
    path = Path(name)
    webbrowser.open(path.as_uri())
    return path


def _has_a_desktop() -> bool:
    """Whether a graphical browser can open: on Linux without a display, `webbrowser` would run a text browser in
    this terminal (lynx, w3m) and hold the server until it quits; the printed line is there to open instead."""
    return not sys.platform.startswith("linux") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
