"""Settings: TOML config from the user and project locations, validated by pydantic models.

Locations (DESIGN §3): `$CODE_PUPPY_HOME` holds everything when set; otherwise platformdirs'
`user_config_dir("code-puppy")` holds config.toml and plugins, `user_data_dir("code-puppy")` holds sessions.db.
A project's `.code-puppy/config.toml` overrides the user config key by key, tables merged.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# Re-exported: the locations live in a module without pydantic, for the chat's fast start.
from code_puppy.paths import code_puppy_home as code_puppy_home
from code_puppy.paths import config_dir as config_dir
from code_puppy.paths import data_dir as data_dir
from code_puppy.paths import find_project_root as find_project_root

PermissionMode = Literal["ask", "accept-edits", "yolo", "read-only"]
CompactionKind = Literal["tiered", "summarize", "sliding", "off"]


class ConfigError(Exception):
    """A usage or configuration error: reported in one line, exit 2, nothing sent to a model."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelEndpoint(_Section):
    """A named model endpoint, usually an OpenAI-compatible server (Ollama, vLLM, llama.cpp)."""

    provider: Literal["openai-chat", "openai-responses", "anthropic"] = "openai-chat"
    """Which wire protocol the endpoint speaks."""
    name: str
    """The model name sent to the endpoint."""
    base_url: str | None = None
    """The endpoint's base URL, e.g. `http://127.0.0.1:11434/v1`; unset uses the provider's default."""
    api_key_env: str | None = None
    """The environment variable holding the API key; unset sends a placeholder key (local servers ignore it)."""
    context_window: int | None = Field(default=None, gt=0)
    """The model's context window in tokens, for compaction and the context gauge."""


class PermissionsConfig(_Section):
    mode: PermissionMode = "ask"
    """ask | accept-edits | yolo | read-only (DESIGN §3 "Permissions")."""
    allow: tuple[str, ...] = ()
    """Shell commands that run without asking; `*` at the end matches any arguments."""


class HistoryConfig(_Section):
    compaction: CompactionKind = "tiered"
    """The built-in compaction: tiered | summarize | sliding | off."""
    processors: tuple[str, ...] = ()
    """User history processors as `module:callable` import paths, applied in order."""
    processor_condition: str | None = None
    """A `module:callable` deciding, before every model request, whether the processors run."""


class PluginsConfig(_Section):
    disabled: tuple[str, ...] = ()
    """Plugin names that are not loaded."""
    max_continuations: int = Field(default=10, ge=0)
    """How many follow-up runs `turn_end` hooks may start per user turn."""


class Settings(_Section):
    """Everything config.toml can say, merged from the user and project files."""

    model: str | None = None
    """The default model: a pydantic-ai model string or a name from `[models]`."""
    models: dict[str, ModelEndpoint] = Field(default_factory=dict[str, ModelEndpoint])
    """Named model endpoints."""
    permissions: PermissionsConfig = PermissionsConfig()
    history: HistoryConfig = HistoryConfig()
    plugins: PluginsConfig = PluginsConfig()


def load_settings(project_root: Path) -> Settings:
    """Read and validate the user config, then the project config on top of it."""
    merged: dict[str, Any] = {}
    sources: list[Path] = []
    for path in (config_dir() / "config.toml", project_root / ".code-puppy" / "config.toml"):
        if path.is_file():
            merged = _merge(merged, _read_toml(path))
            sources.append(path)
    try:
        return Settings.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, merged, sources)) from None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        current = merged.get(key)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            merged[key] = _merge(current, value)  # pyright: ignore[reportUnknownArgumentType]
        else:
            merged[key] = value
    return merged


def _describe(exc: ValidationError, merged: Mapping[str, Any], sources: list[Path]) -> str:
    """One line: the file that set the offending key, the key, and what was expected."""
    error = exc.errors()[0]
    location = [str(part) for part in error["loc"]]
    key = ".".join(location)
    source = _source_of(location, sources) or (sources[-1] if sources else Path("config.toml"))
    if error["type"] == "extra_forbidden":
        return f"{source}: unknown key '{key}'"
    if error["type"] == "missing":
        return f"{source}: missing key '{key}'"
    value = _lookup(merged, location)
    return f"{source}: '{key}': {error['msg'][0].lower()}{error['msg'][1:]}, got {value!r}"


def _source_of(location: list[str], sources: list[Path]) -> Path | None:
    for path in reversed(sources):
        if _lookup(_read_toml(path), location) is not _MISSING:
            return path
    return None


_MISSING = object()


def _lookup(data: Any, location: list[str]) -> Any:
    for part in location:
        if isinstance(data, Mapping) and part in data:
            data = data[part]  # pyright: ignore[reportUnknownVariableType]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):  # pyright: ignore[reportUnknownArgumentType]
            data = data[int(part)]  # pyright: ignore[reportUnknownVariableType]
        else:
            return _MISSING
    return data  # pyright: ignore[reportUnknownVariableType]
