"""`/undo` and `/rewind` in the real chat, in a pseudo-terminal, against the fake server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.pty_chat import PtyChat


@pytest.fixture
def chat(server: FakeLLMServer, project: Path) -> Iterator[PtyChat]:
    (project / "app.py").write_text("version = 1\n")
    terminal = PtyChat(project, "--permission-mode", "yolo")
    terminal.wait_for("session ")
    yield terminal
    terminal.close()


def shows(text: str) -> Callable[[str], bool]:
    """A `wait_for` check: the screen shows `text`, wherever a long line wrapped (spaces ignored)."""
    return lambda screen: "".join(text.split()) in "".join(screen.split())


def user_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def changing_turn(server: FakeLLMServer) -> None:
    server.script(
        tool_calls(call("write_file", {"path": "new.py", "content": "x = 1\n"})),
        tool_calls(call("shell", {"command": "sed -i s/1/2/ app.py"})),
        text("Changed them."),
    )


def test_undo_puts_the_files_back_and_tells_the_model_next_time(
    server: FakeLLMServer, chat: PtyChat, project: Path
) -> None:
    changing_turn(server)
    chat.type("change things\r")
    chat.wait_turn("Changed them.")
    assert (project / "new.py").exists() and (project / "app.py").read_text() == "version = 2\n"

    chat.type("/undo\r")

    chat.wait_for(shows("changed back 2 files: app.py, new.py (deleted)"))
    assert "undid the turn “change things”" in chat.text
    assert not (project / "new.py").exists() and (project / "app.py").read_text() == "version = 1\n"
    server.script(text("Noted."))
    chat.type("what now?\r")
    chat.wait_turn("Noted.")
    sent = user_messages(server.requests[-1].body)
    assert sent[0] == "change things"
    typed, note = sent[-1]
    assert typed == {"type": "text", "text": "what now?"}
    assert note["text"].startswith("<note>The user undid the file changes of the turn “change things”: 2 files:")
    assert note["text"].endswith("</note>")


def test_a_rewind_after_an_undo_drops_the_undos_note(server: FakeLLMServer, chat: PtyChat, project: Path) -> None:
    server.script(text("Hello."))
    chat.type("first question\r")
    chat.wait_turn("Hello.")
    changing_turn(server)
    chat.type("change things\r")
    chat.wait_turn("Changed them.")
    chat.type("/undo\r")
    chat.wait_for(shows("changed back 2 files: app.py, new.py (deleted)"))

    chat.type("/rewind 1\r")  # the undone turn leaves the conversation: a note naming it would contradict it
    chat.wait_for("the old branch is kept")
    server.script(text("Fresh."))
    chat.type("\x15something else\r")
    chat.wait_turn("Fresh.")
    assert user_messages(server.requests[-1].body) == ["first question", "something else"]


def test_undo_asks_before_overwriting_the_users_edit(server: FakeLLMServer, chat: PtyChat, project: Path) -> None:
    changing_turn(server)
    chat.type("change things\r")
    chat.wait_turn("Changed them.")
    (project / "app.py").write_text("version = 2  # mine\n")

    chat.type("/undo\r")
    chat.wait_for("You changed app.py since the agent did.")
    chat.type("n")
    chat.wait_for("nothing was changed")
    assert (project / "app.py").read_text() == "version = 2  # mine\n" and (project / "new.py").exists()

    chat.type("/undo\r")
    chat.wait_for("Overwrite them?")
    chat.type("y")
    chat.wait_for(shows("your edits to app.py are kept as a checkpoint"))
    assert (project / "app.py").read_text() == "version = 1\n" and not (project / "new.py").exists()
    chat.type("/undo\r")  # undoes the forced undo: the user's version comes back
    chat.wait_for("undid the last rewind")
    assert (project / "app.py").read_text() == "version = 2  # mine\n"


def test_rewind_lists_turns_and_goes_back_to_before_one(server: FakeLLMServer, chat: PtyChat, project: Path) -> None:
    server.script(text("Hello."))
    chat.type("first question\r")
    chat.wait_turn("Hello.")
    changing_turn(server)
    chat.type("change things\r")
    chat.wait_turn("Changed them.")

    chat.type("/rewind\r")
    listing = chat.wait_for("/rewind N [both|code|conversation]")
    rows = [line for line in listing.splitlines() if "“" in line]
    assert rows[-2].split()[0] == "1" and rows[-2].endswith("“change things”  2 files: app.py, new.py")
    assert rows[-1].split()[0] == "2" and rows[-1].endswith("“first question”  no files")

    chat.type("/rewind 1\r")

    chat.wait_for("the old branch is kept")
    assert not (project / "new.py").exists() and (project / "app.py").read_text() == "version = 1\n"
    chat.wait_for(lambda _: chat.prompt_line() == "› change things")  # the turn's prompt is back in the input line
    server.script(text("Again."))
    chat.type("\r")
    chat.wait_turn("Again.")
    assert user_messages(server.requests[-1].body) == ["first question", "change things"]


def test_rewind_of_the_conversation_only_keeps_the_files(server: FakeLLMServer, chat: PtyChat, project: Path) -> None:
    changing_turn(server)
    chat.type("change things\r")
    chat.wait_turn("Changed them.")

    chat.type("/rewind 1 conversation\r")

    chat.wait_for("the old branch is kept")
    assert (project / "new.py").exists() and (project / "app.py").read_text() == "version = 2\n"
    chat.wait_for(lambda _: chat.prompt_line() == "› change things")
    chat.type("\x15/rewind 1 sideways\r")  # Ctrl-U clears the prompt put back
    chat.wait_for("usage: /rewind N [both|code|conversation]")
