"""What `code-puppy sandbox check` and `code-puppy sandbox run` do: the sandbox as a user can see and try it, with live
probes of what it holds back."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from code_puppy.config import Settings
    from code_puppy.sandbox import Sandbox


PROBE_SECRET = "CODE_PUPPY_SANDBOX_PROBE_API_KEY"
"""A variable named like a provider key, set for the secret probe: it must not reach the command."""


def check(project_root: Path, out: TextIO) -> int:
    """Say which mechanism confines commands and what live probes found; 0 when every probe held, else 1."""
    from code_puppy.config import load_settings

    settings = load_settings(project_root)
    with _sandbox(settings, project_root) as sandbox:
        if sandbox is None:
            return 1
        if sandbox.mechanism == "bwrap":
            version = subprocess.run([str(sandbox.program), "--version"], capture_output=True, text=True, check=False)
            print(f"sandbox: {version.stdout.strip() or 'bwrap'} ({sandbox.program})", file=out)
        else:
            print(f"sandbox: Landlock ABI {sandbox.abi} (launched by {sandbox.program})", file=out)
        results = list(_probes(sandbox, settings, project_root))
        for held, line in results:
            print(f"  {'✓' if held else '✗'} {line}", file=out)
        print(f"  writable: {', '.join(map(str, sandbox.writable))} and a private /tmp", file=out)
        if sandbox.read_only:
            print(f"  read-only inside: {', '.join(map(str, sandbox.read_only))}", file=out)
        for line in sandbox.unconfined:
            print(f"  not confined: {line}", file=out)
        for line in sandbox.limits:
            print(f"  limit: {line}", file=out)
        if all(held for held, _ in results):
            return 0
        print("code-puppy: the sandbox does not confine commands as it should (see ✗ above)", file=sys.stderr)
        return 1


def run_command(project_root: Path, command: Sequence[str], *, network: bool) -> int:
    """Run `command` in the current directory inside the sandbox the agent's commands get; its exit status."""
    from code_puppy.config import load_settings
    from code_puppy.sandbox.guard import ProtectedFiles

    settings = load_settings(project_root)
    with _sandbox(settings, project_root, network=network or None) as sandbox:
        if sandbox is None:
            return 2
        guard = ProtectedFiles(project_root.resolve(), sandbox.guarded)
        try:
            saved = guard.snapshot()
            done = subprocess.run(sandbox.argv(command, cwd=Path.cwd()), env=_environment(settings), check=False)
            if note := guard.restore(saved):
                print(f"code-puppy: sandbox: {note}", file=sys.stderr)
        finally:
            guard.close()
        return done.returncode


@contextlib.contextmanager
def _sandbox(settings: Settings, project_root: Path, *, network: bool | None = None) -> Generator[Sandbox | None]:
    """The project's sandbox with a fresh private /tmp removed afterwards; None (and one line said) when there is
    none."""
    from code_puppy.sandbox import SandboxUnavailable, build_sandbox

    tmp = Path(tempfile.mkdtemp(prefix="code-puppy-sandbox-"))
    try:
        try:
            sandbox = build_sandbox(settings.sandbox, project_root, tmp=tmp, network=network)
        except SandboxUnavailable as exc:
            print(f"code-puppy: sandbox unavailable: {exc}", file=sys.stderr)
            yield None
            return
        yield sandbox
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_REFUSED = 3


_CONNECT = f"""
import socket, sys
try:
    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=3)
except OSError:
    sys.exit({_REFUSED})
"""
"""Exits 0 when it reaches the port, `_REFUSED` when the connection fails."""


_HIDDEN = (
    'if [ -d "$1" ]; then ! ls -A "$1" >/dev/null 2>&1 || [ -z "$(ls -A "$1")" ]; '
    'else ! head -c 1 "$1" >/dev/null 2>&1 || [ ! -s "$1" ]; fi'
)
"""Succeeds when the path cannot be read (Landlock) or is an empty directory or file (bwrap)."""


def _environment(settings: Settings, extra: dict[str, str] | None = None) -> dict[str, str]:
    from code_puppy.core.builder import without_secrets

    return without_secrets({**os.environ, **(extra or {})}, settings)


def _probes(sandbox: Sandbox, settings: Settings, project_root: Path) -> Iterator[tuple[bool, str]]:
    """(held, what was tried) for each live probe."""

    def inside(script: str, *args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        argv = sandbox.argv(["/bin/sh", "-c", script, "sh", *args], cwd=project_root)
        env = _environment(settings, extra)
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)

    home = Path.home()
    outside = home if not any(home == path or path in home.parents for path in sandbox.writable) else None
    outside = outside or project_root.resolve().parent
    target = outside / f".code-puppy-sandbox-probe-{uuid.uuid4().hex[:8]}"
    done = inside('echo probe > "$1"', str(target))
    escaped = target.exists()
    target.unlink(missing_ok=True)
    why = done.stderr.strip().rsplit(": ", 1)[-1] or f"exit {done.returncode}"
    yield not escaped, f"a write outside the project ({target}) is refused: {why}"

    if sandbox.network:
        yield True, "network: allowed ([sandbox] network = true)"
    else:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            port = listener.getsockname()[1]
            # The interpreter itself, not a virtual environment's link to it, which may sit in the hidden /tmp.
            python = os.path.realpath(sys.executable)
            done = inside('exec "$1" -c "$2" "$3"', python, _CONNECT, str(port))
        if done.returncode in (0, _REFUSED):
            yield done.returncode == _REFUSED, f"a connection to 127.0.0.1:{port} outside the sandbox is refused"
        else:
            yield False, f"the network probe could not run ({python}): {done.stderr.strip() or done.returncode}"

    done = inside(f'[ -z "${{{PROBE_SECRET}+set}}" ]', extra={PROBE_SECRET: "sk-probe"})
    yield done.returncode == 0, f"a variable named like a provider key ({PROBE_SECRET}) is absent"

    readable = [str(path) for path in sandbox.hidden if inside(_HIDDEN, str(path)).returncode != 0]
    hidden = f"{len(sandbox.hidden)} denied paths present here are hidden"
    yield not readable, hidden if not readable else f"{hidden}: readable: {', '.join(readable)}"

    if sandbox.mechanism == "bwrap":
        done = inside('[ "$(cat /proc/1/comm)" = bwrap ]')
        yield done.returncode == 0, "the processes outside the sandbox are invisible (its own PID namespace)"
        return
    own = str(os.getpid())
    done = inside('! head -c 1 "/proc/$1/environ" >/dev/null 2>&1', own)
    yield done.returncode == 0, f"the environment of code-puppy's own process ({own}) cannot be read"
    if sandbox.abi >= 6:
        done = inside('! kill -0 "$1" 2>/dev/null', own)
        yield done.returncode == 0, "signals to processes outside the sandbox are refused"
