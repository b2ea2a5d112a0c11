"""Sessions: conversations stored in SQLite through pydantic-ai's `ConversationStore`, with metadata beside them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .catalog import SessionCatalog, SessionInfo
    from .schema import Database
    from .store import SqliteConversationStore

__all__ = ("Database", "SessionCatalog", "SessionInfo", "SqliteConversationStore")

_HOMES = {
    "Database": "schema",
    "SessionCatalog": "catalog",
    "SessionInfo": "catalog",
    "SqliteConversationStore": "store",
}


def __getattr__(name: str) -> Any:
    # Lazy, so that `code-puppy steer` (schema and runs only) starts without importing pydantic-ai.
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
