"""A plugin's own `[plugins.NAME]` table, checked against the plugin's pydantic model."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from code_puppy.config import Settings

M = TypeVar("M", bound=BaseModel)


def plugin_options(settings: Settings, name: str, model: type[M]) -> M:
    """`[plugins.NAME]` validated as `model` (its defaults when the table is absent); one-line `ValueError` if bad."""
    try:
        return model.model_validate(settings.plugins.options.get(name, {}))
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise ValueError(f"[plugins.{name}] {where}: {error['msg']}") from None
