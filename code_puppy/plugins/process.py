"""Running a shell command (a plugin's configured command, the chat's `!cmd`): a timeout or a cancellation ends the
whole process group it started."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Completed:
    """How a command ended; `returncode` is None when it ran out of time and was killed."""

    returncode: int | None
    stdout: str
    stderr: str


async def run_shell(
    command: str,
    *,
    cwd: Path,
    timeout: float | None,
    stdin: str = "",
    env: Mapping[str, str] | None = None,
    merge_stderr: bool = False,
) -> Completed:
    """Run `command` with `sh -c` in `cwd`, `stdin` written to it; on timeout or cancellation its group is killed.

    `timeout` None waits for as long as the command runs. `merge_stderr` interleaves stderr into `stdout`, as a
    terminal would show them.
    """
    process = await asyncio.create_subprocess_shell(
        command,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT if merge_stderr else asyncio.subprocess.PIPE,
        start_new_session=True,  # its own process group, so a timeout ends what it started too
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(stdin.encode()), timeout)
    except (TimeoutError, asyncio.CancelledError) as exc:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        if isinstance(exc, asyncio.CancelledError):
            raise
        return Completed(None, "", "")
    return Completed(process.returncode, stdout.decode(errors="replace"), (stderr or b"").decode(errors="replace"))
