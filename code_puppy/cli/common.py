"""What every `code-puppy` command shares: one-line failures and exit codes, the checked option types, the run guard,
and the sessions database. Imports nothing heavy: `--help` and `--version` load every command module."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from code_puppy.sessions.store import SqliteConversationStore

EXIT_USAGE = 2


def fail(message: str, *, code: int = EXIT_USAGE) -> NoReturn:
    """One line on stderr and the exit code; the traceback only with --debug."""
    if debug_requested():
        import traceback

        if sys.exc_info()[0] is not None:
            traceback.print_exc()
    click.echo(f"code-puppy: error: {message}", err=True)
    sys.exit(code)


def _flag(param: click.Parameter | None) -> str:
    """How the user wrote `param`: `-r/--resume`, or an argument's metavar."""
    if isinstance(param, click.Option):
        return "/".join(param.opts)
    return param.human_readable_name if param is not None else "a value"


class _Name(click.ParamType[str]):
    """Command-line text that names something (a session, a model, an agent, a worktree). Bytes that are not UTF-8
    arrive as surrogate escapes, which name nothing and cannot be stored or sent: refused in one line (a prompt's are
    replaced instead, `_utf8`)."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        try:
            text.encode()
        except UnicodeEncodeError:
            shown = text if len(text) <= 60 else text[:60] + "…"
            fail(f"{_flag(param)}: {shown!r} is not valid UTF-8")
        return text


class _Positive(click.ParamType[float]):
    """A positive, finite number (seconds, US dollars): `nan`, `inf` and `1e400` (inf once parsed) would each mean no
    limit at all, so they are refused with the rest in one line."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and number > 0):
            fail(f"{_flag(param)}: expected a positive number, got {value!r}")
        return number


NAME = _Name()
POSITIVE = _Positive()


def debug_requested() -> bool:
    return "--debug" in sys.argv or bool(os.environ.get("CODE_PUPPY_DEBUG"))


def ensure_own_scripts_on_path() -> None:
    """Let the harness find the `rg` installed next to us when our environment is not activated (pipx, venv/bin/...)."""
    import shutil
    import sysconfig

    if shutil.which("rg"):
        return
    scripts = sysconfig.get_path("scripts")
    # Appended, not prepended: the user's own tools (python, pytest, ...) keep precedence in the shell tool.
    os.environ["PATH"] = os.pathsep.join(filter(None, (os.environ.get("PATH"), scripts)))


def leave(code: int) -> NoReturn:
    """Exit once a headless run is over, without the garbage collections of the interpreter's teardown.

    Tearing down a process that loaded pydantic-ai and a provider SDK runs full collections over every object they
    made, ~0.25 s after the answer is out, which a script waiting for `code-puppy -p` has no use for. Frozen objects
    are left out of those collections; everything else about exiting (exit handlers, flushing) is as usual.
    """
    import gc

    gc.disable()
    gc.freeze()
    sys.exit(code)


def guarded(action: Callable[[], int | None]) -> int:
    """Run a command: a `ConfigError` is one line and exit 2, anything unexpected one line and exit 1."""
    try:
        return action() or 0
    except KeyboardInterrupt:  # Ctrl-C before a run installed its own handler: nothing was sent yet
        fail("interrupted", code=130)
    except BrokenPipeError:  # `code-puppy sessions export ID | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # the last line of defence: never a traceback without --debug
        from code_puppy.errors import ConfigError

        if isinstance(exc, ConfigError):
            fail(str(exc))
        from code_puppy.errors import one_line

        fail(f"internal error: {one_line(exc, typed=True)} (run with --debug for the traceback)", code=1)


def store_exists() -> bool:
    """Whether this user has a store to read (a configured PostgreSQL one always has); a bad `[storage] url` fails
    the command in one line."""
    from code_puppy.errors import ConfigError
    from code_puppy.paths import store_exists

    try:
        return store_exists()
    except ConfigError as exc:
        fail(str(exc))


def with_store(action: Callable[[SqliteConversationStore], object], *, readonly: bool = False) -> None:
    """Run `action` on this user's sessions database; `readonly` commands never create, migrate or write it. An int
    `action` returns is the exit code."""

    def run() -> int | None:
        from code_puppy.sessions.store import open_store

        with open_store(readonly=readonly) as store:
            code = action(store)
        return code if isinstance(code, int) else None

    sys.exit(guarded(run))


def session_output() -> ModuleType:
    """`code_puppy.cli.session_output`, imported when a command uses it (it imports pydantic-ai)."""
    import code_puppy.cli.session_output

    return code_puppy.cli.session_output
