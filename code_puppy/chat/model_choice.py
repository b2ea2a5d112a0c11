"""Choosing a model from a list: on a first run with none set (the choice saved in the user's config.toml) and with
`/model` and no name. The list is `code_puppy.model_choices`': configured, on a local server, or a key's provider's."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from prompt_toolkit.application import Application, in_terminal
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.input import create_input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.layout import FormattedTextControl, HSplit, Layout, Window

from code_puppy.config import Settings, load_settings
from code_puppy.config.writing import set_default_model
from code_puppy.model_choices import LOCAL_SERVERS, ModelChoice, describe, find_choices
from code_puppy.paths import config_dir

NOTHING_FOUND = """\
code-puppy needs a model and found none: no provider key in the environment, no [models] in config.toml,
no local server on 127.0.0.1 ({servers}). Either:
  export ANTHROPIC_API_KEY=...  (or OPENAI_API_KEY, GEMINI_API_KEY, ...) and run code-puppy again,
  start a local server (ollama serve, vllm serve MODEL, llama-server) and run code-puppy again,
  or pass -m MODEL (e.g. -m anthropic:claude-sonnet-5-5)."""


class ModelPicker:
    """A list of models, one a row with its price, context window and where it was found: arrows or a row's number
    move, Enter chooses, Esc cancels; `run` returns the choice, or None."""

    def __init__(
        self, choices: Sequence[ModelChoice], title: str, hint: str, *, current: str | None = None, erase: bool = True
    ) -> None:
        self.choices = list(choices)
        self.cursor = next((i for i, choice in enumerate(self.choices) if choice.name == current), 0)
        self._rows = _table(self.choices)
        keys = KeyBindings()
        keys.add("up")(self._move(-1))
        keys.add("down")(self._move(1))
        for digit in "123456789":
            keys.add(digit)(self._jump(int(digit) - 1))
        keys.add("enter")(self._choose)
        keys.add("escape", eager=True)(self._cancel)
        keys.add("c-c")(self._cancel)
        body = HSplit(
            [
                Window(FormattedTextControl([("bold", title)]), height=1),
                Window(FormattedTextControl(self._lines), height=len(self._rows)),
                Window(FormattedTextControl([("ansigray", hint)]), height=1),
            ]
        )
        # An input of its own: the chat's input parser is flushed by the chat's own timer, which would take a lone Esc
        # typed within half a second of `/model` away from the picker.
        self.app: Application[ModelChoice | None] = Application(
            layout=Layout(body), key_bindings=keys, erase_when_done=erase, input=create_input()
        )

    async def run(self) -> ModelChoice | None:
        return await self.app.run_async()

    def _choose(self, event: KeyPressEvent) -> None:
        event.app.exit(result=self.choices[self.cursor])

    def _cancel(self, event: KeyPressEvent) -> None:
        event.app.exit(result=None)

    def _move(self, step: int) -> Callable[[KeyPressEvent], None]:
        def handler(event: KeyPressEvent) -> None:
            self.cursor = max(0, min(len(self.choices) - 1, self.cursor + step))

        return handler

    def _jump(self, row: int) -> Callable[[KeyPressEvent], None]:
        def handler(event: KeyPressEvent) -> None:
            if row < len(self.choices):
                self.cursor = row

        return handler

    def _lines(self) -> StyleAndTextTuples:
        lines: StyleAndTextTuples = []
        for index, row in enumerate(self._rows):
            selected = index == self.cursor
            lines.append(("reverse" if selected else "", f"{'›' if selected else ' '} {row}"))
            lines.append(("", "\n"))
        return lines[:-1]


def _table(choices: Sequence[ModelChoice]) -> list[str]:
    """One line per choice, numbered, its columns aligned."""
    columns = [list(describe(choice)) for choice in choices]
    widths = [max(len(row[column]) for row in columns) for column in range(4)]
    return [
        f"{index:>2}  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for index, row in enumerate(columns, start=1)
    ]


async def pick_model(settings: Settings, current: str) -> ModelChoice | None:
    """`/model` with no name: the configured and found models, the current one under the cursor; the one picked."""
    choices = await asyncio.to_thread(find_choices, settings)
    if not any(choice.name == current for choice in choices):
        choices.insert(0, ModelChoice(current, "current"))
    hint = "↑↓ or 1-9 · Enter switches · Esc keeps the current"
    picker = ModelPicker(choices, "Switch the model", hint, current=current)
    async with in_terminal():
        return await picker.run()


async def first_run(project_root: Path) -> int | None:
    """No model set anywhere: offer what can be found and save the choice as the user's default. None: a model is set
    now, the chat may start; else the exit code (2: nothing found; 0: the user left without choosing)."""
    settings = await asyncio.to_thread(load_settings, project_root)
    choices = await asyncio.to_thread(find_choices, settings)
    if not choices:
        servers = ", ".join(f"{name} :{port}" for port, name in LOCAL_SERVERS)
        print(NOTHING_FOUND.format(servers=servers), file=sys.stderr)
        return 2
    config = config_dir() / "config.toml"
    print(f"No model is set yet. Models found: {_found(choices)}.")
    hint = f"↑↓ or 1-9 · Enter uses it and saves it in {config} · Esc quits"
    picker = ModelPicker(choices, "Choose a model", hint, erase=False)
    chosen = await picker.run()
    if chosen is None:
        print("No model chosen; nothing was written.")
        return 0
    set_default_model(config, chosen.name, chosen.endpoint)
    print(f"model: {chosen.name}, saved in {config}:")
    print(f'  model = "{chosen.name}"' + (f"   (and [models.{chosen.name}] for its server)" if chosen.endpoint else ""))
    print("Change that line to change the default; -m MODEL picks one for a run, /model in the chat switches.")
    return None


def _found(choices: Sequence[ModelChoice]) -> str:
    """`4 from ANTHROPIC_API_KEY, 1 from Ollama at 127.0.0.1:11434`."""
    by_source: dict[str, int] = {}
    for choice in choices:
        by_source[choice.source] = by_source.get(choice.source, 0) + 1
    return ", ".join(f"{count} from {source}" for source, count in by_source.items())
