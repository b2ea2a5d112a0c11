"""Writing the user's choice of default model into their config.toml with the smallest edit: every comment, key and
table the user had stays as it was written."""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import tomllib
from pathlib import Path

from code_puppy.config.settings import ModelEndpoint
from code_puppy.errors import ConfigError
from code_puppy.paths import write_atomically

_TOP_LEVEL_MODEL = re.compile(r"^model\s*=.*$", re.MULTILINE)
_TABLE_HEADER = re.compile(r"^[ \t]*\[", re.MULTILINE)
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_INLINE_MODELS = re.compile(r"^[ \t]*models[ \t]*=[ \t]*\{", re.MULTILINE)


def set_default_model(path: Path, name: str, endpoint: ModelEndpoint | None = None) -> None:
    """Make `name` the default model in the config file at `path` (`model = "NAME"`), with `[models.NAME]` for
    `endpoint` when given and not there yet. A missing file is created 0600 in a 0700 folder; an existing one keeps
    its mode, its line endings (CRLF stays CRLF), its other lines and, through a symlink, its place.

    Raises:
        ConfigError: The file is not valid TOML, is read-only (no write bit, even for root), or keeps `[models]` as an
            inline table a new entry cannot join (each left as it was, the line saying what to add by hand); or it
            cannot be written.
    """
    path = path.resolve()
    try:
        with path.open(encoding="utf-8", newline="") as file:
            text = file.read()
        mode: int | None = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        text, mode = "", None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None
    crlf = "\r\n" in text
    text = text.replace("\r\n", "\n")
    before = _parsed(path, text)
    if mode is not None and (not mode & 0o222 or not os.access(path, os.W_OK)):
        raise ConfigError(f"{path} is read-only; {_by_hand(name, endpoint)} yourself")
    expected = {**before, "model": name}
    entry = ""
    models = before.get("models")
    if endpoint is not None and not (isinstance(models, dict) and name in models):
        entry = _entry(name, endpoint)
        expected["models"] = {**(models if isinstance(models, dict) else {}), **tomllib.loads(entry)["models"]}
    # The model line where it belongs (replacing one, or before the first table), else at the very top, which is
    # always the top level; whichever reads back as exactly the old settings plus the choice.
    for edited in (_with_model(text, name), f"model = {json.dumps(name)}\n{text}"):
        if entry:
            edited = f"{edited.rstrip()}\n\n{entry}"
        with contextlib.suppress(tomllib.TOMLDecodeError):
            if tomllib.loads(edited) == expected:
                break
    else:
        if entry and _INLINE_MODELS.search(text):
            raise ConfigError(
                f"{path}: models = {{ … }} is an inline table, which cannot take another entry here; "
                f"{_by_hand(name, endpoint, inline=True)} yourself"
            )
        raise ConfigError(f"{path}: could not add the model without changing other settings; set model = {name!r}")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomically(path, edited.replace("\n", "\r\n") if crlf else edited, private=True)
        if mode is not None:
            os.chmod(path, mode)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be written ({exc})") from None


def _parsed(path: Path, text: str) -> dict[str, object]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}; fix it first, then choose the model again") from None


def _with_model(text: str, name: str) -> str:
    """`text` with its top-level `model = …` line replaced, or a new one before the first table (top-level keys must
    come before any table)."""
    line = f"model = {json.dumps(name)}"
    header = _TABLE_HEADER.search(text)
    top = text[: header.start()] if header else text
    if _TOP_LEVEL_MODEL.search(top):
        return _TOP_LEVEL_MODEL.sub(lambda _: line, top, count=1) + text[len(top) :]
    if header is None:
        return f"{text.rstrip(chr(10))}\n{line}\n" if text.strip() else f"{line}\n"
    return f"{top}{line}\n\n{text[header.start() :]}" if top.strip() else f"{line}\n\n{text}"


def _by_hand(name: str, endpoint: ModelEndpoint | None, *, inline: bool = False) -> str:
    """What to add by hand when the file cannot be edited: `model = "NAME"`, and the local server's entry (written
    inline for an inline `models = { … }`)."""
    line = f"add model = {json.dumps(name)}"
    if endpoint is None:
        return line
    header, *keys = _entry(name, endpoint).splitlines()
    if inline:
        key = name if _BARE_KEY.match(name) else json.dumps(name)
        return f"{line} and {key} = {{ {', '.join(keys)} }} inside models = {{ … }}"
    return f"{line} and {header} with {', '.join(keys)}"


def _entry(name: str, endpoint: ModelEndpoint) -> str:
    key = name if _BARE_KEY.match(name) else json.dumps(name)
    lines = [f"[models.{key}]", f"name = {json.dumps(endpoint.name)}"]
    if endpoint.provider != "openai-chat":
        lines.append(f"provider = {json.dumps(endpoint.provider)}")
    if endpoint.base_url is not None:
        lines.append(f"base_url = {json.dumps(endpoint.base_url)}")
    if endpoint.context_window is not None:
        lines.append(f"context_window = {endpoint.context_window}")
    if endpoint.input_price is not None and endpoint.output_price is not None:
        lines.append(f"input_price = {endpoint.input_price:g}")
        lines.append(f"output_price = {endpoint.output_price:g}")
    return "\n".join(lines) + "\n"
