"""Issue 25 part 4 in the chat, in a real pseudo-terminal: a file command's `` !`cmd` `` line that ask mode would ask
about is asked about in the prompt, and runs before the prompt is sent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_llm import FakeLLMServer, text
from tests.pty_chat import PtyChat
from tests.test_file_definitions import user


@pytest.fixture
def chat(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> Iterator[PtyChat]:
    (code_puppy_home / "commands").mkdir()
    (code_puppy_home / "commands" / "look.md").write_text("Files: !`ls`\nNotes: !`cat notes.txt`\nNow $1.")
    (project / "notes.txt").write_text("secret plans\n")
    terminal = PtyChat(project)
    terminal.wait_for("session ")
    yield terminal
    terminal.close()


def test_the_user_is_asked_about_each_line_and_its_output_is_sent(server: FakeLLMServer, chat: PtyChat) -> None:
    server.script(text("Two files."))
    chat.type("/look summarize\r")
    chat.wait_for("Allow?")
    assert "⚠ shell wants to run:\n  ls\n" in chat.text
    chat.type("y")
    chat.wait_for(lambda screen: "⚠ shell wants to run:\n  cat notes.txt\n" in screen)
    chat.type("n")
    chat.wait_turn("Two files.")
    assert user(server.requests[0].body) == [
        "Files: README.md\nnotes.txt\nNotes: (`cat notes.txt` was not run: the user did not allow it)\nNow summarize."
    ]
