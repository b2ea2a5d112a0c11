"""What the first run and `/model` offer: `[models]` entries, local servers' models, provider keys' known models."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

import pytest

from code_puppy.config import ModelEndpoint, Settings
from code_puppy.model_choices import (
    LOCAL_SERVERS,
    ModelChoice,
    default_model_written,
    describe,
    find_choices,
    local_choices,
    local_ports,
    provider_choices,
)
from tests.fake_llm import FakeLLMServer


def test_a_model_written_in_either_config_counts_and_an_unreadable_one_too(code_puppy_home: Path, repo: Path) -> None:
    assert not default_model_written(repo)
    (repo / ".code-puppy" / "config.toml").write_text('model = "fast"\n')
    assert default_model_written(repo)
    (repo / ".code-puppy" / "config.toml").write_text("[sessions]\nmodel = 1\n")  # a table's key is not the default
    assert not default_model_written(repo)
    (code_puppy_home / "config.toml").write_text('model = "fast"\n')
    assert default_model_written(repo)
    (code_puppy_home / "config.toml").write_text("model = \n")  # the chat's start-up names the error
    assert default_model_written(repo)


def test_the_probed_ports_are_the_usual_ones_unless_the_variable_says() -> None:
    assert (
        local_ports({})
        == list(LOCAL_SERVERS)
        == [(11434, "Ollama"), (8000, "vLLM"), (8080, "llama.cpp"), (1234, "LM Studio")]
    )
    assert local_ports({"CODE_PUPPY_LOCAL_PORTS": "8000, 9999,x"}) == [(8000, "vLLM"), (9999, "local server")]
    assert local_ports({"CODE_PUPPY_LOCAL_PORTS": ""}) == []


def test_a_local_servers_models_come_with_the_entry_that_reaches_them() -> None:
    with FakeLLMServer() as fake:
        fake.models = ["qwen2.5-coder:7b", "fake-model"]
        port = fake.server_port
        settings = Settings(models={"fake-model": ModelEndpoint(name="other", base_url="http://elsewhere/v1")})
        choices = local_choices(settings, [(port, "vLLM")])
    base_url = f"http://127.0.0.1:{port}/v1"
    free = {"input_price": 0, "output_price": 0}
    assert choices == [
        ModelChoice(
            "qwen2.5-coder-7b",
            f"vLLM at 127.0.0.1:{port}",
            (0.0, 0.0),
            None,
            ModelEndpoint(name="qwen2.5-coder:7b", base_url=base_url, **free),
        ),
        # The name is taken by another entry: the server's name goes in front.
        ModelChoice(
            "vllm-fake-model",
            f"vLLM at 127.0.0.1:{port}",
            (0.0, 0.0),
            None,
            ModelEndpoint(name="fake-model", base_url=base_url, **free),
        ),
    ]


def test_a_model_a_configured_entry_already_reaches_is_listed_once(code_puppy_home: Path) -> None:
    with FakeLLMServer() as fake:
        entry = ModelEndpoint(name="fake-model", base_url=fake.base_url)
        settings = Settings(models={"local": entry})
        choices = find_choices(settings, {"CODE_PUPPY_LOCAL_PORTS": str(fake.server_port)})
    assert choices == [ModelChoice("local", "[models]")]
    assert list(describe(choices[0])) == ["local", "unpriced", "? ctx", "[models]"]


def test_a_silent_or_closed_port_lists_nothing() -> None:
    with socket.socket() as silent, socket.socket() as closed:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # accepts, never answers: the probe gives up after PROBE_SECONDS
        closed.bind(("127.0.0.1", 0))  # bound, not listening: refused
        ports = [(silent.getsockname()[1], "vLLM"), (closed.getsockname()[1], "Ollama")]
        assert local_choices(Settings(), ports) == []


def test_each_key_offers_its_providers_newest_chat_models_once() -> None:
    choices = provider_choices(
        {"GEMINI_API_KEY": "x", "GOOGLE_API_KEY": "y", "OPENAI_API_KEY": "z", "GROQ_API_KEY": ""}
    )
    assert [(choice.name.partition(":")[0], choice.source) for choice in choices] == [
        ("openai", "OPENAI_API_KEY"),
    ] * 4 + [("google", "GEMINI_API_KEY")] * 4
    assert all(choice.price is not None and choice.endpoint is None for choice in choices)
    assert not any("image" in choice.name for choice in choices)


def test_a_price_and_a_context_window_read_as_a_user_reads_them() -> None:
    assert list(describe(ModelChoice("a", "[models]", (3.0, 15.0), 200_000))) == [
        "a",
        "$3.00/$15.00 per M",
        "200k ctx",
        "[models]",
    ]
    assert list(describe(ModelChoice("b", "X", (0.075, 0.3), 1_048_576))) == ["b", "$0.075/$0.30 per M", "1M ctx", "X"]
    assert list(describe(ModelChoice("c", "Y", (0.0, 0.0), 2_000_000))) == ["c", "free", "2M ctx", "Y"]


def test_a_provider_whose_sdk_is_not_installed_is_not_offered() -> None:
    """Choosing it would leave a config.toml every start refuses ("needs an extra package")."""
    assert importlib.util.find_spec("mistralai") is None  # pydantic-ai-slim[mistral] is no dependency of ours
    assert provider_choices({"MISTRAL_API_KEY": "x"}) == []


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"CODE_PUPPY_LOCAL_PORTS": ""},
        {"GROQ_API_KEY": "x", "MISTRAL_API_KEY": "x", "CODE_PUPPY_LOCAL_PORTS": "9,10"},
    ],
)
def test_the_nothing_found_message_fits_an_80_column_terminal(environ: dict[str, str]) -> None:
    from code_puppy.chat.model_choice import nothing_found

    lines = nothing_found(environ).splitlines()
    assert "CODE_PUPPY_LOCAL_PORTS=PORT" in "\n".join(lines)  # a server on a port of its own: how to name it
    assert [line for line in lines if len(line) >= 80] == []
