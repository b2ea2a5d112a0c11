"""The chat's bottom toolbar and spinner in a real pseudo-terminal 80 columns wide, against the fake model server."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.fake_llm import FakeLLMServer, call, text, tool_calls
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


def test_the_spinner_waits_for_the_answer_without_counting_the_wait(server: FakeLLMServer, project: Path) -> None:
    server.script(tool_calls(call("shell", {"command": "touch made.txt"})), text("Made it."))
    chat = PtyChat(project, columns=80)
    try:
        chat.wait_for(" · session ")  # loaded
        began = time.monotonic()
        chat.type("make a file\r")
        chat.wait_for("Allow?")
        time.sleep(3)
        spinner = [line.strip() for line in chat.text.splitlines() if "waiting for your answer" in line]
        assert spinner == ["… waiting for your answer"]  # no turn time ticking beside it
        chat.type("y")
        screen = chat.wait_turn("Made it.")
        wall = time.monotonic() - began
        found = re.search(r"· (\d+\.\d)s · 2 requests · ", screen)
        assert found is not None, screen
        assert float(found.group(1)) <= wall - 3 + 0.05  # the three seconds the question waited are not the turn's
        assert (project / "made.txt").exists()
    finally:
        chat.close()
