"""Cost in the interactive chat, in a real pseudo-terminal: the bottom bar, the turn's closing line, `/usage`, and a
budget that stops a turn until `/budget` raises it."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli, wait_for
from tests.cost.test_costs import configure, cost_of
from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.pty_chat import PtyChat


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
        chat.type("/budget inf\r")
        chat.wait_for("usage: /budget USD (a positive amount, e.g. /budget 2.50) or /budget off; got 'inf'")
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


def test_usage_counts_the_requests_it_prices_in_one_number_format(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server)
    config = code_puppy_home / "config.toml"
    config.write_text(config.read_text().replace("auto_title = false", "auto_title = true"))
    (project / "big.txt").write_text("word " * 3000)  # over a thousand input tokens
    server.script(text("Read it."), text("Reading a big file"))
    chat = PtyChat(project)
    try:
        chat.wait_for("session ")
        chat.type("look at @big.txt\r")
        chat.wait_turn("Read it.")
        wait_for(lambda: "Reading a big file" in run_cli("sessions", "list", cwd=project).stdout, what="the title")
        chat.type("/usage\r")
        screen = chat.wait_for("this chat: ")
        (header,) = [line for line in screen.splitlines() if line.startswith("session ") and " requests · " in line]
        # The title request is in the header's counts as it is in its cost and in the rows below it.
        inputs, outputs = sum(r.input_tokens for r in server.requests), sum(r.output_tokens for r in server.requests)
        assert inputs >= 1000 and len(server.requests) == 2
        assert header.split(": ", 1)[1].startswith(
            f"2 requests · {inputs:,} input tokens · {outputs:,} output tokens · ${cost_of(server.requests):.4f} · "
        )
        lines = screen.splitlines()
        rows = lines[lines.index(header) + 1 : lines.index(header) + 3]
        assert [row.split()[:6] for row in rows] == [
            ["main", "gpt-4o", "1", "request", "·", f"{server.requests[0].input_tokens:,}"],
            ["title", "gpt-4o", "1", "request", "·", f"{server.requests[1].input_tokens:,}"],
        ]
    finally:
        chat.close()


def test_a_chat_budget_refuses_models_without_a_price(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server)
    chat = PtyChat(project, "-m", "fake", "--max-budget-usd", "1")
    try:
        assert chat.wait_exit() == 2
        assert "code-puppy: error: model fake has no known price, so a budget cannot be kept" in chat.text
        assert "Traceback" not in chat.text
    finally:
        chat.close()
    chat = PtyChat(project, "--max-budget-usd", "1")
    try:
        chat.wait_for("session ")
        chat.type("/model fake\r")
        chat.wait_for("model fake has no known price, so a budget cannot be kept")
        chat.type("/model\r")  # the picker, Esc keeps the model: still gpt
        chat.wait_for("Esc keeps the current")
        chat.type("\x1b")
        chat.wait_for("model: gpt (unchanged)")
        assert not server.requests
    finally:
        chat.close()


def test_a_project_budget_applies_once_the_project_is_trusted(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server)
    (project / ".code-puppy").mkdir()
    (project / ".code-puppy" / "config.toml").write_text("[budget]\nper_turn_usd = 0.000001\n")
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("Unbudgeted."))
    done = run_cli("-p", "read it", cwd=project)
    assert (done.returncode, done.stdout) == (0, "Unbudgeted.\n")
    assert "ignores its [budget]" in done.stderr
    assert run_cli("trust", cwd=project).returncode == 0
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("Never sent."))
    done = run_cli("-p", "read it", cwd=project)
    assert done.returncode == 3 and len(server.requests) == 3
    assert "stopped by a limit: budget $0.000001 reached ([budget] per_turn_usd)" in done.stderr
