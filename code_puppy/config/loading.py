"""Reading the settings: the user's config.toml, then a trusted project's MCP files and its own config.toml, merged
key by key and validated (`load_settings`), with a project's untrusted keys left out and named."""

from __future__ import annotations

import json
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from pydantic import (
    ValidationError,
)

from code_puppy.config.settings import IMPORT_PATH_TAG, TABLE_TAG, McpServerConfig, Settings, layer_of, lookup
from code_puppy.errors import ConfigError
from code_puppy.paths import config_dir
from code_puppy.trust import CHECKPOINT_IGNORE, PROJECT_CONFIG, ProjectTrust, project_trust

PROJECT_MCP_FILES = ("mcp.json", ".mcp.json")
"""The `{"mcpServers": {...}}` files read from a trusted project's root, later ones overriding earlier ones."""
_MCP_JSON_KEYS = frozenset(McpServerConfig.model_fields) - {"enabled"}
"""Keys honoured in `.mcp.json` entries; others (written for other MCP clients) are ignored."""


def load_settings(project_root: Path) -> Settings:
    """Read and validate the user config, then the project's MCP files and config on top of it.

    A project's own files count only as far as the user trusts them (`code_puppy.trust`): its `.mcp.json`/`mcp.json`,
    its `.code-puppy/checkpointignore` (which the checkpoints read) and every key of its config.toml outside
    `PROJECT_KEYS_WITHOUT_TRUST` wait for `code-puppy trust` and for their content to stay what was trusted; until then
    they are ignored with a one-line note naming them. The ignored keys are still validated, so a typo is an error
    whether or not the project is trusted.
    """
    trust = project_trust(project_root)
    layers: list[tuple[Path, dict[str, Any]]] = []
    user_file = config_dir() / "config.toml"
    if user_file.is_file():
        layers.append((user_file, _read_toml(user_file)))
    ignored: dict[str, list[str]] = {}  # by covered file, in the order the notes name them
    for name in PROJECT_MCP_FILES:
        if (path := project_root / name).is_file():
            if trust.trusts(name):
                layers.append((path, _read_mcp_json(path)))
            else:
                ignored[name] = [name]
    project_file = project_root / PROJECT_CONFIG
    if project_file.is_file():
        data = _read_toml(project_file)
        if not trust.trusts(PROJECT_CONFIG):
            _validated([*layers, (project_file, data)])
            data, ignored[PROJECT_CONFIG] = _without_trust(data)
        layers.append((project_file, data))
    if (project_root / CHECKPOINT_IGNORE).is_file() and not trust.trusts(CHECKPOINT_IGNORE):
        ignored[CHECKPOINT_IGNORE] = [CHECKPOINT_IGNORE]  # the checkpoints read it themselves, only once trusted
    _note_ignored(trust, {name: what for name, what in ignored.items() if what})
    return _validated(layers)


PROJECT_KEYS_WITHOUT_TRUST: Mapping[str, frozenset[str] | None] = {
    "model": None,
    "history": frozenset({"compaction"}),
}
"""The keys of a project's config.toml that apply without trust (None: the whole key; a set: those keys of the
table): preferences that neither run or import code, widen what tools may do, nor decide where requests and API keys
go. Every other key, including each one added later, needs trust: an allow-list, so a new key is safe by default."""


def _without_trust(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The part of a project's config that applies without trust, and the names of what was left out."""
    applied: dict[str, Any] = {}
    ignored: list[str] = []
    for key, value in data.items():
        if key not in PROJECT_KEYS_WITHOUT_TRUST:
            ignored.append(f"[{key}]" if isinstance(value, Mapping) else key)
        elif (keys := PROJECT_KEYS_WITHOUT_TRUST[key]) is not None and isinstance(value, Mapping):
            table = cast(Mapping[str, Any], value)
            applied[key] = {name: item for name, item in table.items() if name in keys}
            ignored += [f"[{key}] {name}" for name in table if name not in keys]
        else:
            applied[key] = value
    return applied, ignored


def _note_ignored(trust: ProjectTrust, ignored: Mapping[str, list[str]]) -> None:
    """One line for an untrusted project; one per file that is no longer what the user trusted."""
    if not ignored:
        return
    if not trust.listed:
        names = ", ".join(name for what in ignored.values() for name in what)
        print(
            f"code-puppy: note: this project is not trusted, so code-puppy ignores its {names} "
            "(run `code-puppy trust` in the project to trust it)",
            file=sys.stderr,
        )
        return
    for file, what in ignored.items():
        names = "it" if what == [file] else f"its {', '.join(what)}"
        print(
            f"code-puppy: note: {trust.why_not(file)}, so code-puppy ignores {names} "
            "(run `code-puppy trust` in the project to trust it as it is now)",
            file=sys.stderr,
        )


def _validated(layers: list[tuple[Path, dict[str, Any]]]) -> Settings:
    merged: dict[str, Any] = {}
    for _, data in layers:
        merged = _merge(merged, data)
    try:
        settings = Settings.model_validate(merged, context={"layers": tuple(layers)})
    except ValidationError as exc:
        raise ConfigError(_describe(exc, merged, layers)) from None
    return settings


def _read_mcp_json(path: Path) -> dict[str, Any]:
    """A `{"mcpServers": {...}}` file as a config layer: `disabled` becomes `enabled`, unknown keys are dropped."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"{path}: invalid JSON: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    servers: Any = cast(dict[str, Any], data).get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ConfigError(f'{path}: expected an object {{"mcpServers": {{"NAME": {{...}}}}}}')
    layer: dict[str, Any] = {}
    for name, entry in cast(dict[str, Any], servers).items():
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: 'mcpServers.{name}': expected an object")
        fields = cast(dict[str, Any], entry)
        server = {key: value for key, value in fields.items() if key in _MCP_JSON_KEYS and value is not None}
        if isinstance(fields.get("disabled"), bool):
            server["enabled"] = not fields["disabled"]
        layer[name] = server
    return {"mcp_servers": layer}


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


def _describe(exc: ValidationError, merged: Mapping[str, Any], layers: list[tuple[Path, dict[str, Any]]]) -> str:
    """One line: the file that set the offending key, the key, and what was expected."""
    error = exc.errors()[0]
    location = [str(part) for part in error["loc"] if part not in (IMPORT_PATH_TAG, TABLE_TAG)]
    key = ".".join(location)
    source = layer_of(location, layers) or (layers[-1][0] if layers else Path("config.toml"))
    if error["type"] == "extra_forbidden":
        return f"{source}: unknown key '{key}'"
    if error["type"] == "missing":
        return f"{source}: missing key '{key}'"
    if error["type"] in (
        "value_error",
        "processor_entry",
    ):  # our own validators: the message says it all, and the value may hold secrets
        return f"{source}: '{key}': {error['msg'].removeprefix('Value error, ')}"
    expected = f"{source}: '{key}': {error['msg'][0].lower()}{error['msg'][1:]}"
    if _SECRET_KEYS & set(location):  # headers, env and key names may hold a secret: never echo it to logs
        return expected
    return f"{expected}, got {lookup(merged, location)!r}"


_SECRET_KEYS = frozenset({"headers", "env", "api_key_env"})
