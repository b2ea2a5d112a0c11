"""Model choice and provider set-up errors: exit 2 with the variable to set, never a traceback."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers import infer_provider_class

from code_puppy.config import ConfigError, ModelEndpoint, Settings
from code_puppy.models import KNOWN_PROVIDERS, choose_model_name, resolve_model
from tests.conftest import run_cli


def test_flag_beats_environment_beats_config(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(model="anthropic:from-config")
    assert choose_model_name(settings, None) == "anthropic:from-config"
    monkeypatch.setenv("CODE_PUPPY_MODEL", "openai:from-env")
    assert choose_model_name(settings, None) == "openai:from-env"
    assert choose_model_name(settings, "openai:from-flag") == "openai:from-flag"


def test_no_model_says_how_to_choose_one() -> None:
    with pytest.raises(ConfigError, match=r"no model chosen: pass -m MODEL .* set CODE_PUPPY_MODEL, or set model ="):
        choose_model_name(Settings(), None)


def test_named_endpoint_is_an_openai_chat_model_on_its_base_url() -> None:
    endpoint = ModelEndpoint(name="qwen3-coder", base_url="http://127.0.0.1:11434/v1", context_window=131072)
    model = resolve_model(Settings(models={"local": endpoint}), "local")
    assert isinstance(model, OpenAIChatModel)
    assert (model.model_name, model.base_url) == ("qwen3-coder", "http://127.0.0.1:11434/v1/")
    assert model.profile.get("context_window") == 131072


def test_named_endpoint_with_missing_key_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = ModelEndpoint(name="m", base_url="http://127.0.0.1:1/v1", api_key_env="LOCAL_API_KEY")
    settings = Settings(models={"local": endpoint})
    with pytest.raises(ConfigError, match=r"^model 'local' needs an API key: set LOCAL_API_KEY$"):
        resolve_model(settings, "local")
    monkeypatch.setenv("LOCAL_API_KEY", "sk-local")
    assert isinstance(resolve_model(settings, "local"), OpenAIChatModel)


@pytest.mark.parametrize(
    ("name", "variable"),
    [
        ("openai:gpt-5.1", "OPENAI_API_KEY"),
        ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        ("ollama:q", "OLLAMA_BASE_URL"),
    ],
)
def test_missing_credentials_name_the_variable(name: str, variable: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_model(Settings(), name)
    assert str(caught.value) == f"model '{name}' needs credentials: set {variable}"


def test_model_strings_build_the_right_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert isinstance(resolve_model(Settings(), "openai:gpt-5.1"), OpenAIResponsesModel)
    assert isinstance(resolve_model(Settings(), "openai-chat:gpt-4o"), OpenAIChatModel)
    assert isinstance(resolve_model(Settings(), "anthropic:claude-sonnet-4-5"), AnthropicModel)


def test_unknown_provider_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_model(Settings(), "foo:bar")
    assert str(caught.value) == f"unknown provider 'foo' in 'foo:bar'; known: {', '.join(KNOWN_PROVIDERS)}"


def test_a_bare_name_that_is_not_configured() -> None:
    with pytest.raises(ConfigError, match=r"^unknown model 'gpt-4o': use PROVIDER:MODEL .* \(none configured\)$"):
        resolve_model(Settings(), "gpt-4o")


@pytest.mark.parametrize("provider", KNOWN_PROVIDERS)
def test_every_listed_provider_is_known_to_pydantic_ai(provider: str) -> None:
    with contextlib.suppress(ImportError):  # known, but its SDK is an optional extra
        assert infer_provider_class(provider) is not None


def test_provider_without_its_sdk_says_which_extra() -> None:
    with pytest.raises(
        ConfigError, match=r"^provider 'groq' needs an extra package: pip install 'pydantic-ai-slim\[groq\]'$"
    ):
        resolve_model(Settings(), "groq:llama")


@pytest.mark.parametrize(
    ("args", "env", "stderr"),
    [
        ((), {}, "no model chosen: pass -m MODEL"),
        (("-m", "foo:bar"), {}, "unknown provider 'foo' in 'foo:bar'; known: anthropic, openai"),
        (
            ("-m", "anthropic:claude-sonnet-4-5"),
            {},
            "model 'anthropic:claude-sonnet-4-5' needs credentials: set ANTHROPIC_API_KEY",
        ),
        ((), {"CODE_PUPPY_MODEL": "openai:gpt-5.1"}, "model 'openai:gpt-5.1' needs credentials: set OPENAI_API_KEY"),
    ],
)
def test_cli_model_errors_are_one_line_exit_2(
    args: tuple[str, ...], env: dict[str, str], stderr: str, project: Path
) -> None:
    completed = run_cli("-p", "hello", *args, env=env, cwd=project)
    assert completed.returncode == 2
    assert completed.stderr.startswith(f"code-puppy: error: {stderr}")
    assert completed.stderr.count("\n") == 1 and "Traceback" not in completed.stderr
