"""The interactive chat: one long-lived prompt, with each turn (or slow command) a job running beside it.

terminal-notes.md approach C. The prompt appears at once: nothing here imports pydantic-ai; `runtime.py` (model,
session, agent) loads in a background thread after the prompt's first render. While a turn runs the input stays
live: Enter steers the running run, Tab queues the next turn, Ctrl-C cancels the turn and keeps the draft.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prompt_toolkit import PromptSession
from prompt_toolkit.application import Application
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.history import FileHistory
from prompt_toolkit.patch_stdout import patch_stdout
from prompt_toolkit.styles import Style

from code_puppy.options import RunOptions
from code_puppy.paths import data_dir
from code_puppy.ui.commands import CommandRegistry, split_command
from code_puppy.ui.input import ChatCompleter, ProjectFiles, expand_mentions, history_path
from code_puppy.ui.keys import chat_key_bindings
from code_puppy.ui.live import Live, Screen

if TYPE_CHECKING:
    from code_puppy.ui.approvals import Answer
    from code_puppy.ui.runtime import ChatRuntime

STARTUP_TRACE = "CODE_PUPPY_STARTUP_TRACE"
"""A file the chat appends one line to when its prompt is first drawn, saying whether pydantic-ai was imported yet."""
STYLE = Style.from_dict(
    {"prompt": "bold ansicyan", "spinner": "ansicyan", "partial": "", "approval": "bold ansiyellow", "hint": "ansigray"}
)
_BUSY_COMMANDS = frozenset({"help", "queue", "steer", "usage", "permissions", "exit"})
"""Slash commands that make sense while a turn runs; the others wait for the prompt."""


def run_chat(options: RunOptions) -> int:
    """Show the prompt, then load config, model, session and agent behind it (a bad config: exit 2 after all)."""
    return asyncio.run(Chat(options).run())


@dataclass
class Approval:
    question: str
    answer: asyncio.Future[Answer]


class Chat:
    def __init__(self, options: RunOptions) -> None:
        from code_puppy.ui.slash import register_builtins

        self.options = options
        self.model_name = options.model or os.environ.get("CODE_PUPPY_MODEL") or ""
        """The model's name; known for sure once the config has loaded."""
        self.commands = CommandRegistry()
        register_builtins(self)
        self.live = Live()
        self.queued: list[str] = []
        self.shell_context: list[str] = []
        self.runtime: ChatRuntime | None = None
        self.loading: asyncio.Task[ChatRuntime] | None = None
        self.job: asyncio.Task[None] | None = None
        self.job_is_turn = False
        self.job_ok = True
        self.cancelling = False
        self.approval: Approval | None = None
        self.hint = ""
        self.exit_code = 0
        self.quitting = False
        self.interrupted_at = 0.0
        history = history_path(data_dir(), options.project_root)
        history.parent.mkdir(parents=True, exist_ok=True)
        files = ProjectFiles(options.project_root)
        self.session: PromptSession[str] = PromptSession(
            history=FileHistory(str(history)),
            key_bindings=chat_key_bindings(self),
            bottom_toolbar=self._toolbar,
            completer=ChatCompleter(files, self.commands.names),
            complete_while_typing=True,
            prompt_continuation=lambda width, line_number, wrapped: " " * width,
            style=STYLE,
        )
        self.screen = Screen(self.session)

    # --- the loop -------------------------------------------------------------------------------------------------

    async def run(self) -> int:
        print(f"\x1b[2mcode-puppy · {self.options.project_root} · /help for commands, Ctrl-D quits\x1b[0m")
        self.session.app.after_render += self._first_render
        ticker = asyncio.create_task(self._tick())
        try:
            with patch_stdout(raw=True):
                while not self.quitting:
                    try:
                        text = await self.session.prompt_async(self._message)
                    except (EOFError, KeyboardInterrupt):
                        break
                    if self.submit(text):
                        break
        finally:
            ticker.cancel()
            await self._shut_down()
        return self.exit_code

    def _first_render(self, app: Application[Any]) -> None:
        if self.loading is not None:
            return
        if trace := os.environ.get(STARTUP_TRACE):
            heavy = [name for name in ("pydantic", "pydantic_ai", "openai", "anthropic") if name in sys.modules]
            with open(trace, "a") as file:
                file.write(f"prompt drawn; imported so far: {', '.join(heavy) or 'none of pydantic, pydantic_ai'}\n")
        self.loading = asyncio.ensure_future(self._load())
        self.loading.add_done_callback(self._loaded)

    async def _load(self) -> ChatRuntime:
        # Imported in a worker thread, so the event loop (and the prompt) never waits for pydantic-ai's import.
        await asyncio.to_thread(importlib.import_module, "code_puppy.ui.runtime")
        from code_puppy.ui.runtime import ChatRuntime

        runtime = await ChatRuntime.open(self.options, self.confirm, register_command=self.commands.register)
        self.model_name = runtime.model_name
        return runtime

    def _loaded(self, task: asyncio.Task[ChatRuntime]) -> None:
        if task.cancelled():
            return
        if (error := task.exception()) is not None:
            from code_puppy.errors import ConfigError

            self.exit_code = 2 if isinstance(error, ConfigError) else 1
            what = str(error) if isinstance(error, ConfigError) else f"internal error: {type(error).__name__}: {error}"
            self.screen.write(f"code-puppy: error: {what}\n")
            self.quit()
            return
        self.runtime = task.result()
        if self.options.continue_last or self.options.resume:
            from code_puppy.ui.slash import show_resumed

            show_resumed(self)
        self.screen.invalidate()

    def quit(self) -> None:
        """Leave the chat: now if the prompt is up, else before it comes up again."""
        self.quitting = True
        if self.session.app.is_running:
            self.session.app.exit(exception=EOFError())

    async def ready(self) -> ChatRuntime:
        """The runtime, once loaded."""
        if self.runtime is not None:
            return self.runtime
        assert self.loading is not None  # started at the first render, before any input
        self.live.activity = "loading"
        return await asyncio.shield(self.loading)

    async def _shut_down(self) -> None:
        if self.job is not None and not self.job.done():
            self.cancel_job()
            await asyncio.wait([self.job])
        if self.loading is not None and not self.loading.done():
            self.loading.cancel()
        if self.runtime is not None:
            await self.runtime.close()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            if self.live.started is not None:
                self.screen.invalidate()
            if self.hint and time.monotonic() - self.interrupted_at > 2:
                self.hint = ""
                self.screen.invalidate()

    # --- input ----------------------------------------------------------------------------------------------------

    def submit(self, text: str) -> bool:
        """Act on a line entered at the idle prompt; True means exit."""
        text = text.strip()
        if not text:
            return False
        if (parsed := split_command(text)) is not None:
            return self.run_command(*parsed)
        if text.startswith("!"):
            from code_puppy.ui.slash import shell_job

            self.start_job(shell_job(self, text[1:].strip()), turn=False)
            return False
        self.start_turn(text)
        return False

    def run_command(self, name: str, args: str) -> bool:
        command = self.commands.get(name)
        if command is None:
            suggestion = self.commands.suggest(name)
            nearest = f"; did you mean /{suggestion}?" if suggestion else "; /help lists the commands"
            self.screen.print(f"unknown command /{name}{nearest}")
            return False
        try:
            result = command.handler(args)
        except Exception as error:  # a plugin's command: its failure is one line, as an async command's is
            self.screen.print(f"✗ {type(error).__name__}: {error}")
            return False
        if isinstance(result, Coroutine):
            coroutine: Coroutine[Any, Any, object] = result  # pyright: ignore[reportUnknownVariableType]
            self.start_job(self._print_result(coroutine), turn=False)
        elif result is not None:
            self.screen.print(result)
        return name == "exit"

    async def _print_result(self, coroutine: Coroutine[Any, Any, object]) -> None:
        if (result := await coroutine) is not None:
            self.screen.print(result)

    def while_busy(self, text: str) -> None:
        """Enter while a job runs: a steer into the running turn, or one of the commands that work meanwhile."""
        if (parsed := split_command(text)) is not None:
            if parsed[0] in _BUSY_COMMANDS or self.commands.get(parsed[0]) is None:
                if self.run_command(*parsed):
                    self.quit()
            else:
                self.screen.print(f"/{parsed[0]} waits until this turn ends (Ctrl-C cancels it; Tab queues it)")
            return
        self.steer(text)

    def steer(self, text: str) -> None:
        if self.runtime is None or not self.job_is_turn:
            self.queue(text)
            return
        self.runtime.inbox.steer(expand_mentions(text, self.options.project_root)[0])
        self.screen.invalidate()

    def queue(self, text: str) -> None:
        self.queued.append(text)
        self.screen.invalidate()

    def restore_input(self, texts: list[str]) -> None:
        """Put unsent text back into the input line, ahead of whatever is being typed."""
        buffer = self.session.default_buffer
        combined = "\n".join([*texts, buffer.text] if buffer.text else texts)
        buffer.text = combined
        buffer.cursor_position = len(combined)

    async def confirm(self, items: list[Any], question: str) -> Answer:
        """Show `items` above the prompt and ask `question` in it; y / n / a answer, Ctrl-C cancels the turn."""
        self.screen.print(*items)
        await self.screen.drain()  # the command or diff first, then the question
        answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.approval = Approval(question, answer)
        activity, self.live.activity = self.live.activity, "waiting for your answer"
        self.screen.invalidate()
        try:
            result = await answer
        finally:
            self.approval = None
            self.live.activity = activity
        labels = {"yes": "allowed", "no": "denied", "always": "allowed for the rest of this session"}
        self.screen.print(f"  ↳ {labels[result]}")
        return result

    # --- jobs -----------------------------------------------------------------------------------------------------

    def start_turn(self, text: str) -> None:
        if self.shell_context:
            text = "\n\n".join([*self.shell_context, text])
            self.shell_context.clear()
        from code_puppy.ui.slash import turn_job

        self.start_job(turn_job(self, text), turn=True)

    def start_job(self, job: Coroutine[Any, Any, None], *, turn: bool) -> None:
        self.job_is_turn, self.job_ok, self.cancelling = turn, True, False
        self.live = Live(started=time.monotonic(), activity="working")
        self.job = asyncio.create_task(job)
        self.job.add_done_callback(self._job_done)

    def busy(self) -> bool:
        return self.job is not None and not self.job.done()

    def cancel_job(self) -> None:
        if self.busy() and not self.cancelling:
            assert self.job is not None
            self.cancelling = True
            self.live.activity = "cancelling"
            self.job.cancel()

    def _job_done(self, job: asyncio.Task[None]) -> None:
        if not job.cancelled() and (error := job.exception()) is not None:
            self.job_ok = False
            self.screen.print(f"✗ {type(error).__name__}: {error}")
        self.live = Live()
        unsent = self.runtime.inbox.take_undelivered() if self.runtime is not None else []
        if job.cancelled() or not self.job_ok:
            if job.cancelled():
                self.screen.print("⏹ cancelled")
            self.restore_input([*unsent, *self.queued])
            self.queued.clear()
        else:
            self.queued[:0] = unsent
            if self.queued:
                text = self.queued.pop(0)
                self.screen.print(f"› {text}")
                self.start_turn(text)
        self.screen.invalidate()

    # --- screen ---------------------------------------------------------------------------------------------------

    def _message(self) -> StyleAndTextTuples:
        lines: StyleAndTextTuples = []
        if self.live.started is not None:
            if self.live.partial:
                lines.append(("class:partial", self.live.partial[-(self.screen.width - 3) :] + "\n"))
            waiting = self.runtime.inbox.waiting if self.runtime is not None else 0
            notes = [
                *([f"{len(self.queued)} queued"] if self.queued else []),
                *([f"{waiting} steer{'s' if waiting > 1 else ''} waiting"] if waiting else []),
            ]
            lines.append(("class:spinner", self.live.spinner_line(*notes) + "\n"))
        if self.approval is not None:
            lines.append(("class:approval", self.approval.question + " › "))
            return lines
        if self.hint:
            lines.append(("class:hint", self.hint + "\n"))
        lines.append(("class:prompt", "steer› " if self.busy() and self.job_is_turn else "› "))
        return lines

    def _toolbar(self) -> str:
        runtime = self.runtime
        parts = [self.model_name or "…", f"session {runtime.session.id[:8]}" if runtime is not None else "loading…"]
        if runtime is not None:
            parts += [runtime.context_used(), runtime.policy.mode]
        if self.busy():
            keys = "Enter steer · Tab queue · Ctrl-C cancel" if self.job_is_turn else "Tab queue · Ctrl-C cancel"
        else:
            keys = "/help · @file · !cmd · Esc-Enter newline"
        return f" {' · '.join(parts)}   {keys}"
