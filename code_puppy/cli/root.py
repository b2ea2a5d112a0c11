"""The `code-puppy` root command: its options, and the dispatch to the chat or a headless run. Heavy imports happen
after parsing, never for --help."""

from __future__ import annotations

import importlib
import io
import os
import stat
import sys
from pathlib import Path
from typing import cast

import click

from code_puppy import __version__
from code_puppy.cli.common import (
    NAME,
    POSITIVE,
    debug_requested,
    ensure_own_scripts_on_path,
    fail,
    guarded,
    leave,
)
from code_puppy.hardening import harden_process
from code_puppy.options import PERMISSION_MODES


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


SUBCOMMANDS = {
    "acp": "code_puppy.cli.acp:acp_command",
    "agents": "code_puppy.cli.definitions:agents_group",
    "checkpoints": "code_puppy.cli.checkpoints:checkpoints",
    "mcp": "code_puppy.cli.mcp:mcp",
    "plugins": "code_puppy.cli.plugins:plugins_group",
    "rewind": "code_puppy.cli.checkpoints:rewind",
    "sandbox": "code_puppy.cli.sandbox:sandbox",
    "sessions": "code_puppy.cli.sessions:sessions",
    "skills": "code_puppy.cli.definitions:skills_group",
    "steer": "code_puppy.cli.steer:steer",
    "trust": "code_puppy.cli.plugins:trust",
    "usage": "code_puppy.cli.usage:usage",
    "worktrees": "code_puppy.cli.worktrees:worktrees_group",
}
"""Each subcommand, by the `module:name` of its click command: a module is imported when its command runs or when
`--help` lists it, never for `--version` or the chat."""


class _Subcommands(click.Group):
    """The root group, whose subcommands load on first use (`SUBCOMMANDS`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *SUBCOMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in SUBCOMMANDS:
            return super().get_command(ctx, cmd_name)
        module, name = SUBCOMMANDS[cmd_name].split(":")
        command = getattr(importlib.import_module(module), name)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=_Subcommands, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
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
    type=click.Choice(PERMISSION_MODES),
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
        debug=debug_requested(),
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
