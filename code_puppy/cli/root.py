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
from code_puppy.options import CLAUDE_MODES, PERMISSION_MODES


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


def _compat(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """`--compat`'s value, checked: claude is the one schema there is."""
    if value not in (None, "claude"):
        fail(f"--compat {value}: the one schema known is claude (Claude Code's json and stream-json output)")
    return value


SUBCOMMANDS = {
    "acp": "code_puppy.cli.acp:acp_command",
    "agents": "code_puppy.cli.definitions:agents_group",
    "checkpoints": "code_puppy.cli.checkpoints:checkpoints",
    "mcp": "code_puppy.cli.mcp:mcp",
    "plugins": "code_puppy.cli.plugins:plugins_group",
    "runs": "code_puppy.cli.runs:runs",
    "rewind": "code_puppy.cli.checkpoints:rewind",
    "sandbox": "code_puppy.cli.sandbox:sandbox",
    "sessions": "code_puppy.cli.sessions:sessions",
    "skills": "code_puppy.cli.definitions:skills_group",
    "steer": "code_puppy.cli.steer:steer",
    "storage": "code_puppy.cli.storage:storage",
    "trust": "code_puppy.cli.plugins:trust",
    "usage": "code_puppy.cli.usage:usage",
    "web": "code_puppy.cli.web:web",
    "worktrees": "code_puppy.cli.worktrees:worktrees_group",
    "queue": "code_puppy.cli.fleet:queue",
    "worker": "code_puppy.cli.fleet:worker",
    "workers": "code_puppy.cli.fleet:workers",
}
"""Each subcommand, by the `module:name` of its click command: a module is imported when its command runs or when
`--help` lists it, never for `--version` or the chat."""


EXEC = "code_puppy.exec"
"""`ctx.meta` key: the command line was `code-puppy exec …` (a headless run, as Codex's `exec`)."""
WORDS = "code_puppy.words"
"""`ctx.meta` key: the words after the options that name no subcommand, the prompt."""
FOREIGN_OPTIONS = {
    "--system-prompt": "--append-system-prompt TEXT (or AGENTS.md)",
    "--mcp-config": "[mcp_servers] in config.toml, or --no-mcp",
    "--session-id": "--name NAME, then -r NAME",
    "--model-provider": "-m PROVIDER:MODEL",
    "--full-auto": "--permission-mode auto",
    "--ask-for-approval": "--permission-mode",
    "--sandbox": "--permission-mode auto (commands run in the sandbox, `code-puppy sandbox`)",
    "--dangerously-bypass-approvals-and-sandbox": "--permission-mode yolo",
    "--json": "--output-format stream-json",
    "--cd": "cd DIR before running code-puppy",
    "--add-dir": "-w NAME, or running code-puppy in the folder",
    "--tools": "--disallowedTools for the tools to take away, or --permission-mode read-only",
    "--fork-session": "--fork",
    "--allow-dangerously-skip-permissions": "/permissions yolo in the chat",
    "--append-system-prompt-file": '--append-system-prompt "$(cat FILE)"',
    "--system-prompt-file": '--append-system-prompt "$(cat FILE)"',
    "--include-partial-messages": "nothing: --output-format stream-json always streams the text as it comes",
}
"""Claude Code's and Codex's options without a counterpart of the same name: refused, naming what to use."""


class _Subcommands(click.Group):
    """The root group, whose subcommands load on first use (`SUBCOMMANDS`). Words that are not a subcommand are the
    chat's first prompt (`code-puppy "fix the bug"`), as after `--`; `exec WORDS` is `-p WORDS`, as Codex's. Options
    may come before or after the prompt's words (`code-puppy "fix it" -m sonnet`); a subcommand's name as the first
    word gets the rest of the line."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        words: list[str] | None = None
        if "--" in args:
            args, words = args[: args.index("--")], args[args.index("--") + 1 :]
        args, at = self._bare_print(ctx, args)
        first = args[at] if at is not None else None
        if at is not None and first == "exec":
            ctx.meta[EXEC] = True
            del args[at]  # so the options after it are read too (`code-puppy exec --output-format json TASK`)
        subcommand = first in self.list_commands(ctx) and not ctx.meta.get(EXEC)
        ctx.allow_interspersed_args = not subcommand
        try:
            super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            name = exc.option_name.partition("=")[0]
            instead = f"; use {FOREIGN_OPTIONS[name]}" if name in FOREIGN_OPTIONS else ""
            words_too = "; after -- every word is the prompt's" if first is not None else ""
            fail(f"no such option: {name}{instead} (code-puppy --help lists the options{words_too})")
        except click.UsageError as exc:
            fail(exc.format_message())
        rest = [*ctx._protected_args, *ctx.args]  # pyright: ignore[reportPrivateUsage]
        if subcommand:
            ctx.args += ["--", *words] if words is not None else []
            return ctx.args
        if words := [*rest, *(words or [])]:
            ctx.meta[WORDS] = " ".join(words)
        ctx._protected_args, ctx.args = [], []  # pyright: ignore[reportPrivateUsage]  # no subcommand runs
        return []

    def _bare_print(self, ctx: click.Context, args: list[str]) -> tuple[list[str], int | None]:
        """`args` with an empty prompt after a `-p`/`--print` that has none (`claude -p --output-format json TASK`,
        `code-puppy TASK -p`, or stdin as the prompt): the next word is another option, or there is none. `-p "-x is
        broken"` keeps its text. Also where the first word that is no option's value is; from a subcommand's name on,
        the line is the subcommand's and is not read here."""
        options = {name: param for param in self.params if isinstance(param, click.Option) for name in param.opts}
        given: list[str] = []
        first: int | None = None
        at = 0
        while at < len(args):
            word = args[at]
            given.append(word)
            at += 1
            option = options.get(word)
            if option is None:
                if first is None and not word.startswith("-"):
                    first = len(given) - 1
                    if word in self.list_commands(ctx):
                        return [*given, *args[at:]], first
                continue
            following = args[at] if at < len(args) else None
            if option.name == "prompt" and (following is None or following in options):
                given.append("")
            elif not option.is_flag and following is not None:
                given.append(following)
                at += 1
        return given, first

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
@click.option(
    "-p",
    "--prompt",
    "--print",
    "prompt",
    metavar="PROMPT",
    help="Run once headless with PROMPT ('-' or none: stdin; a bare `-p` with the words, as `claude -p`, works too).",
)
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
    "--compat",
    metavar="claude",
    callback=_compat,
    help="With -p and --output-format json or stream-json: Claude Code's schema, for scripts written for `claude -p`.",
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
    type=click.Choice([*PERMISSION_MODES, *CLAUDE_MODES]),
    metavar=f"[{'|'.join(PERMISSION_MODES)}]",
    help="What tools may do without asking (default from config: ask); Claude Code's names work too.",
)
@click.option("--dangerously-skip-permissions", is_flag=True, help="Claude Code's name for --permission-mode yolo.")
@click.option("--allow", "allow", multiple=True, metavar="PATTERN", help="Allow a shell command pattern (repeatable).")
@click.option(
    "--allowedTools",
    "--allowed-tools",
    "allowed_tools",
    multiple=True,
    metavar="RULES",
    help="Claude Code permission rules that run without asking, e.g. 'Bash(git diff:*) Edit'.",
)
@click.option(
    "--disallowedTools",
    "--disallowed-tools",
    "disallowed_tools",
    multiple=True,
    metavar="RULES",
    help="Claude Code permission rules that are denied; a bare tool name ('Bash') takes the tool away.",
)
@click.option("--max-requests", type=click.IntRange(min=1), metavar="N", help="Stop after N model requests (exit 3).")
@click.option("--max-turns", type=click.IntRange(min=1), metavar="N", help="Claude Code's name for --max-requests.")
@click.option("--append-system-prompt", metavar="TEXT", help="Add TEXT to the model's instructions.")
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
@click.option(
    "--durable",
    is_flag=True,
    help="With -p: a durable run, which `code-puppy runs resume ID` continues at its last finished step if it dies.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.option(
    "--verbose",
    is_flag=True,
    help="Accepted for Claude Code's scripts (`-p --output-format stream-json --verbose`); changes nothing here.",
)
@click.version_option(__version__, "--version", prog_name="code-puppy")
@click.pass_context
def cli(
    ctx: click.Context,
    *,
    prompt: str | None,
    model: str | None,
    output_format: str,
    compat: str | None,
    input_format: str,
    permission_mode: str | None,
    dangerously_skip_permissions: bool,
    allow: tuple[str, ...],
    allowed_tools: tuple[str, ...],
    disallowed_tools: tuple[str, ...],
    max_requests: int | None,
    max_turns: int | None,
    append_system_prompt: str | None,
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
    durable: bool,
    debug: bool,
    verbose: bool,
) -> None:
    """code-puppy: a coding agent for the terminal.

    Run it in a project for an interactive chat (`code-puppy "fix the bug"` starts it with that prompt), or with
    -p PROMPT (or `code-puppy exec PROMPT`) for one headless run. Options may follow the prompt's words; after `--`
    every word is the prompt.
    """
    # Every command, before anything reads a key: --version and --help never get here (click answers them first).
    if problem := harden_process():
        click.echo(f"code-puppy: warning: {problem}; commands the agent runs may read API keys from /proc", err=True)
    if ctx.invoked_subcommand is not None:
        return
    _check_session_options(continue_last=continue_last, resume=resume, fork=fork, name=name)
    permission_mode = _permission_mode(permission_mode, dangerously_skip_permissions)
    if max_turns is not None and max_requests not in (None, max_turns):
        fail("--max-turns is --max-requests: give one of them")
    max_requests = max_requests or max_turns
    prompt, words = _prompt_or_words(ctx, prompt)
    headless = prompt is not None or input_format == "stream-json" or _stdin_is_piped()
    if words is not None and headless:
        fail(f"{words!r} opens the chat with that prompt; with -p or piped input, pass the prompt as -p PROMPT")
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
        allowed_tools=allowed_tools,
        disallowed_tools=disallowed_tools,
        append_system_prompt=append_system_prompt,
        first_prompt=words,
        durable=durable,
    )
    if text is None:
        headless_only = {
            "--durable makes a headless run durable": durable,
            "--timeout bounds a headless run": timeout is not None,
            "--usage-file writes a headless run's result": usage_file is not None,
            "--compat claude shapes a headless run's output": compat is not None,
            f"--output-format {output_format} shapes a headless run's output": output_format != "text",
        }
        for what in (what for what, given in headless_only.items() if given):
            fail(f"{what}: use it with -p {'PROMPT' if words is None else repr(words)}")
        if not sys.stdin.isatty():
            if words is not None:
                fail(f"code-puppy PROMPT opens the chat, which needs a terminal: for one headless run, -p {words!r}")
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
            compat=compat,
        )
        return run_headless(options, headless)

    leave(guarded(run))


def _check_session_options(*, continue_last: bool, resume: str | None, fork: bool, name: str | None) -> None:
    if continue_last and resume is not None:
        fail("use either -c/--continue or -r/--resume, not both")
    if fork and not continue_last and resume is None:
        fail("--fork copies the session -r ID or -c continues: use it with one of them")
    if name is not None and not name.strip():
        fail("--name: the name is empty")


def _prompt_or_words(ctx: click.Context, prompt: str | None) -> tuple[str | None, str | None]:
    """The headless prompt, or the chat's first prompt: the words after the options are the headless prompt after
    `exec` or a bare `-p`/`--print` (stdin when there are none), else the chat's first prompt."""
    words: str | None = ctx.meta.get(WORDS)
    if not ctx.meta.get(EXEC) and prompt != "":
        return prompt, words
    if words is not None:
        return words, None
    if prompt == "" or _stdin_is_piped():
        return "-", None
    fail("exec runs one headless prompt: code-puppy exec PROMPT")


def _permission_mode(written: str | None, skip_permissions: bool) -> str | None:
    """`--permission-mode` in code-puppy's words (Claude Code's `acceptEdits` is `accept-edits`), with
    `--dangerously-skip-permissions` as `yolo`."""
    mode = CLAUDE_MODES.get(written, written) if written is not None else None
    if skip_permissions and mode not in (None, "yolo"):
        fail(f"--dangerously-skip-permissions is --permission-mode yolo, not {mode}: give one of them")
    return "yolo" if skip_permissions else mode


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
