"""`JsonSerializer`: how DBOS stores a durable run's inputs, step outputs and errors — JSON, never a pickle.

DBOS pickles by default, and its portable JSON serializer refuses pydantic-ai's messages. A value here is JSON as it
is, or a tagged object: the dotted name of its type and that type's JSON form (pydantic). A type is only ever
rebuilt from a module of pydantic-ai, pydantic-ai-harness or code-puppy, by validation, never by unpickling. An
exception is stored as its type's name and message, and comes back as `StepFailed` (builtin ones as themselves).

DBOS itself still unpickles a row marked `py_pickle`, whatever serializer is configured (README "Durable runs").
"""

from __future__ import annotations

import builtins
import datetime
import importlib
import json
from functools import cache
from typing import Any, cast

from dbos import Serializer
from pydantic import TypeAdapter

TRUSTED_MODULES = ("pydantic_ai.", "pydantic_ai_harness.", "code_puppy.")
"""The packages whose types a stored value may name."""
NAME = "code_puppy_json"
"""How DBOS marks the rows this serializer wrote."""


class StepFailed(Exception):
    """An error a durable step or run recorded, as it comes back from the database: its type's name and message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind

    def __str__(self) -> str:
        return f"{self.kind}: {self.args[0]}" if self.args[0] else self.kind


class JsonSerializer(Serializer):
    """DBOS's serializer for code-puppy's durable runs (module docstring)."""

    def serialize(self, data: Any) -> str:
        return json.dumps(_encode(data), separators=(",", ":"))

    def deserialize(self, serialized_data: str) -> Any:
        return _decode(json.loads(serialized_data))

    def name(self) -> str:
        return NAME


def _encode(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        items = [_encode(item) for item in value]  # pyright: ignore[reportUnknownVariableType]
        return items if isinstance(value, list) else {"$tuple": items}
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value):  # pyright: ignore[reportUnknownVariableType]
            return {"$dict": {key: _encode(item) for key, item in value.items()}}  # pyright: ignore
        raise TypeError(f"cannot store a dict with keys that are not text: {value!r:.80}")
    if isinstance(value, BaseException):
        return {"$error": type(value).__name__, "message": str(value)}
    if isinstance(value, datetime.datetime):  # a run's deadline (`--timeout`), pydantic-ai's timestamps
        return {"$datetime": value.isoformat()}
    kind: type[Any] = cast(type[Any], type(value))
    name = f"{kind.__module__}:{kind.__qualname__}"
    if not kind.__module__.startswith(TRUSTED_MODULES):
        raise TypeError(f"cannot store a {name} in a durable run")
    return {"$type": name, "value": _adapter(kind).dump_python(value, mode="json")}


def _decode(stored: Any) -> Any:
    if isinstance(stored, list):
        return [_decode(item) for item in cast(list[Any], stored)]
    if not isinstance(stored, dict):
        return stored
    value = cast(dict[str, Any], stored)
    if "$dict" in value:
        return {key: _decode(item) for key, item in value["$dict"].items()}  # pyright: ignore
    if "$tuple" in value:
        return tuple(_decode(item) for item in value["$tuple"])  # pyright: ignore
    if "$datetime" in value:
        return datetime.datetime.fromisoformat(str(value["$datetime"]))
    if "$error" in value:
        builtin: Any = getattr(builtins, str(value["$error"]), None)
        if isinstance(builtin, type) and issubclass(builtin, Exception) and builtin.__module__ == "builtins":
            return builtin(str(value["message"]))
        return StepFailed(str(value["$error"]), str(value["message"]))
    if "$type" not in value:
        raise TypeError("a value of the durable runs database that this serializer did not write")
    name = str(value["$type"])
    module, _, qualname = name.partition(":")
    # A `__main__` module runs when imported, and only classes are rebuilt.
    if not module.startswith(TRUSTED_MODULES) or "__main__" in module.split(".") or "__" in qualname:
        raise TypeError(f"refusing to rebuild a {name} from the durable runs database")
    kind: Any = importlib.import_module(module)
    for part in qualname.split("."):
        kind = getattr(kind, part)
    if not isinstance(kind, type):
        raise TypeError(f"refusing to rebuild a {name} from the durable runs database")
    return _adapter(kind).validate_python(value["value"])


@cache
def _adapter(kind: type[Any]) -> TypeAdapter[Any]:
    return TypeAdapter(kind)
