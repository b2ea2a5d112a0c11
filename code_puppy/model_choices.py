"""The models a user can choose without a network call beyond this machine: the `[models]` entries, the models of a
local OpenAI-compatible server answering on a usual port, and the known models of each provider whose key is in the
environment; each with its price and context window where known (the first run's choice and `/model`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from code_puppy.paths import config_dir
from code_puppy.trust import PROJECT_CONFIG

if TYPE_CHECKING:  # the chat asks `default_model_written` before its prompt shows, without pydantic
    from code_puppy.config import ModelEndpoint, Settings

PROVIDER_KEYS: tuple[tuple[str, str, str], ...] = (
    ("ANTHROPIC_API_KEY", "anthropic", "anthropic"),
    ("OPENAI_API_KEY", "openai", "openai"),
    ("GEMINI_API_KEY", "google", "google"),
    ("GOOGLE_API_KEY", "google", "google"),
    ("MISTRAL_API_KEY", "mistral", "mistral"),
    ("GROQ_API_KEY", "groq", "groq"),
    ("DEEPSEEK_API_KEY", "deepseek", "deepseek"),
    ("XAI_API_KEY", "xai", "x-ai"),
    ("CEREBRAS_API_KEY", "cerebras", "cerebras"),
    ("MOONSHOTAI_API_KEY", "moonshotai", "moonshotai"),
    ("CO_API_KEY", "cohere", "cohere"),
    ("OPENROUTER_API_KEY", "openrouter", "openrouter"),
)
"""The environment variable pydantic-ai reads each provider's key from, the provider's name in a model string, and
its id in `genai-prices`."""

PER_PROVIDER = 4
"""Models offered per provider key: its newest, most capable first."""

LOCAL_SERVERS: tuple[tuple[int, str], ...] = (
    (11434, "Ollama"),
    (8000, "vLLM"),
    (8080, "llama.cpp"),
    (1234, "LM Studio"),
)
"""The ports local OpenAI-compatible servers listen on by default, probed on 127.0.0.1."""

LOCAL_PORTS_VARIABLE = "CODE_PUPPY_LOCAL_PORTS"
"""Comma-separated ports probed instead of `LOCAL_SERVERS`'s (tests, or a server on a port of one's own)."""

PROBE_SECONDS = 0.3
"""How long the probes of local servers take at most, all at once."""

_OPENROUTER_VENDORS = {"anthropic": "anthropic", "openai": "openai", "google": "google"}
"""OpenRouter names other providers' models `VENDOR/MODEL`; it is offered the best of these."""
_NOT_FOR_CHAT = re.compile(r"image|vision|audio|tts|embed|realtime|transcribe|search|decisions")


@dataclass(frozen=True)
class ModelChoice:
    """One model the user can choose."""

    name: str
    """What `-m` and `model = "…"` take: a model string, or a `[models]` entry's name."""
    source: str
    """Where it was found: `[models]`, the variable holding the key, or the local server and its port."""
    price: tuple[float, float] | None = None
    """US dollars per million input and output tokens, when known."""
    context_window: int | None = None
    """Tokens, when known."""
    endpoint: ModelEndpoint | None = None
    """For a model of a local server: the `[models.NAME]` entry that reaches it (not yet in config.toml)."""


def default_model_written(project_root: Path) -> bool:
    """Whether config.toml (the user's or the project's) sets `model`, read without validating: a file that cannot be
    read counts as setting it, so the normal start-up names its problem."""
    for path in (config_dir() / "config.toml", project_root / PROJECT_CONFIG):
        try:
            if "model" in tomllib.loads(path.read_text(encoding="utf-8")):
                return True
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            return True
    return False


def find_choices(settings: Settings, environ: Mapping[str, str] | None = None) -> list[ModelChoice]:
    """Every model the user can choose: the `[models]` entries, the local servers' models, then the providers' whose
    key is in `environ` (default: this process's environment). Only 127.0.0.1 is asked, for at most `PROBE_SECONDS`."""
    environ = os.environ if environ is None else environ
    choices = [
        ModelChoice(name, "[models]", _entry_price(endpoint), endpoint.context_window)
        for name, endpoint in settings.models.items()
    ]
    choices += local_choices(settings, local_ports(environ))
    choices += provider_choices(environ)
    return choices


def local_ports(environ: Mapping[str, str]) -> list[tuple[int, str]]:
    """The ports to probe and the server each usually is (`CODE_PUPPY_LOCAL_PORTS` replaces the usual ones)."""
    written = environ.get(LOCAL_PORTS_VARIABLE)
    if written is None:
        return list(LOCAL_SERVERS)
    names = dict(LOCAL_SERVERS)
    return [(int(port), names.get(int(port), "local server")) for port in written.split(",") if port.strip().isdigit()]


def local_choices(settings: Settings, ports: list[tuple[int, str]]) -> list[ModelChoice]:
    """The models of the OpenAI-compatible servers answering `GET /v1/models` on 127.0.0.1 at `ports`, each with the
    `[models]` entry that reaches it (none when a configured entry already does)."""
    from concurrent.futures import ThreadPoolExecutor

    from code_puppy.config import ModelEndpoint

    if not ports:
        return []
    with ThreadPoolExecutor(len(ports)) as pool:
        listed = list(pool.map(_models_at, [port for port, _ in ports]))
    reached = {(endpoint.base_url, endpoint.name) for endpoint in settings.models.values()}
    choices: list[ModelChoice] = []
    for (port, server), models in zip(ports, listed, strict=True):
        base_url = f"http://127.0.0.1:{port}/v1"
        for model, window in models:
            if (base_url, model) in reached:
                continue
            name = re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-.") or "local"
            if name in settings.models:
                name = f"{server.lower().replace(' ', '-').replace('.', '')}-{name}"
            endpoint = ModelEndpoint(
                name=model, base_url=base_url, context_window=window, input_price=0, output_price=0
            )
            choices.append(ModelChoice(name, f"{server} at 127.0.0.1:{port}", (0.0, 0.0), window, endpoint))
    return choices


def _models_at(port: int) -> list[tuple[str, int | None]]:
    """The models the server on `port` lists, each with its context window when the server says (vLLM's
    `max_model_len`)."""
    import urllib.request  # here: the chat imports this module for its quick check of config.toml

    url = f"http://127.0.0.1:{port}/v1/models"
    # No proxy: a proxy from the environment would be asked about this machine's ports.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=PROBE_SECONDS) as response:
            data: Any = json.loads(response.read(1_000_000))
    except (OSError, ValueError):
        return []
    rows: Any = cast(dict[str, Any], data).get("data") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        return []
    found: list[tuple[str, int | None]] = []
    for row in cast(list[Any], rows):
        fields = cast(dict[str, Any], row) if isinstance(row, dict) else {}
        model, window = fields.get("id"), fields.get("max_model_len")
        if isinstance(model, str) and model:
            found.append((model, window if isinstance(window, int) and window > 0 else None))
    return found


def provider_choices(environ: Mapping[str, str]) -> list[ModelChoice]:
    """For each provider whose key is set in `environ` and whose SDK is installed, its newest known models
    (pydantic-ai's `KnownModelName` and `genai-prices`' tables, installed with them), a few each, priced where
    `genai-prices` knows them."""
    choices: list[ModelChoice] = []
    offered: set[str] = set()
    for variable, provider, price_id in PROVIDER_KEYS:
        if not environ.get(variable) or provider in offered or not _installed(provider):
            continue
        offered.add(provider)
        for model in _best_models(provider, price_id):
            price, window = _price(model, price_id), _context_window(model, price_id)
            choices.append(ModelChoice(f"{provider}:{model}", variable, price, window))
    return choices


def keys_without_sdk(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """Each provider key set in `environ` whose provider's SDK is missing, with the pydantic-ai-slim extra to install
    (`GROQ_API_KEY`, `groq`)."""
    return [
        (variable, provider)
        for variable, provider, _ in PROVIDER_KEYS
        if environ.get(variable) and not _installed(provider)
    ]


def _installed(provider: str) -> bool:
    """Whether pydantic-ai can talk to `provider` here: its SDK extra installed (openai, anthropic and google come
    with code-puppy; `pydantic-ai-slim[mistral]` and the like are the user's to add)."""
    from pydantic_ai.providers import infer_provider_class

    try:
        infer_provider_class(provider)
    except ImportError:
        return False
    return True


def _best_models(provider: str, price_id: str) -> list[str]:
    """The provider's newest priced models first (by the version numbers in their names, then by price),
    `PER_PROVIDER` of them, leaving out models for images, audio and the like, and those `genai-prices` calls
    deprecated."""
    if provider == "openrouter":
        return [
            f"{vendor}/{model}"
            for name, vendor in _OPENROUTER_VENDORS.items()
            for model in _best_models(name, name)[:1]
            if _price(f"{vendor}/{model}", "openrouter") is not None
        ]
    from typing import get_args

    from pydantic_ai.models import KnownModelName

    known = [name.partition(":")[2] for name in get_args(KnownModelName.__value__) if name.startswith(f"{provider}:")]
    usable = [model for model in known if not _NOT_FOR_CHAT.search(model) and not _deprecated(model, price_id)]

    def rank(model: str) -> tuple[bool, tuple[int, ...], float]:
        # Version numbers, not sizes (`14b`) or dates (`08-2024`).
        numbers = re.findall(r"\d+", re.sub(r"\d+b\b|\d{4}", "", model))
        price = _price(model, price_id)
        return price is not None, tuple(int(number) for number in numbers), price[1] if price else 0.0

    return sorted(usable, key=rank, reverse=True)[:PER_PROVIDER]


def _model_info(model: str, price_id: str) -> Any:
    from genai_prices.data_snapshot import get_snapshot

    with contextlib.suppress(LookupError, ValueError):
        return get_snapshot().find_provider_model(model, None, price_id, None)[1]
    return None


def _deprecated(model: str, price_id: str) -> bool:
    info = _model_info(model, price_id)
    return bool(info is not None and info.deprecated)


def _price(model: str, price_id: str) -> tuple[float, float] | None:
    """US dollars per million input and output tokens of `model` at `price_id`, from `genai-prices`."""
    from genai_prices import Usage, calc_price

    try:
        input_price = calc_price(Usage(input_tokens=1_000_000), model, provider_id=price_id).input_price
        output_price = calc_price(Usage(output_tokens=1_000_000), model, provider_id=price_id).output_price
    except (LookupError, ValueError):
        return None
    return float(input_price), float(output_price)


def _context_window(model: str, price_id: str) -> int | None:
    info = _model_info(model, price_id)
    window: int | None = info.context_window if info is not None else None
    return window


def _entry_price(endpoint: ModelEndpoint) -> tuple[float, float] | None:
    if endpoint.input_price is None or endpoint.output_price is None:
        return None
    return endpoint.input_price, endpoint.output_price


def describe(choice: ModelChoice) -> Iterator[str]:
    """The columns a list of choices shows: the name, the price, the context window, where it was found."""
    yield choice.name
    if choice.price is None:
        yield "unpriced"
    elif choice.price == (0.0, 0.0):
        yield "free"
    else:
        yield f"${_money(choice.price[0])}/${_money(choice.price[1])} per M"
    yield f"{_tokens(choice.context_window)} ctx" if choice.context_window else "? ctx"
    yield choice.source


def _tokens(count: int) -> str:
    if count >= 1_000_000:
        return f"{count / 1_000_000:.1f}".removesuffix(".0") + "M"
    return f"{count // 1000}k"


def _money(amount: float) -> str:
    return f"{amount:.2f}" if amount >= 0.1 else f"{amount:.3f}".rstrip("0")
