"""The session picker in a real pseudo-terminal: `code-puppy -r` with no id, and `/resume` with none."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, text
from tests.pty_chat import PtyChat


def headless(*args: str, cwd: Path) -> str:
    completed = run_cli(*args, "--output-format", "json", cwd=cwd)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)["session_id"]


def sent_texts(server: FakeLLMServer, index: int) -> list[str]:
    return [m["content"] for m in server.requests[index].body["messages"] if m["role"] in ("user", "assistant")]


def three_sessions(server: FakeLLMServer, project: Path) -> tuple[str, str, str]:
    server.script(text("Parser answer."), text("Cache answer."), text("Parser follow-up answer."), text("Logs answer."))
    parser = headless("-p", "fix the parser", "--name", "parser work", cwd=project)
    cache = headless("-p", "speed up the cache", cwd=project)
    headless("-r", parser, "-p", "also the tokenizer", cwd=project)
    logs = headless("-p", "rotate the logs", cwd=project)
    return parser, cache, logs


def test_the_picker_filters_by_title_and_content_and_enter_resumes(server: FakeLLMServer, project: Path) -> None:
    parser, cache, logs = three_sessions(server, project)
    chat = PtyChat(project, "-r")
    try:
        screen = chat.wait_for("Resume a session")
        rows = [line for line in screen.splitlines() if line[2:10] in (parser[:8], cache[:8], logs[:8])]
        assert [row[2:10] for row in rows] == [logs[:8], parser[:8], cache[:8]]  # newest first
        assert rows[0].startswith("› ")
        # The preview: the last exchange of the session under the cursor. Both lines are drawn by one render, but the
        # terminal can deliver that render in pieces: wait for each.
        chat.wait_for("› rotate the logs")
        chat.wait_for("Logs answer.")
        chat.type("cache")  # by title
        chat.wait_for(lambda s: logs[:8] not in s and parser[:8] not in s and f"› {cache[:8]}" in s)
        chat.type("\x7f" * 5 + "tokeniz")  # by content: a word of a later turn, as a prefix
        chat.wait_for(lambda s: cache[:8] not in s and f"› {parser[:8]}" in s)
        chat.wait_for("› also the tokenizer")
        chat.type("\r")
        chat.wait_for(f"resumed session {parser[:8]}")
        server.script(text("Resumed answer."))
        chat.type("and the lexer\r")
        chat.wait_turn("Resumed answer.")
        assert sent_texts(server, 4)[-3:] == ["also the tokenizer", "Parser follow-up answer.", "and the lexer"]

        chat.type("/resume\r")  # the same picker inside the chat
        chat.wait_for("Resume a session")
        chat.type("\x1b[B")  # down: the second newest
        chat.wait_for(lambda s: f"› {logs[:8]}" in s)
        chat.type("\r")
        chat.wait_for(f"resumed session {logs[:8]}")
        chat.type("/exit\r")
        assert chat.wait_exit() == 0
    finally:
        chat.close()


def test_escape_leaves_the_picker_and_an_empty_project_is_an_error(server: FakeLLMServer, project: Path) -> None:
    empty = PtyChat(project, "-r")
    try:
        assert empty.wait_exit() == 2
        unwrapped = empty.text.replace("\n", "")
        assert unwrapped.startswith(f"code-puppy: error: no session to resume in {project.resolve()}")
    finally:
        empty.close()
    server.script(text("Answer."))
    headless("-p", "a session", cwd=project)
    chat = PtyChat(project, "-r")
    try:
        chat.wait_for("Resume a session")
        chat.type("\x1b")
        assert chat.wait_exit() == 0
    finally:
        chat.close()
    assert len(server.requests) == 1
