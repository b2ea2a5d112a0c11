"""The first run with no model set, in a real pseudo-terminal: the models found (a local server on a usual port,
provider keys in the environment) offered in a list, the choice saved in the user's config.toml and answering at once;
nothing found is a few lines and exit 2. And `/model` with no name, the same list inside the chat."""

from __future__ import annotations

import errno
import socket
import stat
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_llm import FakeLLMServer, text
from tests.pty_chat import IDLE_KEYS, PtyChat

USUAL_PORT = 1234
"""LM Studio's port: the one port a test binds (the others point the probe at their own servers'
`CODE_PUPPY_LOCAL_PORTS`, so tests running in parallel never collide)."""


@pytest.fixture
def chat_cleanup() -> Iterator[list[PtyChat]]:
    chats: list[PtyChat] = []
    yield chats
    for chat in chats:
        chat.close()


def free_port() -> int:
    """A port nothing listens on (bound, then let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def lines_from(screen: str, first: str) -> list[str]:
    """The screen's lines from the one starting with `first`, trailing blank lines left out."""
    lines = screen.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    return "\n".join(lines[start:]).rstrip().splitlines()


def test_a_local_server_on_a_usual_port_is_offered_saved_and_answers(
    code_puppy_home: Path, project: Path, chat_cleanup: list[PtyChat]
) -> None:
    try:
        fake = FakeLLMServer(text("Hello from the local model."), port=USUAL_PORT)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        pytest.fail(f"127.0.0.1:{USUAL_PORT} (LM Studio's port) is taken; stop what listens there to run this test")
    with fake:
        fake.models = ["qwen2.5-coder:7b"]
        chat = PtyChat(project)
        chat_cleanup.append(chat)
        screen = chat.wait_for("Esc quits")
        config = code_puppy_home / "config.toml"
        row = next(line for line in screen.splitlines() if "qwen2.5-coder-7b" in line)
        # Other servers of this machine on the usual ports may be listed too: ours is picked by its number.
        assert row.removeprefix("›").split()[1:] == [
            "qwen2.5-coder-7b",
            "free",
            "?",
            "ctx",
            "LM",
            "Studio",
            "at",
            f"127.0.0.1:{USUAL_PORT}",
        ]
        number = row.removeprefix("›").split()[0]
        chat.type(number + "\r")
        chat.wait_for("lists the models found and switches.")
        assert lines_from(chat.text, "model: ")[:4] == [
            f"model: qwen2.5-coder-7b, saved in {config}:",
            '  model = "qwen2.5-coder-7b"   (and [models.qwen2.5-coder-7b] for its server)',
            "Change that line to change the default. -m NAME picks a model for one run (a [models] name or",
            "PROVIDER:MODEL); /model in the chat lists the models found and switches.",
        ]
        chat.type("say hello\r")
        chat.wait_turn("Hello from the local model.")
        assert fake.requests[-1].body["model"] == "qwen2.5-coder:7b"
    assert config.read_text() == (
        'model = "qwen2.5-coder-7b"\n'
        "\n"
        '[models."qwen2.5-coder-7b"]\n'
        'name = "qwen2.5-coder:7b"\n'
        f'base_url = "http://127.0.0.1:{USUAL_PORT}/v1"\n'
        "input_price = 0\n"
        "output_price = 0\n"
    )
    assert stat.S_IMODE(config.stat().st_mode) == 0o600


def test_a_provider_key_offers_its_models_and_the_choice_answers(
    code_puppy_home: Path, project: Path, chat_cleanup: list[PtyChat]
) -> None:
    config = code_puppy_home / "config.toml"
    config.write_text("# my settings\n[sessions]\nauto_title = false  # no title requests\n")
    with FakeLLMServer(text("Hello from Sonnet.")) as fake:
        env = {"ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": fake.anthropic_base_url}
        chat = PtyChat(project, env={**env, "CODE_PUPPY_LOCAL_PORTS": ""})
        chat_cleanup.append(chat)
        screen = chat.wait_for("Esc quits")
        assert lines_from(screen, "No model") == [
            "No model is set yet. Models found: 4 from ANTHROPIC_API_KEY.",
            "Choose a model",
            "›  1  anthropic:claude-opus-5-5    $4.00/$20.00 per M  1M ctx  ANTHROPIC_API_KEY",
            "   2  anthropic:claude-sonnet-5-5  $2.00/$10.00 per M  1M ctx  ANTHROPIC_API_KEY",
            "   3  anthropic:claude-haiku-5-5   $0.50/$0.50 per M   1M ctx  ANTHROPIC_API_KEY",
            "   4  anthropic:claude-fable-5-2   $8.00/$40.00 per M  1M ctx  ANTHROPIC_API_KEY",
            f"Esc quits · ↑↓ or 1-9 · Enter uses it and saves it in {config}",
        ]
        chat.type("\x1b[B")  # down, to Sonnet
        chat.wait_for("›  2  anthropic:claude-sonnet-5-5")
        chat.type("\r")
        chat.wait_for("lists the models found and switches.")
        chat.type("hello\r")
        chat.wait_turn("Hello from Sonnet.")
        assert fake.requests[-1].path == "/v1/messages"
        assert fake.requests[-1].body["model"] == "claude-sonnet-5-5"
        assert fake.requests[-1].headers["authorization"] == "Bearer sk-ant-test"
    # The model line goes before the first table (top-level keys must), the user's comments stay.
    assert config.read_text() == (
        '# my settings\nmodel = "anthropic:claude-sonnet-5-5"\n\n[sessions]\nauto_title = false  # no title requests\n'
    )
    assert tomllib.loads(config.read_text())["sessions"] == {"auto_title": False}


HOW_TO_SET_A_MODEL = [
    "Either:",
    "  export ANTHROPIC_API_KEY=... (or OPENAI_API_KEY, GEMINI_API_KEY, ...),",
    "  start a local server (ollama serve, vllm serve MODEL, llama-server),",
    "  or name your server's port: CODE_PUPPY_LOCAL_PORTS=PORT code-puppy,",
    "  then run code-puppy again; or pass -m MODEL (-m anthropic:claude-sonnet-5-5).",
]


def test_nothing_found_says_how_to_set_a_model_and_exits_2(
    code_puppy_home: Path, project: Path, chat_cleanup: list[PtyChat]
) -> None:
    chat = PtyChat(project, env={"CODE_PUPPY_LOCAL_PORTS": ""})
    chat_cleanup.append(chat)
    assert chat.wait_exit() == 2
    assert lines_from(chat.text, "code-puppy needs") == [
        "code-puppy needs a model and found none: no provider key in the environment,",
        "no [models] in config.toml,",
        # No port was asked (the variable is empty): the message says so rather than naming the usual ports.
        "no local server asked (CODE_PUPPY_LOCAL_PORTS is empty).",
        *HOW_TO_SET_A_MODEL,
    ]
    assert not (code_puppy_home / "config.toml").exists()


def test_nothing_found_names_keys_whose_provider_is_not_installed_and_the_ports_asked(
    code_puppy_home: Path, project: Path, chat_cleanup: list[PtyChat]
) -> None:
    """GROQ_API_KEY and CO_API_KEY set without their pydantic-ai-slim extras (not installed here): a line each."""
    ports = free_port(), free_port()
    env = {"GROQ_API_KEY": "gsk-test", "CO_API_KEY": "co-test", "CODE_PUPPY_LOCAL_PORTS": f"{ports[0]},{ports[1]}"}
    chat = PtyChat(project, env=env)
    chat_cleanup.append(chat)
    assert chat.wait_exit() == 2
    assert lines_from(chat.text, "code-puppy needs") == [
        "code-puppy needs a model and found none: no usable provider key,",
        "no [models] in config.toml,",
        f"no local server on :{ports[0]}, :{ports[1]} (from CODE_PUPPY_LOCAL_PORTS).",
        "Either:",
        "  GROQ_API_KEY is set: pip install 'pydantic-ai-slim[groq]' to use it,",
        "  CO_API_KEY is set: pip install 'pydantic-ai-slim[cohere]' to use it,",
        *HOW_TO_SET_A_MODEL[1:],
    ]
    assert not (code_puppy_home / "config.toml").exists()


def test_esc_leaves_without_writing(code_puppy_home: Path, project: Path, chat_cleanup: list[PtyChat]) -> None:
    chat = PtyChat(project, env={"OPENAI_API_KEY": "sk-test", "CODE_PUPPY_LOCAL_PORTS": ""})
    chat_cleanup.append(chat)
    chat.wait_for("Esc quits")
    chat.type("\x1b")
    assert chat.wait_exit() == 0
    assert lines_from(chat.text, "Esc quits") == [
        f"Esc quits · ↑↓ or 1-9 · Enter uses it and saves it in {code_puppy_home / 'config.toml'}",
        "No model chosen; nothing was written.",
    ]
    assert not (code_puppy_home / "config.toml").exists()


def test_ctrl_c_leaves_without_writing_and_exits_130(
    code_puppy_home: Path, project: Path, chat_cleanup: list[PtyChat]
) -> None:
    chat = PtyChat(project, env={"OPENAI_API_KEY": "sk-test", "CODE_PUPPY_LOCAL_PORTS": ""})
    chat_cleanup.append(chat)
    chat.wait_for("Esc quits")
    chat.type("\x03")
    assert chat.wait_exit() == 130
    assert lines_from(chat.text, "Esc quits")[-1] == "No model chosen; nothing was written."
    assert not (code_puppy_home / "config.toml").exists()


def test_slash_model_lists_prices_and_context_and_switches(
    server: FakeLLMServer, project: Path, chat_cleanup: list[PtyChat]
) -> None:
    """`/model` with no name: the configured model (the `server` fixture's `fake`) and the key's provider's models,
    with prices and context windows; a digit moves to a row, Enter switches, the next turn goes to that model."""
    server.script(text("Answer from Haiku."))
    env = {"ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": server.anthropic_base_url}
    chat = PtyChat(project, env={**env, "CODE_PUPPY_LOCAL_PORTS": ""})
    chat_cleanup.append(chat)
    chat.wait_for(IDLE_KEYS)
    chat.type("/model\r")
    screen = chat.wait_for("Esc keeps the current")
    assert lines_from(screen, "Switch the model") == [
        "Switch the model",
        "›  1  fake                         unpriced            ? ctx   [models]",
        "   2  anthropic:claude-opus-5-5    $4.00/$20.00 per M  1M ctx  ANTHROPIC_API_KEY",
        "   3  anthropic:claude-sonnet-5-5  $2.00/$10.00 per M  1M ctx  ANTHROPIC_API_KEY",
        "   4  anthropic:claude-haiku-5-5   $0.50/$0.50 per M   1M ctx  ANTHROPIC_API_KEY",
        "   5  anthropic:claude-fable-5-2   $8.00/$40.00 per M  1M ctx  ANTHROPIC_API_KEY",
        "↑↓ or 1-9 · Enter switches · Esc keeps the current",
    ]
    chat.type("4")
    chat.wait_for("›  4  anthropic:claude-haiku-5-5")
    chat.type("\r")
    chat.wait_for("model: anthropic:claude-haiku-5-5")
    chat.type("hello\r")
    chat.wait_turn("Answer from Haiku.")
    assert server.requests[-1].body["model"] == "claude-haiku-5-5"
    chat.type("/model\r")
    # The current model under the cursor.
    chat.wait_for(lambda s: "›  4  anthropic:claude-haiku-5-5" in s and s.count("Esc keeps the current") == 1)
    chat.type("\x1b")
    chat.wait_for("model: anthropic:claude-haiku-5-5 (unchanged)")


def test_slash_model_switches_to_a_local_servers_model_for_this_chat(
    server: FakeLLMServer, project: Path, code_puppy_home: Path, chat_cleanup: list[PtyChat]
) -> None:
    """A model a local server lists that no `[models]` entry reaches yet: usable at once, config.toml untouched."""
    server.models = ["fake-model", "other-model"]  # the first is the `fake` entry's: listed once, as `fake`
    server.script(text("Answer from the other model."))
    written = (code_puppy_home / "config.toml").read_text()
    chat = PtyChat(project, env={"CODE_PUPPY_LOCAL_PORTS": str(server.server_port)})
    chat_cleanup.append(chat)
    chat.wait_for(IDLE_KEYS)
    chat.type("/model\r")
    screen = chat.wait_for("Esc keeps the current")
    assert lines_from(screen, "Switch the model")[1:3] == [
        "›  1  fake         unpriced  ? ctx  [models]",
        f"   2  other-model  free      ? ctx  local server at 127.0.0.1:{server.server_port}",
    ]
    chat.type("2\r")
    chat.wait_for(
        "model: other-model (this chat only; to keep it, add [models.other-model] with base_url to config.toml)"
    )
    chat.type("hello\r")
    chat.wait_turn("Answer from the other model.")
    assert server.requests[-1].body["model"] == "other-model"
    assert (code_puppy_home / "config.toml").read_text() == written


def test_thirty_local_models_fit_an_80x24_terminal_and_scroll_with_the_cursor(
    code_puppy_home: Path, project: Path, chat_cleanup: list[PtyChat]
) -> None:
    """The list shows what fits below the title and above the hint, never "Window too small"; moving past the last
    row shown scrolls; Enter picks the highlighted row."""
    with FakeLLMServer() as fake:
        fake.models = [f"model-{number:02}" for number in range(1, 31)]
        port = fake.server_port
        chat = PtyChat(project, env={"CODE_PUPPY_LOCAL_PORTS": str(port)}, columns=80, rows=24)
        chat_cleanup.append(chat)
        screen = chat.wait_for("Esc quits")
        assert "Window too small" not in screen
        config = code_puppy_home / "config.toml"
        hint = f"Esc quits · ↑↓ or 1-9 · Enter uses it and saves it in {config}"
        server = f"local server at 127.0.0.1:{port}"
        rows = [f"  {number:>2}  model-{number:02}  free  ? ctx  {server}" for number in range(1, 31)]
        hint_lines = [hint[start : start + 80] for start in range(0, len(hint), 80)]
        shown = 24 - 2 - len(hint_lines)  # less the found line and the title
        top = [
            f"No model is set yet. Models found: 30 from {server}.",
            f"Choose a model  (1-{shown} of 30; PgUp/PgDn)",
            "›" + rows[0][1:],
            *rows[1:shown],
            *hint_lines,
        ]
        # The whole screen, not its first changed line: a redraw can be read half done on a loaded machine.
        chat.wait_for(lambda text: text.splitlines()[-24:] == top)
        chat.type("\x1b[B" * shown)  # down past the last row shown
        scrolled = [
            top[0],
            f"Choose a model  (2-{shown + 1} of 30; PgUp/PgDn)",
            *rows[1:shown],
            "›" + rows[shown][1:],
            *hint_lines,
        ]
        chat.wait_for(lambda text: text.splitlines()[-24:] == scrolled)
        chat.type("\x1b[6~")  # PgDn: to the last row
        chat.wait_for(lambda screen: f"({31 - shown}-30 of 30; PgUp/PgDn)" in screen and "› 30  model-30" in screen)
        chat.type("\x1b[A\r")  # up one, to model-29, and Enter
        chat.wait_for("model: model-29, saved in")
    assert config.read_text().startswith('model = "model-29"\n')


def test_a_read_only_config_is_left_alone_and_the_chat_does_not_start(
    code_puppy_home: Path, project: Path, chat_cleanup: list[PtyChat]
) -> None:
    config = code_puppy_home / "config.toml"
    config.write_text("# read-only on purpose\n")
    config.chmod(0o444)
    chat = PtyChat(project, env={"OPENAI_API_KEY": "sk-test", "CODE_PUPPY_LOCAL_PORTS": ""})
    chat_cleanup.append(chat)
    screen = chat.wait_for("Esc quits")
    name = next(line for line in screen.splitlines() if line.startswith("›")).split()[2]
    chat.type("\r")
    assert chat.wait_exit() == 2
    # The one line, wrapped at the terminal's 120 columns.
    assert "".join(lines_from(chat.text, "Esc quits")[1:]) == (
        f'code-puppy: error: {config} is read-only; add model = "{name}" yourself'
    )
    assert config.read_text() == "# read-only on purpose\n"
