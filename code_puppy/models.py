"""Model choice: a pydantic-ai model string or a `[models.NAME]` endpoint, to a pydantic-ai `Model`."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from code_puppy.config import ConfigError, ModelEndpoint, Settings
from code_puppy.config.settings import CacheRetention

if TYPE_CHECKING:
    from pydantic_ai.models import Model
    from pydantic_ai.usage import RequestUsage

KNOWN_PROVIDERS: tuple[str, ...] = (
    "anthropic",
    "openai",
    "openai-chat",
    "openai-responses",
    "google",
    "google-cloud",
    "ollama",
    "openrouter",
    "deepseek",
    "groq",
    "mistral",
    "cohere",
    "bedrock",
    "azure",
    "fireworks",
    "together",
    "vllm",
    "litellm",
    "cerebras",
    "huggingface",
    "moonshotai",
    "nebius",
    "github",
    "heroku",
    "vercel",
    "xai",
)
"""Providers shown when a model string names an unknown one (pydantic-ai knows a few more)."""

_ALIASES = {"google-gla": "google", "google-vertex": "google-cloud"}
"""Provider names from older pydantic-ai releases that users still write."""

_PRICE = "code_puppy_price"
"""The attribute a model made from a priced `[models.NAME]` entry carries its price in (`entry_price`)."""
_PROMPT_CACHE = "code_puppy_prompt_cache"
"""The attribute a model made from a `[models.NAME]` entry with `prompt_cache` carries it in (`entry_prompt_cache`)."""

PLACEHOLDER_API_KEY = "not-needed"
"""Sent to named endpoints without `api_key_env`; local servers ignore the key."""


def choose_model_name(settings: Settings, flag: str | None) -> str:
    """The model the user chose: `-m`, then `CODE_PUPPY_MODEL`, then the config's `model` (`model_alias`)."""
    name = flag or os.environ.get("CODE_PUPPY_MODEL") or settings.model
    if not name:
        raise ConfigError(
            "no model chosen: pass -m MODEL (e.g. -m anthropic:claude-sonnet-5-5), "
            'set CODE_PUPPY_MODEL, or set model = "..." in config.toml (the chat offers the models it finds)'
        )
    return model_alias(settings, name)


def resolve_model(settings: Settings, name: str) -> Model:
    """Build the pydantic-ai model for `name`, turning provider set-up errors into `ConfigError`."""
    if endpoint := settings.models.get(name):
        return _endpoint_model(name, endpoint)
    provider, sep, model_name = name.partition(":")
    if not sep or not model_name:
        known = ", ".join(sorted(settings.models)) or "none configured"
        raise ConfigError(
            f"unknown model '{name}': use PROVIDER:MODEL (e.g. openai:gpt-5.1) or a name from [models] ({known})"
        )
    provider = _ALIASES.get(provider, provider)
    from pydantic_ai.exceptions import UserError
    from pydantic_ai.models import infer_model
    from pydantic_ai.providers import infer_provider_class

    try:
        infer_provider_class(provider)
    except ValueError:
        raise ConfigError(f"unknown provider '{provider}' in '{name}'; known: {', '.join(KNOWN_PROVIDERS)}") from None
    except ImportError:
        raise ConfigError(_missing_extra(provider)) from None
    try:
        return infer_model(f"{provider}:{model_name}")
    except UserError as exc:
        raise ConfigError(_credential_message(str(exc), name)) from None
    except ImportError:
        raise ConfigError(_missing_extra(provider)) from None
    except Exception as exc:  # a provider SDK's own set-up error, e.g. google-auth finding no credentials
        first_line = (str(exc).strip().splitlines() or [""])[0]
        raise ConfigError(f"model '{name}' could not be set up: {type(exc).__name__}: {first_line}") from None


CLAUDE_MODEL_ALIASES = {
    "sonnet": "anthropic:claude-sonnet-5-5",
    "opus": "anthropic:claude-opus-5-5",
    "haiku": "anthropic:claude-haiku-5-5",
}
"""Claude Code's model aliases (`-m sonnet`, `model:` in agent and command files), as Anthropic's current models."""


def model_alias(settings: Settings, name: str) -> str:
    """`name` as `-m` and `/model` take it: `sonnet`, `opus` and `haiku` are Claude's current models unless
    `[models]` has an entry of that name."""
    return name if name in settings.models else CLAUDE_MODEL_ALIASES.get(name, name)


def definition_model_name(settings: Settings, written: str | None, current: str) -> str:
    """The model a file-defined agent or command runs on, named as `-m` names one.

    Unset or `inherit`: the current model. `sonnet`, `opus`, `haiku` and a Claude model id (`claude-opus-4-1`): a
    `[models]` entry of that name when there is one, else that Claude model when the current model is Anthropic's,
    else the current model (a Claude Code file then still works on the model the user chose). Anything else is
    resolved like `-m`.
    """
    if written is None or written == "inherit":
        return current
    claude = written in CLAUDE_MODEL_ALIASES or (written.startswith("claude-") and ":" not in written)
    if written in settings.models or not claude:
        return written
    endpoint = settings.models.get(current)
    anthropic = current.startswith("anthropic:") or (endpoint is not None and endpoint.provider == "anthropic")
    if not anthropic:
        return current
    return CLAUDE_MODEL_ALIASES.get(written, f"anthropic:{written}")


def model_name_problem(settings: Settings, name: str) -> str | None:
    """Why `name` names no model (no `[models]` entry and no known `PROVIDER:MODEL`), or None when it names one;
    checked offline, without credentials (`agents list`)."""
    if name in settings.models:
        return None
    provider, sep, model_name = name.partition(":")
    if not sep or not model_name:
        return f"unknown model '{name}'"
    from pydantic_ai.providers import infer_provider_class

    try:
        infer_provider_class(_ALIASES.get(provider, provider))
    except ValueError:
        return f"unknown provider '{provider}' in '{name}'"
    except ImportError:
        return None  # a provider whose extra is missing: a run says which one
    return None


def model_resolver(settings: Settings) -> Callable[[str], Model]:
    """`resolve_model` for these settings, each name made once (history processors name their summary models)."""
    made: dict[str, Model] = {}

    def resolve(name: str) -> Model:
        if name not in made:
            made[name] = resolve_model(settings, name)
        return made[name]

    return resolve


class Price(NamedTuple):
    """A `[models.NAME]` entry's price, in US dollars per million tokens."""

    input: float
    output: float
    cache_read: float | None = None
    """Input tokens read from the prompt cache; None: `input`."""
    cache_write: float | None = None
    """Input tokens written to the prompt cache; None: `input`."""

    def of(self, usage: RequestUsage) -> float:
        """What a request that used `usage` costs (its `input_tokens` count the cached ones too)."""
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        uncached = usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens
        dollars = uncached * self.input + usage.cache_read_tokens * read + usage.cache_write_tokens * write
        return (dollars + usage.output_tokens * self.output) / 1_000_000


def with_price(model: Model, price: tuple[float, float] | Price) -> Model:
    """`model`, its requests priced at `price` (US dollars per million input and output tokens, and cached ones)
    whatever its name: what a `[models.NAME]` entry's prices do for the requests made through it, and only those (a
    provider string naming a model of the same name is priced from the price table)."""
    setattr(model, _PRICE, price if isinstance(price, Price) else Price(*price))
    return model


def entry_price(model: Model) -> Price | None:
    """The price `with_price` gave `model` (a wrapper model answers for the model it wraps), or None."""
    price: Price | None = getattr(model, _PRICE, None)
    return price


def entry_prompt_cache(model: Model) -> bool | CacheRetention | None:
    """The `prompt_cache` of the `[models.NAME]` entry `model` was made from, or None (`[run] prompt_cache` applies)."""
    setting: bool | CacheRetention | None = getattr(model, _PROMPT_CACHE, None)
    return setting


def _endpoint_model(name: str, endpoint: ModelEndpoint) -> Model:
    model = _endpoint_client_model(name, endpoint)
    if endpoint.input_price is not None and endpoint.output_price is not None:
        cached = (endpoint.cache_read_price, endpoint.cache_write_price)
        with_price(model, Price(endpoint.input_price, endpoint.output_price, *cached))
    if endpoint.prompt_cache is not None:
        setattr(model, _PROMPT_CACHE, endpoint.prompt_cache)
    return model


def _endpoint_client_model(name: str, endpoint: ModelEndpoint) -> Model:
    from pydantic_ai.profiles import ModelProfile

    api_key = PLACEHOLDER_API_KEY
    if endpoint.api_key_env:
        api_key = os.environ.get(endpoint.api_key_env, "")
        if not api_key:
            raise ConfigError(f"model '{name}' needs an API key: set {endpoint.api_key_env}")
    profile = ModelProfile(context_window=endpoint.context_window) if endpoint.context_window else None
    if endpoint.provider == "anthropic":
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        return AnthropicModel(
            endpoint.name, provider=AnthropicProvider(api_key=api_key, base_url=endpoint.base_url), profile=profile
        )
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=endpoint.base_url, api_key=api_key)
    model_class = OpenAIChatModel if endpoint.provider == "openai-chat" else OpenAIResponsesModel
    return model_class(endpoint.name, provider=provider, profile=profile)


def _credential_message(error: str, name: str) -> str:
    """pydantic-ai says "Set the `X` environment variable or pass it via ..."; keep the variable, drop the rest."""
    if "`" in error and "environment variable" in error:
        variable = error.split("`")[1]
        return f"model '{name}' needs credentials: set {variable}"
    return f"model '{name}': {error.split('. ')[0]}"


def _missing_extra(provider: str) -> str:
    return f"provider '{provider}' needs an extra package: pip install 'pydantic-ai-slim[{provider}]'"
