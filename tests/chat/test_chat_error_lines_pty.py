"""Failed chat commands in the user's words, in a real pseudo-terminal: no exception class names on the screen."""

from __future__ import annotations

from pathlib import Path

from tests.fake_llm import FakeLLMServer, error
from tests.pty_chat import PtyChat


def test_a_bad_model_or_session_name_is_one_line_without_a_class_name(server: FakeLLMServer, project: Path) -> None:
    chat = PtyChat(project)
    try:
        chat.wait_for("session ")
        chat.type("/model nosuchmodel\r")
        chat.wait_for("unknown model 'nosuchmodel'")
        chat.type("/resume zzz\r")
        screen = chat.wait_for(lambda text: text.count("✗") == 2)
        chat.type("/exit\r")
        assert chat.wait_exit() == 0
    finally:
        chat.close()
    assert [line.rstrip() for line in screen.splitlines() if line.startswith("✗")] == [
        "✗ unknown model 'nosuchmodel': use PROVIDER:MODEL (e.g. openai:gpt-5.1) or a name from [models] (fake)",
        "✗ no session matches 'zzz' (code-puppy sessions list --all shows them)",
    ]


def test_debug_shows_a_failed_turns_traceback_above_its_line(server: FakeLLMServer, project: Path) -> None:
    server.script(error(401, "bad key"))
    chat = PtyChat(project, "--debug")
    try:
        chat.wait_for("session ")
        chat.type("hi\r")
        screen = chat.wait_for("✗ run failed: ")
    finally:
        chat.close()
    # The top of the traceback has scrolled off the 50 rows; its frames and last line stand above the turn's line.
    frame = screen.index('  File "')
    assert (
        frame
        < screen.index("code_puppy.run.provider_retries.ProviderFailed: http")
        < screen.index("✗ run failed: http")
    )


def test_a_provider_error_is_the_same_words_in_the_chat(server: FakeLLMServer, project: Path) -> None:
    server.script(error(404, body={"error": "model 'fake-model' not found, try pulling it first"}))
    chat = PtyChat(project, columns=300)
    try:
        chat.wait_for("session ")
        chat.type("hi\r")
        screen = chat.wait_for("✗ run failed: ")
    finally:
        chat.close()
    assert [line for line in screen.splitlines() if line.startswith("✗")] == [
        f"✗ run failed: the server at {server.base_url} does not know the model 'fake-model' (404: model 'fake-model' "
        "not found, try pulling it first); check the model name (for Ollama: ollama pull fake-model), and the base "
        "URL if it may be wrong"
    ]
