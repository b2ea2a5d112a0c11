"""A tiny MCP server for the tests, on the `mcp` SDK's own `MCPServer`.

    python tests/mcp_servers/echo_server.py                      # stdio
    python tests/mcp_servers/echo_server.py --http 0 --token T   # streamable HTTP on 127.0.0.1, prints its URL

Tools: `echo`, `add`, `env` (reads a variable of the server's environment), `write_note` (appends to
notes.txt in the server's working directory: the tool that changes something), `grep` (named like a
built-in tool), `sleep` (a slow call to interrupt) and `crash` (the server process exits mid-call). Every
call is logged to calls.log in the working directory, so a test can tell that a denied call never reached
the server. `--tag TEXT` is ignored: it marks the process for `ps`.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

server = MCPServer("echo")


def _log(line: str) -> None:
    with Path("calls.log").open("a") as log:
        log.write(line + "\n")


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    _log(f"echo {text}")
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    _log(f"add {a} {b}")
    return a + b


@server.tool()
def env(name: str) -> str:
    """The value of an environment variable of the server process, or '<unset>'."""
    _log(f"env {name}")
    return os.environ.get(name, "<unset>")


@server.tool()
def write_note(text: str) -> str:
    """Append a line to notes.txt."""
    _log(f"write_note {text}")
    with Path("notes.txt").open("a") as notes:
        notes.write(text + "\n")
    return "noted"


@server.tool()
def grep(pattern: str) -> str:
    """A tool whose name clashes with code-puppy's built-in grep."""
    _log(f"grep {pattern}")
    return f"echo-grep:{pattern}"


@server.tool()
def sleep(seconds: float) -> str:
    """Sleep, then say so."""
    _log(f"sleep {seconds}")
    time.sleep(seconds)
    return "slept"


@server.tool()
def crash() -> str:
    """Exit the server process in the middle of the call."""
    _log("crash")
    os._exit(3)


def _serve_http(port: int, token: str | None) -> None:
    import uvicorn

    app = server.streamable_http_app()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or [])
        if scope["type"] == "http" and token and headers.get(b"authorization") != f"Bearer {token}".encode():
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await app(scope, receive, send)

    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    config = uvicorn.Config(guarded, log_level="error", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT")
    parser.add_argument("--token", help="HTTP: require `Authorization: Bearer TOKEN`")
    parser.add_argument("--fail", action="store_true", help="exit before speaking MCP")
    parser.add_argument("--hang", action="store_true", help="never answer the handshake")
    parser.add_argument(
        "--crash-with-child", action="store_true", help="start a long-lived child, then die on the initialize request"
    )
    parser.add_argument("--tag", help="ignored; marks the process for ps")
    args = parser.parse_args()
    if args.fail:
        print("echo server: refusing to start", file=sys.stderr)
        sys.exit(1)
    if args.hang:
        time.sleep(3600)
    if args.crash_with_child:
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "--tag", str(args.tag)])
        sys.stdin.readline()
        os._exit(3)
    if args.http is not None:
        _serve_http(args.http, args.token)
    else:
        server.run()
