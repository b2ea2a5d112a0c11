"""notify: a terminal bell or a desktop notification when a run that took a while ends.

    [plugins.notify]
    after_seconds = 30     # runs shorter than this end quietly
    method = "bell"        # bell | desktop (notify-send on Linux, osascript on macOS; the bell where neither exists)

Off until `[plugins.notify]` is in the config. Each run counts on its own (the user's prompt, or a follow-up);
a run that fails notifies too, an interrupted one does not (the user is there).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

import code_puppy
from code_puppy.plugins.options import plugin_options


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    after_seconds: float = Field(default=30, ge=0)
    method: Literal["bell", "desktop"] = "bell"


_config: Config | None = None
_started = 0.0


@code_puppy.hookimpl
def startup(settings: Any) -> None:
    global _config
    _config = plugin_options(settings, "notify", Config) if "notify" in settings.plugins.options else None


@code_puppy.hookimpl
def agent_run_start() -> None:
    global _started
    _started = time.monotonic()


@code_puppy.hookimpl
async def turn_end(result: Any) -> None:
    await _notify("Finished", str(result.output))


@code_puppy.hookimpl
async def agent_run_end(error: BaseException | None) -> None:
    if error is not None and not isinstance(error, asyncio.CancelledError | KeyboardInterrupt):
        await _notify("Failed", f"{type(error).__name__}: {error}")


async def _notify(what: str, detail: str) -> None:
    elapsed = time.monotonic() - _started
    if _config is None or elapsed < _config.after_seconds:
        return
    first = next((line.strip() for line in detail.splitlines() if line.strip()), "")
    message = f"{what} after {elapsed:.0f}s" + (f": {first[:100]}" if first else "")
    if _config.method == "desktop" and await _desktop(message):
        return
    if sys.stderr.isatty():
        sys.stderr.write("\a")
        sys.stderr.flush()


async def _desktop(message: str) -> bool:
    """Show `message` as a desktop notification; False when this system has no way to."""
    if notify_send := shutil.which("notify-send"):
        argv = [notify_send, "code-puppy", message]
    elif osascript := shutil.which("osascript"):
        quoted = message.replace("\\", "\\\\").replace('"', '\\"')
        argv = [osascript, "-e", f'display notification "{quoted}" with title "code-puppy"']
    else:
        return False
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        await asyncio.wait_for(process.wait(), 5)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
    return True
