"""Slash commands typed the moment the prompt shows, before the runtime has loaded, in a real pseudo-terminal: they
wait for it instead of importing pydantic-ai beside its loader; and `--debug` shows a failed command's traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from code_puppy.chat.commands import CommandRegistry
from tests.fake_llm import FakeLLMServer
from tests.pty_chat import PtyChat
from tests.test_plugins_cli import user_plugin


@pytest.mark.parametrize(
    ("command", "answer"),
    [
        ("/sessions", "no sessions"),
        ("/skills", "no skills (add .code-puppy/skills/NAME/SKILL.md or .claude/skills/NAME/SKILL.md)"),
        ("/usage", "prompt cache: nothing cached yet"),
    ],
)
def test_a_command_typed_before_the_runtime_loads_waits_for_it(
    server: FakeLLMServer, project: Path, command: str, answer: str
) -> None:
    chat = PtyChat(project)
    try:
        chat.wait_for(lambda _: chat.prompt_line().startswith("›"))
        chat.type(f"{command}\r")
        chat.wait_for(answer)
        screen = chat.wait_for("session ")  # loaded: the toolbar names the session
        chat.type("/exit\r")
        assert chat.wait_exit() == 0
    finally:
        chat.close()
    assert "✗" not in screen
    assert "error" not in screen
    assert "still loading" not in screen


FAILING = """
import code_puppy

@code_puppy.hookimpl
def register_commands(register):
    def boom(text):
        raise RuntimeError("kaput")
    register("boom", boom, "a command that fails")
"""


def test_debug_shows_a_failed_commands_traceback_above_its_line(
    server: FakeLLMServer, code_puppy_home: Path, project: Path
) -> None:
    user_plugin(code_puppy_home, "failing", FAILING)
    chat = PtyChat(project, "--debug")
    try:
        chat.wait_for("session ")
        chat.type("/boom\r")
        screen = chat.wait_for("✗ RuntimeError: kaput")
        chat.type("/exit\r")
        assert chat.wait_exit() == 0
    finally:
        chat.close()
    lines = screen.splitlines()
    failure = lines.index("✗ RuntimeError: kaput")
    assert lines[failure - 1] == "RuntimeError: kaput"
    assert "Traceback (most recent call last):" in lines[:failure]
    assert 'raise RuntimeError("kaput")' in screen


def test_a_command_waits_for_the_runtime_unless_registered_as_light() -> None:
    commands = CommandRegistry()
    commands.register("plugin", lambda args: None, "a plugin's command")
    commands.register("/light", lambda args: None, "imports nothing heavy", light=True)
    assert [(command.name, command.light) for command in commands] == [("light", True), ("plugin", False)]
