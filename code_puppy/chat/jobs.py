"""The chat's jobs, each run beside the prompt: a user turn and `!cmd`; and the look back at a resumed session.

A job returns whether the turns queued behind it may run (False puts them back into the input line instead).
Imported before the prompt shows, so heavy modules are imported inside the functions, which only run once the
runtime has loaded.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from code_puppy.mentions import mention_attachments

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pydantic_ai.messages import TextContent

    from code_puppy.chat.control import ChatControl
    from code_puppy.core.turn import TurnOutcome
    from code_puppy.definitions.file_commands import FileCommand

MAX_SHELL_CONTEXT = 8_000
"""Characters of a `!cmd`'s output passed on to the model with the next message."""


async def turn_job(
    chat: ChatControl, text: str, *, command: FileCommand | None = None, attached: Sequence[TextContent] = ()
) -> bool:
    """One user turn on the shared run path, with `code-puppy steer` accepted while it runs; True if it succeeded.
    `command`: the file command `text` came from, whose `model` and `allowed-tools` hold for this turn only;
    `attached`: what goes to the model with `text` (`!cmd` output, notes), besides the files it mentions."""
    from rich.text import Text

    files, paths, missing = mention_attachments(text, chat.project_root)
    if paths:
        chat.screen.print(Text(f"  ↳ attached {', '.join(paths)}", style="dim"))
    if missing:
        names = ", ".join(f"@{token}" for token in missing)
        chat.screen.print(
            Text(f"  ↳ nothing attached for {names}: no such file in the project (sent as text)", style="dim")
        )
    runtime = await chat.ready()
    # Only once the runtime is up: its loader imports pydantic-ai in a worker thread, and two threads importing the
    # same modules at once can each see the other's half-initialised module (an ImportError, "circular import").
    from code_puppy.chat.chat_sink import ChatSink
    from code_puppy.core.events import ending
    from code_puppy.core.turn import unrun_follow_up_note

    sink = ChatSink(chat.screen, chat.live, chat.project_root)
    started = time.monotonic()
    runtime.sink = sink
    with runtime.command(command, warn=sink.warning) as model:
        if command is not None:
            from code_puppy.core.command_lines import run_command_lines

            text = await run_command_lines(runtime, command, text, ask=runtime.ask, warn=sink.warning)
        async with runtime.steerable(cancel=lambda: _cancelled_from_outside(chat)):
            outcome = await runtime.turn(text, sink, model=model, attachments=[*attached, *files], ask=runtime.ask)
    sink.flush_text()
    sink.flush_plan()
    turn = runtime.project.spending.turn
    cost = " · ".join(filter(None, (turn.describe(), turn.describe_cache())))
    if runtime.project.options.debug and isinstance(outcome.error, Exception) and ending(outcome)[0] == "error":
        import traceback

        chat.screen.print(Text("".join(traceback.format_exception(outcome.error)).rstrip(), style="dim"))
    # The turn's own time: its waits for the user's answers are left out.
    seconds = time.monotonic() - started - chat.live.waited
    chat.screen.print(Text(_ending(outcome, seconds, cost), style="dim"), "")
    if outcome.checkpoint_note:
        chat.screen.print(Text(outcome.checkpoint_note, style="yellow"))
    if outcome.unrun_follow_up:
        limit = runtime.settings.plugins.max_continuations
        chat.screen.print(Text(unrun_follow_up_note(outcome.unrun_follow_up, limit), style="yellow"))
    if runtime.session.notice:
        chat.screen.print(Text(runtime.session.notice, style="yellow"))
        runtime.session.notice = None
    if outcome.error is None:
        runtime.title_after_first_turn()
    await chat.screen.drain()  # the turn is over (the toolbar goes idle) once its last lines are on the screen
    return outcome.error is None


def _cancelled_from_outside(chat: ChatControl) -> None:
    """`code-puppy steer --cancel` or the dashboard's Cancel: as Ctrl-C, told where it came from."""
    from rich.text import Text

    chat.screen.print(Text("⏹ cancel requested from outside this terminal (the dashboard or code-puppy steer)"))
    chat.cancel_job()


def _ending(outcome: TurnOutcome, seconds: float, cost: str) -> str:
    """The turn's closing line: its time, requests, tokens and cost, or why it stopped."""
    from code_puppy.chat.chat_sink import describe_usage
    from code_puppy.core.events import ending
    from code_puppy.cost.spending import BudgetReached

    status, message = ending(outcome)
    if status == "success":
        return f"· {describe_usage(outcome.usage, seconds)} · {cost}"
    if status in ("interrupted", "terminated"):
        return f"⏹ turn cancelled · finished work kept · {cost}"
    if isinstance(outcome.error, BudgetReached):
        return f"⏹ {message} · /budget raises it"
    return f"{'⏹' if status == 'limit' else '✗'} {message}"


async def shell_job(chat: ChatControl, command: str) -> bool:
    """`!cmd`: run a shell command in the project; its output goes above, and to the model with the next message."""
    from rich.text import Text

    from code_puppy.plugins.process import run_shell

    if not command:
        chat.screen.print("usage: !COMMAND")
        return True
    # Its output goes to the model and the session: the provider keys stay out of it, as out of the shell tool's.
    environment = (await chat.ready()).project.command_environment()
    done = await run_shell(command, cwd=chat.project_root, timeout=None, merge_stderr=True, env=environment)
    output = done.stdout.rstrip()
    chat.screen.print(
        Text(f"$ {command}", style="bold"), output or "(no output)", Text(f"exit {done.returncode}", style="dim")
    )
    chat.attach(
        f'<shell-command exit_code="{done.returncode}">\n$ {command}\n{output[-MAX_SHELL_CONTEXT:]}\n</shell-command>',
        "shell-command",
    )
    return True


def show_resumed(chat: ChatControl) -> None:
    """A short look at where a resumed session left off."""
    from rich.text import Text

    from code_puppy.core.session_text import transcript

    runtime = chat.runtime
    if runtime is None:
        return
    lines = [line for line in transcript(runtime.session.messages) if line.strip()]
    how = "forked into session" if runtime.project.options.fork else "resumed session"
    chat.screen.print(
        Text(f"{how} {runtime.session.id[:8]} · {len(runtime.session.messages)} messages", style="bold"),
        *(Text(line[:200], style="dim") for line in lines[-8:]),
    )
    if runtime.recovered:
        chat.screen.print(Text(runtime.recovered, style="yellow"))
        runtime.recovered = None
