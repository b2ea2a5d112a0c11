"""Choosing a model from a list: on a first run with none set (the choice saved in the user's config.toml) and with
`/model` and no name. The list is `code_puppy.model_choices`': configured, on a local server, or a key's provider's."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from prompt_toolkit.application import Application, get_app, in_terminal
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.input import create_input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.layout import Dimension, FormattedTextControl, HSplit, Layout, Window
from prompt_toolkit.utils import get_cwidth

from code_puppy.config import Settings, load_settings
from code_puppy.config.writing import set_default_model
from code_puppy.errors import ConfigError
from code_puppy.model_choices import (
    LOCAL_PORTS_VARIABLE,
    ModelChoice,
    describe,
    find_choices,
    keys_without_sdk,
    local_ports,
)
from code_puppy.paths import config_dir

NOTHING_FOUND = """\
code-puppy needs a model and found none: {keys},
no [models] in config.toml,
{servers}.
Either:
{installs}  export ANTHROPIC_API_KEY=... (or OPENAI_API_KEY, GEMINI_API_KEY, ...),
  start a local server (ollama serve, vllm serve MODEL, llama-server),
  or name your server's port: CODE_PUPPY_LOCAL_PORTS=PORT code-puppy,
  then run code-puppy again; or pass -m MODEL (-m anthropic:claude-sonnet-5-5)."""
"""Each line within 80 columns (the default ports' line included)."""


def nothing_found(environ: Mapping[str, str]) -> str:
    """What to do when no model can be found: the keys set whose provider's SDK is missing, the ports asked."""
    unusable = keys_without_sdk(environ)
    installs = "".join(
        f"  {variable} is set: pip install 'pydantic-ai-slim[{extra}]' to use it,\n" for variable, extra in unusable
    )
    ports = local_ports(environ)
    if not ports:
        servers = f"no local server asked ({LOCAL_PORTS_VARIABLE} is empty)"
    else:
        asked = ", ".join(f":{port} {name}" if name != "local server" else f":{port}" for port, name in ports)
        chosen = f" (from {LOCAL_PORTS_VARIABLE})" if LOCAL_PORTS_VARIABLE in environ else ""
        servers = f"no local server on {asked}{chosen}"
    keys = "no usable provider key" if unusable else "no provider key in the environment"
    return NOTHING_FOUND.format(keys=keys, servers=servers, installs=installs)


class ModelPicker:
    """A list of models, one a row with its price, context window and where it was found: arrows, PgUp/PgDn or a row's
    number (1-9) move, Enter chooses, Esc or Ctrl-C cancels (`interrupted` tells which); `run` returns the choice, or
    None. The list shows as many rows as the terminal has room for below the title and above the hint, scrolling with
    the cursor, so it fits any terminal."""

    def __init__(
        self, choices: Sequence[ModelChoice], title: str, hint: str, *, current: str | None = None, erase: bool = True
    ) -> None:
        self.choices = list(choices)
        self.cursor = next((i for i, choice in enumerate(self.choices) if choice.name == current), 0)
        self.interrupted = False
        self.title, self.hint = title, hint
        self._top = 0
        """The first row shown."""
        self._rows = _table(self.choices)
        keys = KeyBindings()
        keys.add("up")(self._move(lambda: -1))
        keys.add("down")(self._move(lambda: 1))
        keys.add("pageup")(self._move(lambda: -self._shown()))
        keys.add("pagedown")(self._move(lambda: self._shown()))
        for digit in "123456789":
            keys.add(digit)(self._jump(int(digit) - 1))
        keys.add("enter")(self._choose)
        keys.add("escape", eager=True)(self._cancel)
        keys.add("c-c")(self._interrupt)
        body = HSplit(
            [
                Window(
                    FormattedTextControl(self._title),
                    height=lambda: self._height(self._widest_title()),
                    wrap_lines=True,
                ),
                Window(FormattedTextControl(self._lines), height=lambda: Dimension.exact(self._shown())),
                Window(FormattedTextControl([("ansigray", hint)]), height=lambda: self._height(hint), wrap_lines=True),
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

    def _interrupt(self, event: KeyPressEvent) -> None:
        self.interrupted = True
        event.app.exit(result=None)

    def _move(self, step: Callable[[], int]) -> Callable[[KeyPressEvent], None]:
        def handler(event: KeyPressEvent) -> None:
            self.cursor = max(0, min(len(self.choices) - 1, self.cursor + step()))

        return handler

    def _jump(self, row: int) -> Callable[[KeyPressEvent], None]:
        def handler(event: KeyPressEvent) -> None:
            if row < len(self.choices):
                self.cursor = row

        return handler

    def _shown(self) -> int:
        """How many rows fit: the terminal's rows less the title's and the hint's (as wrapped), at least one."""
        rows = get_app().output.get_size().rows
        fixed = self._height(self._widest_title()).preferred + self._height(self.hint).preferred
        return max(1, min(len(self._rows), rows - fixed))

    def _height(self, text: str) -> Dimension:
        """The lines `text` takes in the terminal's width, wrapped; fewer when the terminal has fewer."""
        columns = max(1, get_app().output.get_size().columns)
        lines = sum(max(1, -(-get_cwidth(line) // columns)) for line in text.split("\n"))
        return Dimension(min=1, preferred=lines, max=lines)

    def _widest_title(self) -> str:
        return self._title_text(len(self._rows), len(self._rows))

    def _title_text(self, first: int, last: int) -> str:
        if len(self._rows) <= last - first + 1:
            return self.title
        return f"{self.title}  ({first}-{last} of {len(self._rows)}; PgUp/PgDn)"

    def _title(self) -> StyleAndTextTuples:
        self._scroll()
        above, _, title = self._title_text(self._top + 1, self._top + self._shown()).rpartition("\n")
        return [("", f"{above}\n" if above else ""), ("bold", title)]

    def _scroll(self) -> None:
        """Keep the cursor's row among those shown."""
        shown = self._shown()
        self._top = max(0, min(self._top, self.cursor, len(self._rows) - shown))
        self._top = max(self._top, self.cursor - shown + 1)

    def _lines(self) -> StyleAndTextTuples:
        self._scroll()
        lines: StyleAndTextTuples = []
        for index in range(self._top, self._top + self._shown()):
            selected = index == self.cursor
            lines.append(("reverse" if selected else "", f"{'›' if selected else ' '} {self._rows[index]}"))
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
    now, the chat may start; else the exit code (2: nothing found, or the choice could not be saved; 0: the user left
    with Esc, 130 with Ctrl-C, writing nothing)."""
    settings = await asyncio.to_thread(load_settings, project_root)
    choices = await asyncio.to_thread(find_choices, settings)
    if not choices:
        print(nothing_found(os.environ), file=sys.stderr)
        return 2
    config = config_dir() / "config.toml"
    title = f"No model is set yet. Models found: {_found(choices)}.\nChoose a model"
    hint = f"Esc quits · ↑↓ or 1-9 · Enter uses it and saves it in {config}"  # cut at the end on a narrow terminal
    picker = ModelPicker(choices, title, hint, erase=False)
    chosen = await picker.run()
    if chosen is None:
        print("No model chosen; nothing was written.")
        return 130 if picker.interrupted else 0
    try:
        set_default_model(config, chosen.name, chosen.endpoint)
    except ConfigError as exc:  # the chat does not start: the user meant a default, and has none yet
        print(f"code-puppy: error: {exc}", file=sys.stderr)
        return 2
    print(f"model: {chosen.name}, saved in {config}:")
    print(f'  model = "{chosen.name}"' + (f"   (and [models.{chosen.name}] for its server)" if chosen.endpoint else ""))
    print("Change that line to change the default. -m NAME picks a model for one run (a [models] name or")
    print("PROVIDER:MODEL); /model in the chat lists the models found and switches.")
    return None


def _found(choices: Sequence[ModelChoice]) -> str:
    """`4 from ANTHROPIC_API_KEY, 1 from Ollama at 127.0.0.1:11434`."""
    by_source: dict[str, int] = {}
    for choice in choices:
        by_source[choice.source] = by_source.get(choice.source, 0) + 1
    return ", ".join(f"{count} from {source}" for source, count in by_source.items())
