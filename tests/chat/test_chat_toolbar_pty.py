"""The chat's bottom toolbar and spinner in a real pseudo-terminal 80 columns wide, against the fake model server."""

from __future__ import annotations

from pathlib import Path

from tests.fake_llm import FakeLLMServer, text
from tests.pty_chat import IDLE_KEYS, PtyChat


def toolbar(chat: PtyChat) -> str:
    """The toolbar's line: the last one naming the model."""
    return [line for line in chat.text.splitlines() if line.startswith(" fake · ")][-1]


def test_the_toolbar_fits_80_columns_idle_and_busy(server: FakeLLMServer, project: Path) -> None:
    server.script(text("Slow answer.", delay=4))
    chat = PtyChat(project, columns=80)
    try:
        chat.wait_for(lambda screen: " · session " in screen and screen.rstrip().endswith(IDLE_KEYS))
        line = toolbar(chat)
        session = line.split(" · session ")[1][:8]
        assert line == f" fake · session {session} · ctx – · $0.0000 · ask   {IDLE_KEYS}"
        chat.type("hello\r")
        chat.wait_for("Ctrl-C cancel")
        busy = toolbar(chat)
        assert busy.startswith(" fake · ") and busy.endswith(" · ask   Enter steer · Ctrl-C cancel"), busy
        chat.wait_turn("Slow answer.")
        line = toolbar(chat)
        # The whole line, within 79 columns: the least needed parts (the newline key) gave way, model and mode stayed.
        assert line.startswith(f" fake · session {session} · ctx ") and line.endswith(f" · ask   {IDLE_KEYS}"), line
        assert len(line) <= 79
    finally:
        chat.close()
