"""The `code-puppy` command: options and dispatch only. Heavy imports happen after parsing, never for --help."""

from __future__ import annotations

import io
import math
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn, cast

import click

from code_puppy import __version__
from code_puppy.hardening import harden_process

if TYPE_CHECKING:
    from datetime import datetime

    from code_puppy.sessions.store import SqliteConversationStore

EXIT_USAGE = 2


def fail(message: str, *, code: int = EXIT_USAGE) -> NoReturn:
    """One line on stderr and the exit code; the traceback only with --debug."""
    if _debug_requested():
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


def _debug_requested() -> bool:
    return "--debug" in sys.argv or bool(os.environ.get("CODE_PUPPY_DEBUG"))


def _piped_stdin() -> str | None:
    """Stdin's text when it is a pipe or a file; never blocks on a terminal or an inherited tty."""
    if not _stdin_is_piped():
        return None
    return _utf8(sys.stdin.buffer.read(), "stdin")


def _utf8(data: bytes, what: str) -> str:
    """`data` as text; bytes that are not UTF-8 become U+FFFD, with one note, rather than failing the run later."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        click.echo(
            f"code-puppy: note: {what} is not valid UTF-8; the bytes that are not were replaced with U+FFFD", err=True
        )
        return data.decode("utf-8", errors="replace")


def _stdin_is_piped() -> bool:
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode)


def _headless_prompt(prompt: str | None) -> str | None:
    """`-p TEXT`, `-p -` (stdin is the prompt), piped stdin alone, or `-p TEXT` with piped context appended."""
    if prompt is not None and prompt != "-":
        # The command line arrives decoded with surrogate escapes for what was not UTF-8.
        prompt = _utf8(os.fsencode(prompt), "the prompt")
    if prompt == "-":
        text = _piped_stdin()
        if not text or not text.strip():
            fail("-p - reads the prompt from stdin, but stdin is empty")
        return text.strip()
    piped = _piped_stdin()
    if prompt is None:
        return piped.strip() if piped and piped.strip() else None
    if not prompt.strip():
        fail("the prompt is empty")
    if piped and piped.strip():
        return f"{prompt}\n\n<stdin>\n{piped.rstrip()}\n</stdin>"
    return prompt


def _stream_json_prompt(prompt: str | None) -> str:
    """With `--input-format stream-json`: `-p TEXT`, or else the first user message on stdin."""
    if prompt is not None and prompt != "-":
        prompt = _utf8(os.fsencode(prompt), "the prompt")
        if not prompt.strip():
            fail("the prompt is empty")
        return prompt
    from code_puppy.headless.stdin_messages import read_first_message

    cast(io.TextIOWrapper, sys.stdin).reconfigure(errors="replace")  # JSON lines: a bad byte is replaced, not fatal
    text = read_first_message(sys.stdin)
    if text is None:
        fail("--input-format stream-json: stdin ended before the first user message")
    return text


def ensure_own_scripts_on_path() -> None:
    """Let the harness find the `rg` installed next to us when our environment is not activated (pipx, venv/bin/...)."""
    import shutil
    import sysconfig

    if shutil.which("rg"):
        return
    scripts = sysconfig.get_path("scripts")
    # Appended, not prepended: the user's own tools (python, pytest, ...) keep precedence in the shell tool.
    os.environ["PATH"] = os.pathsep.join(filter(None, (os.environ.get("PATH"), scripts)))


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-p", "--prompt", metavar="PROMPT", help="Run once headless with PROMPT ('-' reads it from stdin).")
@click.option(
    "-m", "--model", type=NAME, metavar="MODEL", help="A model string (openai:gpt-5.1) or a name from [models]."
)
@click.option(
    "--output-format",
    type=click.Choice(["text", "json", "stream-json"]),
    default="text",
    show_default=True,
    help="Headless output: the answer, one JSON object, or JSON lines.",
)
@click.option(
    "--input-format",
    type=click.Choice(["text", "stream-json"]),
    default="text",
    show_default=True,
    help="Headless input: the prompt as text, or JSON-lines user messages on stdin that steer the running turn.",
)
@click.option(
    "--permission-mode",
    type=click.Choice(["ask", "accept-edits", "auto", "yolo", "read-only"]),
    help="What tools may do without asking (default from config: ask).",
)
@click.option("--allow", "allow", multiple=True, metavar="PATTERN", help="Allow a shell command pattern (repeatable).")
@click.option("--max-requests", type=click.IntRange(min=1), metavar="N", help="Stop after N model requests (exit 3).")
@click.option(
    "--timeout",
    type=POSITIVE,
    metavar="SECONDS",
    help="Stop a headless run after SECONDS in all (exit 3); default [run] timeout.",
)
@click.option(
    "--max-budget-usd",
    type=POSITIVE,
    metavar="USD",
    help="Stop once this many US dollars are spent: the headless run, or the whole chat (exit 3).",
)
@click.option(
    "--usage-file",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    metavar="PATH",
    help="Also write the headless run's JSON result (cost and usage) to PATH.",
)
@click.option("-c", "--continue", "continue_last", is_flag=True, help="Continue the latest session of this project.")
@click.option(
    "-r",
    "--resume",
    type=NAME,
    metavar="ID|NAME",
    is_flag=False,
    flag_value="",
    help="Resume a session by id, name or unique id prefix; with no ID, pick one (interactive chat).",
)
@click.option("--fork", is_flag=True, help="With -r or -c: continue a copy of the session; the original stays.")
@click.option("--name", type=NAME, metavar="NAME", help="Call the session NAME (`-r NAME` resumes it).")
@click.option(
    "--agent", type=NAME, metavar="NAME", help="Put a file-defined agent in charge (`code-puppy agents list`)."
)
@click.option(
    "-w",
    "--worktree",
    type=NAME,
    metavar="NAME",
    help="Run in the git worktree .code-puppy/worktrees/NAME (made if needed).",
)
@click.option("--no-mcp", is_flag=True, help="Run without the configured MCP servers.")
@click.option("--no-plugins", is_flag=True, help="Run without plugins.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.version_option(__version__, "--version", prog_name="code-puppy")
@click.pass_context
def cli(
    ctx: click.Context,
    *,
    prompt: str | None,
    model: str | None,
    output_format: str,
    input_format: str,
    permission_mode: str | None,
    allow: tuple[str, ...],
    max_requests: int | None,
    timeout: float | None,
    max_budget_usd: float | None,
    usage_file: Path | None,
    continue_last: bool,
    resume: str | None,
    fork: bool,
    name: str | None,
    agent: str | None,
    worktree: str | None,
    no_mcp: bool,
    no_plugins: bool,
    debug: bool,
) -> None:
    """code-puppy: a coding agent for the terminal.

    Run it in a project for an interactive chat, or with -p for one headless run.
    """
    # Every command, before anything reads a key: --version and --help never get here (click answers them first).
    if problem := harden_process():
        click.echo(f"code-puppy: warning: {problem}; commands the agent runs may read API keys from /proc", err=True)
    if ctx.invoked_subcommand is not None:
        return
    if continue_last and resume is not None:
        fail("use either -c/--continue or -r/--resume, not both")
    if fork and not continue_last and resume is None:
        fail("--fork copies the session -r ID or -c continues: use it with one of them")
    if name is not None and not name.strip():
        fail("--name: the name is empty")
    headless = prompt is not None or input_format == "stream-json" or _stdin_is_piped()
    if resume == "" and (headless or not (sys.stdin.isatty() and sys.stdout.isatty())):
        fail("-r without an ID opens a picker, which needs the interactive chat in a terminal: pass -r ID")
    text = _stream_json_prompt(prompt) if input_format == "stream-json" else _headless_prompt(prompt)
    if worktree is not None:
        os.chdir(_worktree(worktree))
    ensure_own_scripts_on_path()
    from code_puppy.options import RunOptions
    from code_puppy.paths import find_project_root

    options = RunOptions(
        project_root=find_project_root(Path.cwd()),
        model=model,
        permission_mode=permission_mode,  # type: ignore[arg-type]  # click.Choice guarantees the literal
        allow=allow,
        max_requests=max_requests,
        max_budget_usd=max_budget_usd,
        continue_last=continue_last,
        resume=resume,
        fork=fork,
        name=name.strip() if name is not None else None,
        no_mcp=no_mcp,
        no_plugins=no_plugins,
        debug=_debug_requested(),
        agent=agent,
    )
    if text is None:
        if timeout is not None:
            fail("--timeout bounds a headless run: use it with -p PROMPT")
        if usage_file is not None:
            fail("--usage-file writes a headless run's result: use it with -p PROMPT")
        if not sys.stdin.isatty():
            fail("no prompt: pass -p PROMPT or pipe one in (the interactive chat needs a terminal)")
        from code_puppy.chat.chat import run_chat

        sys.exit(guarded(lambda: run_chat(options)))

    if usage_file is not None and not usage_file.absolute().parent.is_dir():
        fail(f"--usage-file: the directory {usage_file.absolute().parent} does not exist")

    def run() -> int:
        from code_puppy.headless.runner import HeadlessOptions, run_headless

        headless = HeadlessOptions(
            prompt=text,
            timeout=timeout,
            output_format=output_format,
            input_format=input_format,
            usage_file=usage_file,
        )
        return run_headless(options, headless)

    leave(guarded(run))


def _worktree(name: str) -> Path:
    """The worktree `-w NAME` runs in, made if needed: exit 2 for a bad name or no repository, 1 if git fails."""
    from code_puppy.errors import ConfigError
    from code_puppy.worktrees import WorktreeError, check_name, ensure, repository

    try:
        return ensure(repository(Path.cwd()), check_name(name))
    except ConfigError as exc:
        fail(f"-w: {exc}")
    except WorktreeError as exc:
        fail(f"-w: {exc}", code=1)


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


@cli.command()
@click.option(
    "--session",
    "session_id",
    type=NAME,
    metavar="ID",
    help="A session id or prefix (default: the newest running one here).",
)
@click.argument("text", nargs=-1, required=True)
def steer(*, session_id: str | None, text: tuple[str, ...]) -> None:
    """Send TEXT into the running turn of a code-puppy session, from another terminal.

    It reaches the model with the run's next request. Exit 1 when no run of the session is active.
    """
    message = " ".join(text)
    if not message.strip():
        fail("nothing to send: TEXT is empty")

    def run() -> int:
        from code_puppy.paths import data_dir, find_project_root
        from code_puppy.sessions.runs import RunRegistry
        from code_puppy.sessions.runs import steer as send
        from code_puppy.sessions.schema import Database

        database = Database(data_dir() / "sessions.db")
        try:
            registry = RunRegistry(database)
            ok, line = send(registry, message, project_dir=find_project_root(Path.cwd()), session_prefix=session_id)
        finally:
            database.close()
        click.echo(line if ok else f"code-puppy: {line}", err=not ok)
        return 0 if ok else 1

    sys.exit(guarded(run))


@cli.command("acp")
@click.option(
    "-m", "--model", type=NAME, metavar="MODEL", help="The sessions' default model (a model string or a [models] name)."
)
@click.option(
    "--permission-mode",
    type=click.Choice(["ask", "accept-edits", "auto", "yolo", "read-only"]),
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
            debug=_debug_requested(),
        )
        return serve(AcpOptions(options))

    leave(guarded(run))


@cli.group()
def sessions() -> None:
    """List, show, export and delete stored sessions; check and repair the database."""


@sessions.command("list")
@click.option("--all", "all_projects", is_flag=True, help="Sessions of every project, not just this one.")
@click.option("--archived", is_flag=True, help="The archived sessions instead.")
def sessions_list(*, all_projects: bool, archived: bool) -> None:
    """Sessions of this project (id, age, turns, project, cost, name or title), newest first."""

    from code_puppy.paths import data_dir, find_project_root

    project = None if all_projects else find_project_root(Path.cwd())
    if not (data_dir() / "sessions.db").exists():
        click.echo(f"no sessions{f' in {project}' if project else ''}")
        return
    _with_store(lambda store: _commands().list_sessions(store, project, sys.stdout, archived=archived), readonly=True)


@sessions.command("rename")
@click.argument("session_id", metavar="ID", type=NAME)
@click.argument("name", metavar="NAME", type=NAME)
def sessions_rename(*, session_id: str, name: str) -> None:
    """Call a session NAME, which `-r NAME` resumes it by (names are unique)."""
    if not name.strip():
        fail("the name is empty")
    _with_store(lambda store: _commands().rename_session(store, session_id, name.strip(), sys.stdout))


@sessions.command("archive")
@click.argument("session_id", metavar="ID", type=NAME)
def sessions_archive(*, session_id: str) -> None:
    """Hide a session from lists, pickers, search and -c, without deleting it (`-r ID` still resumes it)."""
    _with_store(lambda store: _commands().archive_session(store, session_id, sys.stdout, archived=True))


@sessions.command("unarchive")
@click.argument("session_id", metavar="ID", type=NAME)
def sessions_unarchive(*, session_id: str) -> None:
    """List an archived session again (`sessions list --archived` shows them)."""
    _with_store(lambda store: _commands().archive_session(store, session_id, sys.stdout, archived=False))


@sessions.command("search")
@click.argument("query", metavar="QUERY")
@click.option(
    "--project",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="PATH",
    help="Only the sessions of the project at PATH (default: this one).",
)
@click.option("--all", "all_projects", is_flag=True, help="Sessions of every project.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def sessions_search(*, query: str, project: Path | None, all_projects: bool, output_format: str) -> None:
    """Sessions whose prompts or answers match every word of QUERY ("a phrase" in quotes, prefix*).

    Exit 0 with matches, 1 without (or when the search index is damaged), 2 for an empty or non-UTF-8 query.
    """
    from code_puppy.paths import data_dir, find_project_root

    if all_projects and project is not None:
        fail("use either --project or --all, not both")
    root = None if all_projects else find_project_root((project or Path.cwd()).resolve())
    if not (data_dir() / "sessions.db").exists():
        click.echo("[]" if output_format == "json" else "", nl=output_format == "json")
        click.echo("no session matches (there are no sessions yet)", err=True)
        sys.exit(1)
    color = output_format == "text" and sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    _with_store(
        lambda store: _commands().search_sessions(
            store, query, sys.stdout, project_dir=root, as_json=output_format == "json", color=color
        )
    )


@sessions.command("show")
@click.argument("session_id", metavar="ID", type=NAME)
@click.option("--groups", is_flag=True, help="Show the history groups processors see, with protections and tokens.")
def sessions_show(*, session_id: str, groups: bool) -> None:
    """A readable transcript of a session."""
    _with_store(lambda store: _commands().show_session(store, session_id, sys.stdout, groups=groups), readonly=True)


@sessions.command("export")
@click.argument("session_id", metavar="ID", type=NAME)
def sessions_export(*, session_id: str) -> None:
    """A session as JSON: its metadata and its messages (pydantic-ai's ModelMessagesTypeAdapter form)."""
    _with_store(lambda store: _commands().export_session(store, session_id, sys.stdout), readonly=True)


@sessions.command("delete")
@click.argument("session_id", metavar="ID", type=NAME)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def sessions_delete(*, session_id: str, yes: bool) -> None:
    """Delete a session and its messages."""

    def action(store: SqliteConversationStore) -> None:
        from code_puppy.sessions.session import find_session

        info = find_session(store, session_id)
        if not yes:
            if not sys.stdin.isatty():
                fail(f"not deleting session {info.id} without --yes: nobody can confirm (stdin is not a terminal)")
            click.confirm(
                f"Delete session {info.id} ({info.title or 'untitled'}, {info.message_count} messages)?", abort=True
            )
        store.sessions.delete(info.id)
        click.echo(f"deleted session {info.id}")

    _with_store(action)


@sessions.command("import")
@click.argument("paths", metavar="PATH...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True, help="Say what would be imported; change nothing.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def sessions_import(*, paths: tuple[Path, ...], dry_run: bool, output_format: str) -> None:
    """Import Claude Code transcripts (~/.claude/projects) and Codex rollouts (~/.codex/sessions) as sessions.

    A folder imports every .jsonl file under it. A file imported before is not imported again.
    """
    from code_puppy.paths import data_dir, find_project_root

    for path in paths:
        if not path.exists():
            fail(f"{path}: no such file or directory")

    def action(store: SqliteConversationStore | None) -> int:
        from code_puppy.sessions.importing import import_paths

        return import_paths(
            store,
            list(paths),
            dry_run=dry_run,
            default_project=find_project_root(Path.cwd()),
            out=sys.stdout,
            err=sys.stderr,
            as_json=output_format == "json",
        )

    if dry_run and not (data_dir() / "sessions.db").exists():
        sys.exit(guarded(lambda: action(None)))

    def run() -> int:
        from code_puppy.sessions.store import open_store

        with open_store(readonly=dry_run) as store:
            return action(store)

    sys.exit(guarded(run))


@sessions.command("check")
def sessions_check() -> None:
    """Read every page of sessions.db (SQLite's integrity_check): exit 0 when it is sound, 1 with what is wrong."""
    sys.exit(guarded(lambda: _commands().check_store(sys.stdout)))


@sessions.command("repair")
def sessions_repair() -> None:
    """Move a damaged sessions.db aside (sessions.db.corrupt-DATE) and rebuild it from what can still be read."""
    sys.exit(guarded(lambda: _commands().repair_store(sys.stdout)))


@cli.command("rewind")
@click.option(
    "--session", "session_id", type=NAME, metavar="ID", help="A session id or prefix (default: the latest here)."
)
@click.option("--turns", type=click.IntRange(min=1), default=1, show_default=True, metavar="N", help="How many back.")
@click.option(
    "--only", type=click.Choice(["code", "conversation"]), help="Rewind only the files, or only the conversation."
)
@click.option("--force", is_flag=True, help="Overwrite files you changed since (your versions are kept).")
@click.option("--dry-run", is_flag=True, help="Say what would change; change nothing.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rewind(
    *, session_id: str | None, turns: int, only: str | None, force: bool, dry_run: bool, output_format: str
) -> None:
    """Undo the agent's file changes of the last N checkpointed turns, and branch the conversation back.

    A file you changed since the agent did is not overwritten: exit 1, listing it, unless --force.
    """

    def run() -> int:
        import asyncio

        from code_puppy.headless.checkpoint_commands import rewind as rewind_session
        from code_puppy.paths import find_project_root

        return asyncio.run(
            rewind_session(
                find_project_root(Path.cwd()),
                sys.stdout,
                session_id=session_id,
                turns=turns,
                only=only,  # type: ignore[arg-type]  # click.Choice guarantees the literal
                force=force,
                dry_run=dry_run,
                output_format=output_format,
            )
        )

    sys.exit(guarded(run))


@cli.command("checkpoints")
@click.option(
    "--session", "session_id", type=NAME, metavar="ID", help="A session id or prefix (default: the latest here)."
)
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def checkpoints(*, session_id: str | None, output_format: str) -> None:
    """List a session's checkpoints: the turns that changed files, and rewinds; newest first."""

    def run() -> int:
        from code_puppy.headless.checkpoint_commands import checkpoints as list_checkpoints
        from code_puppy.paths import find_project_root

        return list_checkpoints(
            find_project_root(Path.cwd()), sys.stdout, session_id=session_id, output_format=output_format
        )

    sys.exit(guarded(run))


@cli.group("worktrees")
def worktrees_group() -> None:
    """The git worktrees `code-puppy -w NAME` runs agents in (.code-puppy/worktrees/NAME, branch code-puppy/NAME)."""


@worktrees_group.command("list")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def worktrees_list(*, output_format: str) -> None:
    """Each worktree: name, branch, uncommitted changes, its latest session, path."""

    def run() -> int:
        from code_puppy.worktrees import print_list

        return print_list(Path.cwd(), output_format=output_format)

    sys.exit(_worktree_command(run))


@worktrees_group.command("remove")
@click.argument("name", type=NAME)
@click.option("--force", is_flag=True, help="Commit its uncommitted changes on its branch first, then remove it.")
def worktrees_remove(*, name: str, force: bool) -> None:
    """Remove worktree NAME (its branch stays); exit 1 naming its uncommitted changes, unless --force."""

    def run() -> int:
        from code_puppy.worktrees import check_name, find, remove, repository

        repo = repository(Path.cwd())
        worktree = find(repo, check_name(name))
        commit = remove(repo, worktree, force=force)
        saved = f"; its changes are commit {commit[:12]} on {worktree.branch}" if commit else ""
        click.echo(f"removed worktree {name}{saved}")
        return 0

    sys.exit(_worktree_command(run))


def _worktree_command(action: Callable[[], int]) -> int:
    from code_puppy.worktrees import WorktreeError

    def run() -> int:
        try:
            return action()
        except WorktreeError as exc:
            fail(str(exc), code=1)

    return guarded(run)


@cli.group("plugins")
def plugins_group() -> None:
    """List plugins; trust this project's own plugins."""


@plugins_group.command("list")
def plugins_list() -> None:
    """Every plugin found for this project: name, source, whether it runs, its last error."""

    def run() -> None:
        from code_puppy.paths import find_project_root
        from code_puppy.plugins.commands import list_plugins

        list_plugins(find_project_root(Path.cwd()), sys.stdout, debug=_debug_requested())

    sys.exit(guarded(run))


@plugins_group.command("trust")
def plugins_trust() -> None:
    """Trust this project as it is now, and run its .code-puppy/plugins (a later change needs trusting again)."""
    _trust()


@cli.group("agents")
def agents_group() -> None:
    """Agents defined in files: .code-puppy/agents, .agents/agents, .claude/agents (project and user)."""


@agents_group.command("list")
def agents_list() -> None:
    """Every file-defined agent: name, description, model, tools, and the file it comes from."""

    def run() -> None:
        from code_puppy.definition_commands import list_agents
        from code_puppy.paths import find_project_root

        list_agents(find_project_root(Path.cwd()), sys.stdout, sys.stderr)

    sys.exit(guarded(run))


@cli.group("skills")
def skills_group() -> None:
    """Agent Skills: .code-puppy/skills, .agents/skills, .claude/skills (project and user)."""


@skills_group.command("list")
def skills_list() -> None:
    """Every skill: name, description, and the SKILL.md it comes from."""

    def run() -> None:
        from code_puppy.definition_commands import list_skills
        from code_puppy.paths import find_project_root

        list_skills(find_project_root(Path.cwd()), sys.stdout, sys.stderr)

    sys.exit(guarded(run))


@cli.command("trust")
def trust() -> None:
    """Trust this project's config files and plugins as they are now (SHA-256 recorded; a change needs trust again)."""
    _trust()


def _trust() -> NoReturn:
    def run() -> None:
        from code_puppy.paths import find_project_root
        from code_puppy.plugins.commands import trust_plugins

        trust_plugins(find_project_root(Path.cwd()), sys.stdout)

    sys.exit(guarded(run))


@cli.command("usage")
@click.option("--since", metavar="AGE|DATE", help="Only requests since then: 24h, 7d, 2w, or a date (2026-11-01).")
@click.option(
    "--project",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="PATH",
    help="Only the requests of sessions of the project at PATH (default: every project).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object: per day and model, and the total.")
def usage(*, since: str | None, project: Path | None, as_json: bool) -> None:
    """What code-puppy spent: cost and tokens by day and model, from the sessions database."""
    from code_puppy.paths import data_dir, find_project_root

    moment = _since(since) if since is not None else None
    root = find_project_root(project.resolve()) if project is not None else None
    if not (data_dir() / "sessions.db").exists():
        click.echo('{"days": [], "total": null}' if as_json else "no model requests recorded")
        return
    _with_store(
        lambda store: _commands().usage_report(store, sys.stdout, since=moment, project_dir=root, as_json=as_json),
        readonly=True,
    )


def _since(text: str) -> datetime:
    """`24h`, `7d`, `2w` ago, or the local midnight starting a `YYYY-MM-DD` date; exit 2 for anything else."""
    from datetime import datetime, timedelta

    units = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}
    if text[:-1].isdigit() and text[-1:] in units:
        return datetime.now().astimezone() - int(text[:-1]) * units[text[-1]]
    try:
        return datetime.strptime(text, "%Y-%m-%d").astimezone()
    except ValueError:
        fail(f"--since: expected an age like 24h, 7d or 2w, or a date like 2026-11-01; got {text!r}")


def _with_store(action: Callable[[SqliteConversationStore], object], *, readonly: bool = False) -> None:
    """Run `action` on this user's sessions database; `readonly` commands never create, migrate or write it. An int
    `action` returns is the exit code."""

    def run() -> int | None:
        from code_puppy.sessions.store import open_store

        with open_store(readonly=readonly) as store:
            code = action(store)
        return code if isinstance(code, int) else None

    sys.exit(guarded(run))


def _commands() -> ModuleType:
    import code_puppy.sessions.commands

    return code_puppy.sessions.commands


@cli.group()
def sandbox() -> None:
    """The OS sandbox that confines commands run for the agent (bubblewrap on Linux)."""


@sandbox.command("check")
def sandbox_check() -> None:
    """Say which mechanism is used and probe it live; exit 0 when it confines commands, 1 when it does not."""

    def run() -> int:
        from code_puppy.paths import find_project_root
        from code_puppy.sandbox.commands import check

        return check(find_project_root(Path.cwd()), sys.stdout)

    sys.exit(guarded(run))


@sandbox.command("run", context_settings={"ignore_unknown_options": True})
@click.option("--network", is_flag=True, help="Let the command use the network.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def sandbox_run(*, network: bool, command: tuple[str, ...]) -> None:
    """Run COMMAND in the sandbox the agent's commands get: `code-puppy sandbox run -- CMD ARGS...`."""

    def run() -> int:
        from code_puppy.paths import find_project_root
        from code_puppy.sandbox.commands import run as run_sandboxed

        return run_sandboxed(find_project_root(Path.cwd()), command, network=network)

    sys.exit(guarded(run))


@cli.group()
def mcp() -> None:
    """Inspect the configured MCP servers."""


@mcp.command("list")
def mcp_list() -> None:
    """Start each enabled server and show its status and tool count."""
    from code_puppy.mcp_commands import list_servers

    _run_mcp_command(list_servers)


@mcp.command("tools")
@click.argument("name", type=NAME)
def mcp_tools(name: str) -> None:
    """Start server NAME and show its tools as the model sees them, with their descriptions."""
    from code_puppy.mcp_commands import show_tools

    _run_mcp_command(lambda project_root: show_tools(project_root, name))


def _run_mcp_command(command: Callable[[Path], int]) -> NoReturn:
    from code_puppy.paths import find_project_root

    sys.exit(guarded(lambda: command(find_project_root(Path.cwd()))))
