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
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from prompt_toolkit import PromptSession
from prompt_toolkit.application import Application
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.history import FileHistory
from prompt_toolkit.patch_stdout import patch_stdout
from prompt_toolkit.styles import Style

from code_puppy.chat.commands import CommandRegistry, SlashCommand, split_command
from code_puppy.chat.input import ChatCompleter, ProjectFiles, expand_mentions, private_history
from code_puppy.chat.jobs import shell_job, show_resumed, turn_job
from code_puppy.chat.keys import chat_key_bindings
from code_puppy.chat.live import Live, Screen
from code_puppy.chat.slash import OTHER_COMMANDS, register_builtins, register_file_commands
from code_puppy.chat.toolbar import toolbar_line
from code_puppy.errors import ConfigError, one_line
from code_puppy.mentions import attachment
from code_puppy.model_choices import default_model_written
from code_puppy.options import RunOptions
from code_puppy.paths import data_dir

if TYPE_CHECKING:
    from pydantic_ai.messages import TextContent

    from code_puppy.chat.approvals import Answer
    from code_puppy.chat.runtime import ChatRuntime
    from code_puppy.definitions.file_commands import FileCommand

STARTUP_TRACE = "CODE_PUPPY_STARTUP_TRACE"
"""A file the chat appends one line to when its prompt is first drawn, saying whether pydantic-ai was imported yet."""
STYLE = Style.from_dict(
    {
        "prompt": "bold ansicyan",
        "spinner": "ansicyan",
        "plan": "ansigray",
        "partial": "",
        "approval": "bold ansiyellow",
        "hint": "ansigray",
    }
)
_BUSY_COMMANDS = frozenset({"help", "queue", "steer", "usage", "budget", "permissions", "exit"})
"""Slash commands that make sense while a turn runs; the others wait for the prompt."""


def run_chat(options: RunOptions) -> int:
    """Show the prompt, then load config, model, session and agent behind it (a bad config: exit 2 after all).
    `-r` with no id (`resume == ""`): the session picker first; Esc there leaves without a chat."""
    if options.resume == "":
        from dataclasses import replace

        from code_puppy.chat.picker import pick_at_start

        picked = asyncio.run(pick_at_start(options.project_root))
        if picked is None:
            return 0
        options = replace(options, resume=picked)
    return asyncio.run(_chat(options))


async def _chat(options: RunOptions) -> int:
    """The chat, after the first run's choice of model when none is set anywhere."""
    if not (options.model or os.environ.get("CODE_PUPPY_MODEL") or default_model_written(options.project_root)):
        from code_puppy.chat.model_choice import first_run

        if (code := await first_run(options.project_root)) is not None:
            return code
    return await Chat(options).run()


@dataclass
class Approval:
    question: str
    answer: asyncio.Future[Answer]
    always: bool
    """Whether "always" is an answer."""


class Chat:
    """The chat, which alone changes its state: the key bindings act on it through `KeyTarget`, slash commands and
    jobs through `ChatControl`."""

    def __init__(self, options: RunOptions) -> None:
        self._options = options
        self._commands = CommandRegistry()
        register_builtins(self._commands, self)
        self._notes = register_file_commands(self._commands, self)
        self._live = Live()
        self._queued: list[str] = []
        self._attached: list[TextContent] = []
        self._runtime: ChatRuntime | None = None
        self._loading: asyncio.Task[ChatRuntime] | None = None
        self._job: asyncio.Task[bool] | None = None
        self._job_is_turn = False
        self._cancelling = False
        self._approval: Approval | None = None
        self._hint = ""
        self._interrupted_at = 0.0
        self._exit_code = 0
        self._quitting = False
        history = private_history(data_dir(), options.project_root)
        files = ProjectFiles(options.project_root)
        self._prompt: PromptSession[str] = PromptSession(
            history=FileHistory(str(history)),
            key_bindings=chat_key_bindings(self),
            bottom_toolbar=self._toolbar,
            completer=ChatCompleter(files, self._commands.names, self._command_help),
            complete_while_typing=True,
            prompt_continuation=lambda width, line_number, wrapped: " " * width,
            style=STYLE,
        )
        self.screen: Final = Screen(self._prompt)

    @property
    def project_root(self) -> Path:
        return self._options.project_root

    def _command_help(self, name: str) -> str:
        command = self._commands.get(name)
        return command.help if command is not None else ""

    @property
    def live(self) -> Live:
        return self._live

    @property
    def runtime(self) -> ChatRuntime | None:
        return self._runtime

    # --- the loop -------------------------------------------------------------------------------------------------

    async def run(self) -> int:
        print(f"\x1b[2mcode-puppy · {self.project_root} · /help for commands, Ctrl-D quits\x1b[0m")
        for note in self._notes:
            print(f"\x1b[33m{note}\x1b[0m")
        self._prompt.app.after_render += self._first_render
        ticker = asyncio.create_task(self._tick())
        try:
            with patch_stdout(raw=True):
                while not self._quitting:
                    try:
                        text = await self._prompt.prompt_async(self._message)
                    except (EOFError, KeyboardInterrupt):
                        break
                    if self._submit(text):
                        break
        finally:
            ticker.cancel()
            await self._shut_down()
        return self._exit_code

    def _first_render(self, app: Application[Any]) -> None:
        if self._loading is not None:
            return
        if trace := os.environ.get(STARTUP_TRACE):
            heavy = [name for name in ("pydantic", "pydantic_ai", "openai", "anthropic") if name in sys.modules]
            with open(trace, "a") as file:
                file.write(f"prompt drawn; imported so far: {', '.join(heavy) or 'none of pydantic, pydantic_ai'}\n")
        self._loading = asyncio.ensure_future(self._load())
        self._loading.add_done_callback(self._loaded)
        if self._options.first_prompt is not None:
            self.screen.print(f"› {self._options.first_prompt}")  # as if typed; it is sent once the runtime is up

    async def _load(self) -> ChatRuntime:
        # Imported in a worker thread, so the event loop (and the prompt) never waits for pydantic-ai's import.
        await asyncio.to_thread(importlib.import_module, "code_puppy.chat.runtime")
        from code_puppy.chat.runtime import ChatRuntime

        return await ChatRuntime.open(self._options, self.confirm, register_command=self._commands.register)

    def _loaded(self, task: asyncio.Task[ChatRuntime]) -> None:
        if task.cancelled():
            return
        if (error := task.exception()) is not None:
            self._exit_code = 2 if isinstance(error, ConfigError) else 1
            internal = f"internal error: {one_line(error, typed=True)}"
            what = one_line(error) if isinstance(error, ConfigError) else internal
            self._traceback(error)
            self.screen.write(f"code-puppy: error: {what}\n")
            self.quit()
            return
        self._runtime = task.result()
        if self._runtime.project.checkpoint_note:
            self.screen.print(f"note: {self._runtime.project.checkpoint_note}")
        if self._options.continue_last or self._options.resume:
            show_resumed(self)
        elif self._runtime.recovered:
            self.screen.print(self._runtime.recovered)
            self._runtime.recovered = None
        if (first := self._options.first_prompt) is not None:
            if self.busy():
                self._queued.insert(0, first)
            elif self._submit(first):
                self.quit()
        self.screen.invalidate()

    def quit(self) -> None:
        """Leave the chat: now if the prompt is up, else before it comes up again."""
        self._quitting = True
        if self._prompt.app.is_running:
            self._prompt.app.exit(exception=EOFError())

    async def ready(self) -> ChatRuntime:
        if self._runtime is not None:
            return self._runtime
        assert self._loading is not None  # started at the first render, before any input
        self._live.activity = "loading"
        return await asyncio.shield(self._loading)

    async def _shut_down(self) -> None:
        if self._job is not None and not self._job.done():
            self.cancel_job()
            await asyncio.wait([self._job])
        if self._loading is not None and not self._loading.done():
            self._loading.cancel()
        if self._runtime is not None:
            await self._runtime.close()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            if self._live.started is not None:
                self.screen.invalidate()
            if self._hint and time.monotonic() - self._interrupted_at > 2:
                self._hint = ""
                self.screen.invalidate()

    # --- input ----------------------------------------------------------------------------------------------------

    def _submit(self, text: str) -> bool:
        """Act on a line entered at the idle prompt; True means exit."""
        text = text.strip()
        if not text:
            return False
        if (parsed := split_command(text)) is not None:
            return self._run_command(*parsed)
        if text.startswith("!"):
            self._start_job(shell_job(self, text[1:].strip()), turn=False)
            return False
        self.start_turn(text)
        return False

    def _run_command(self, name: str, args: str) -> bool:
        """Run `/name args`; True when it was `/exit`."""
        command = self._commands.get(name)
        if command is None:
            suggestion = self._commands.suggest(name)
            nearest = f"; did you mean /{suggestion}?" if suggestion else "; /help lists the commands"
            if name in OTHER_COMMANDS:
                nearest = f" here: {OTHER_COMMANDS[name]}"
            self.screen.print(f"unknown command /{name}{nearest}")
            return False
        if self._runtime is None and not command.light:
            # Run once the runtime has loaded: its loader imports pydantic-ai in a worker thread, and the command's
            # own imports beside it could see its modules half-initialised (an ImportError that ends the chat).
            if self.busy():  # a turn waiting for the runtime: a second job would take its place
                self.screen.print(f"/{name} waits until the chat has loaded; try again in a moment")
            else:
                self._start_job(self._print_result(self._once_loaded(command, args)), turn=False)
            return False
        try:
            result = command.handler(args)
        except Exception as error:  # a plugin's command: its failure is one line, as an async command's is
            self._traceback(error)
            self.screen.print(f"✗ {failure_line(error)}")
            return False
        if isinstance(result, Coroutine):
            coroutine: Coroutine[Any, Any, object] = result  # pyright: ignore[reportUnknownVariableType]
            self._start_job(self._print_result(coroutine), turn=False)
        elif result is not None:
            self.screen.print(result)
        return command.name == "exit"

    async def _once_loaded(self, command: SlashCommand, args: str) -> object:
        await self.ready()
        result = command.handler(args)
        if isinstance(result, Coroutine):
            coroutine: Coroutine[Any, Any, object] = result  # pyright: ignore[reportUnknownVariableType]
            return await coroutine
        return result

    async def _print_result(self, coroutine: Coroutine[Any, Any, object]) -> bool:
        if (result := await coroutine) is not None:
            self.screen.print(result)
        return True

    def while_busy(self, text: str) -> None:
        """Enter while a job runs: a steer into the running turn, or one of the commands that work meanwhile."""
        if (parsed := split_command(text)) is not None:
            command = self._commands.get(parsed[0])
            if command is None or command.name in _BUSY_COMMANDS:  # by the command an alias runs: /cost, /quit
                if self._run_command(*parsed):
                    self.quit()
            else:
                self.screen.print(f"/{parsed[0]} waits until this turn ends (Ctrl-C cancels it; Tab queues it)")
            return
        self.steer(text)

    def steer(self, text: str) -> None:
        if self._runtime is None or not self._job_is_turn:
            self.queue(text)
            return
        self._runtime.inbox.steer(expand_mentions(text, self.project_root)[0])
        self.screen.invalidate()

    def queue(self, text: str) -> None:
        self._queued.append(text)
        self.screen.invalidate()

    def attach(self, text: str, kind: str) -> None:
        self._attached.append(attachment(text, kind))

    def detach(self, kind: str) -> None:
        self._attached = [item for item in self._attached if item.metadata != {"attached": kind}]

    def interrupt_idle(self) -> None:
        """The second Ctrl-C within 2 s quits; the first says so."""
        if time.monotonic() - self._interrupted_at < 2:
            self.quit()
            return
        self._interrupted_at = time.monotonic()
        self._hint = "Ctrl-C again (or Ctrl-D) to quit"

    def put_input(self, text: str) -> None:
        buffer = self._prompt.default_buffer
        buffer.text = text
        buffer.cursor_position = len(text)

    def _restore_input(self, texts: list[str]) -> None:
        """Put unsent text back into the input line, ahead of whatever is being typed."""
        buffer = self._prompt.default_buffer
        combined = "\n".join([*texts, buffer.text] if buffer.text else texts)
        buffer.text = combined
        buffer.cursor_position = len(combined)

    # --- approvals ------------------------------------------------------------------------------------------------

    async def confirm(self, items: list[Any], question: str, *, always: bool = True) -> Answer:
        """Show `items` above the prompt and ask `question` in it; y / n (/ a, with `always`) answer, Ctrl-C cancels
        the turn."""
        self.screen.print(*items)
        await self.screen.drain()  # the command or diff first, then the question
        answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._approval = Approval(question, answer, always)
        self.screen.invalidate()
        try:
            with self._live.waiting():
                result = await answer
        finally:
            self._approval = None
        labels = {"yes": "allowed", "no": "denied", "always": "allowed for the rest of this session"}
        self.screen.print(f"  ↳ {labels[result]}")
        return result

    def approving(self) -> bool:
        return self._approval is not None

    def answer(self, answer: Answer) -> None:
        approval = self._approval
        if approval is not None and not approval.answer.done() and (answer != "always" or approval.always):
            approval.answer.set_result(answer)

    # --- jobs -----------------------------------------------------------------------------------------------------

    def start_turn(self, text: str, *, command: FileCommand | None = None) -> None:
        attached, self._attached = self._attached, []
        self._start_job(turn_job(self, text, command=command, attached=attached), turn=True)

    def _start_job(self, job: Coroutine[Any, Any, bool], *, turn: bool) -> None:
        self._job_is_turn, self._cancelling = turn, False
        self._live = Live(started=time.monotonic(), activity="working")
        self._job = asyncio.create_task(job)
        self._job.add_done_callback(self._job_done)

    def busy(self) -> bool:
        return self._job is not None and not self._job.done()

    def cancel_job(self) -> None:
        if self._job is not None and not self._job.done() and not self._cancelling:
            self._cancelling = True
            self._live.activity = "cancelling"
            self._job.cancel()

    def _job_done(self, job: asyncio.Task[bool]) -> None:
        went_on = False
        if job.cancelled():
            self.screen.print("⏹ cancelled")
        elif (error := job.exception()) is not None:
            self._traceback(error)
            self.screen.print(f"✗ {failure_line(error)}")
        else:
            went_on = job.result()
        self._live = Live()
        unsent = self._runtime.inbox.take_undelivered() if self._runtime is not None else []
        if went_on:
            self._queued[:0] = unsent
            if self._queued:
                text = self._queued.pop(0)
                self.screen.print(f"› {text}")
                self.start_turn(text)
        else:
            self._restore_input([*unsent, *self._queued])
            self._queued.clear()
        self.screen.invalidate()

    def _traceback(self, error: BaseException) -> None:
        """With `--debug`, a failure's traceback above its one line."""
        if self._options.debug:
            import traceback

            from rich.text import Text

            self.screen.print(Text("".join(traceback.format_exception(error)).rstrip(), style="dim"))

    # --- screen ---------------------------------------------------------------------------------------------------

    def _message(self) -> StyleAndTextTuples:
        lines: StyleAndTextTuples = []
        live = self._live
        if live.started is not None:
            lines.extend(("class:plan", f"  {line}\n") for line in live.plan)
            if live.partial:
                lines.append(("class:partial", live.partial[-(self.screen.width - 3) :] + "\n"))
            waiting = self._runtime.inbox.waiting if self._runtime is not None else 0
            notes = [
                *([f"{len(self._queued)} queued"] if self._queued else []),
                *([f"{waiting} steer{'s' if waiting > 1 else ''} waiting"] if waiting else []),
            ]
            lines.append(("class:spinner", live.spinner_line(*notes) + "\n"))
        if self._approval is not None:
            lines.append(("class:approval", self._approval.question + " › "))
            return lines
        if self._hint:
            lines.append(("class:hint", self._hint + "\n"))
        lines.append(("class:prompt", "steer› " if self.busy() and self._job_is_turn else "› "))
        return lines

    def _toolbar(self) -> str:
        runtime = self._runtime
        if runtime is None:
            # The model the config will most likely choose, until it has loaded and says for sure.
            status = {"model": self._options.model or os.environ.get("CODE_PUPPY_MODEL") or "…", "mode": "loading…"}
        else:
            status = {
                "model": runtime.model_name,
                "session": f"session {runtime.session.id[:8]}",
                "context": runtime.context_used(),
                "cost": runtime.session_cost().describe(),
                "mode": runtime.policy.mode,
            }
        if self.busy():
            keys = {"steer": "Enter steer"} if self._job_is_turn else {}
            keys |= {"queue": "Tab queue", "cancel": "Ctrl-C cancel"}
        else:
            keys = {"help": "/help", "file": "@file", "cmd": "!cmd", "newline": "Esc-Enter newline"}
        return toolbar_line(status, keys, self.screen.width)


def failure_line(error: BaseException) -> str:
    """A command's failure in one line: a usage or config error in its own words (`unknown model 'x'`), anything
    else with its class, which says where to look."""
    return one_line(error) if isinstance(error, ConfigError) else one_line(error, typed=True)
