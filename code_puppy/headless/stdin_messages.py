"""`--input-format stream-json`: user messages as JSON lines on stdin, for a headless run that takes steers.

Each line is `{"type": "user", "text": "…"}` or Claude Code's `{"type": "user", "message": {"role": "user",
"content": "…" | [{"type": "text", "text": "…"}, …]}}`. Without `-p`, the first message is the prompt; every later
one is a steer into the running turn.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO, cast


def parse_user_message(line: str) -> str:
    """The text of one stdin line; `ValueError` naming what is wrong with it."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(data, dict) or cast(dict[str, Any], data).get("type") != "user":
        raise ValueError('not a user message: expected {"type": "user", "text": "..."}')
    message = cast(dict[str, Any], data)
    text: object = message.get("text")
    inner: object = message.get("message")
    if text is None and isinstance(inner, dict):
        content: object = cast(dict[str, Any], inner).get("content")
        if isinstance(content, list):
            items = [cast(dict[str, Any], item) for item in cast(list[object], content) if isinstance(item, dict)]
            text = "\n".join(str(item.get("text", "")) for item in items if item.get("type") == "text")
        else:
            text = content
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the user message has no text")
    return text


def read_first_message(stream: TextIO) -> str | None:
    """The first valid user message on `stream`, or None at end of input; bad lines are reported and skipped."""
    for line in iter(stream.readline, ""):
        if not line.strip():
            continue
        try:
            return parse_user_message(line)
        except ValueError as exc:
            _report(line, exc)
    return None


def read_messages(stream: TextIO, deliver: Callable[[str], object]) -> threading.Thread:
    """Read user messages from `stream` in a daemon thread, calling `deliver(text)` for each, until end of input.

    A daemon thread, because a blocked read of a terminal or pipe cannot be interrupted and must not keep the
    process alive once the run is over.
    """

    def read() -> None:
        for line in iter(stream.readline, ""):
            if not line.strip():
                continue
            try:
                text = parse_user_message(line)
            except ValueError as exc:
                _report(line, exc)
                continue
            deliver(text)

    thread = threading.Thread(target=read, name="code-puppy-stdin", daemon=True)
    thread.start()
    return thread


def _report(line: str, error: ValueError) -> None:
    shown = line.strip()
    shown = shown if len(shown) <= 60 else shown[:59] + "…"
    print(f"code-puppy: ignored a stdin line ({error}): {shown}", file=sys.stderr, flush=True)
