"""The errors code-puppy reports in one line with exit 2; importable without pydantic, for the fast paths."""

from __future__ import annotations

import sys
from typing import cast


class ConfigError(Exception):
    """A usage or configuration error: reported in one line, exit 2, nothing sent to a model."""


class StoreError(ConfigError):
    """The sessions database cannot be opened or read; the message names the file and what to do."""


def one_line(error: BaseException, *, typed: bool = False, limit: int = 300) -> str:
    """An error on one short line: its message (`Type: message` when `typed`), the first of a group's, cut to
    `limit` characters; its class name when it has no message."""
    while isinstance(error, BaseExceptionGroup):
        error = cast(BaseExceptionGroup[BaseException], error).exceptions[0]
    text = " ".join(str(error).split())
    if typed:
        text = f"{type(error).__name__}: {text}".rstrip(": ")
    text = text or type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def say(line: str) -> None:
    """One line for the user on stderr, as code-puppy's own (`code-puppy: …`), at once."""
    print(f"code-puppy: {line}", file=sys.stderr, flush=True)
