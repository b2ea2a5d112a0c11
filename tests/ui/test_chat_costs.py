"""Cost in the interactive chat, in a real pseudo-terminal: the bottom bar, the turn's closing line, `/usage`, and a
budget that stops a turn until `/budget` raises it."""

from __future__ import annotations

from pathlib import Path

from tests.fake_llm import FakeLLMServer, text
from tests.pty_chat import PtyChat
from tests.test_costs import configure, cost_of


def test_bar_turn_line_usage_and_budget(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    configure(code_puppy_home, server)
    server.script(text("One."), text("Three."))
    chat = PtyChat(project)
    try:
        chat.wait_for("session ")
        chat.type("first question\r")
        chat.wait_turn("One.")
        spent = f"${cost_of(server.requests):.4f}"
        screen = chat.wait_for(f"% · {spent} · ask")  # the bar: the context used, then the session's cost
        assert any(line.startswith("· ") and line.endswith(f"out · {spent}") for line in screen.splitlines())
        chat.type("/usage\r")
        screen = chat.wait_for("this chat: ")
        (main,) = [line for line in screen.splitlines() if line.startswith("  main ")]
        assert main.split()[:4] == ["main", "gpt-4o", "1", "request"] and main.endswith(f"out · {spent}")
        assert f"this chat: {spent} over 1 requests" in screen
        chat.type("/budget 0.000001\r")
        chat.wait_for(f"budgets: --max-budget-usd $0.000001: {spent} spent")
        chat.type("second question\r")
        chat.wait_turn("/budget raises it")
        assert f"⏹ stopped by a limit: budget $0.000001 reached (--max-budget-usd): {spent} spent" in chat.text
        assert len(server.requests) == 1  # stopped before the request
        chat.type("/budget off\r")
        chat.wait_for("no budget set")
        chat.type("third question\r")
        chat.wait_turn("Three.")
        total = f"${cost_of(server.requests):.4f}"
        chat.wait_for(f"% · {total} · ask")
    finally:
        chat.close()
