"""Sessions: conversations stored in SQLite through pydantic-ai's `ConversationStore`, with metadata beside them."""

from .catalog import SessionCatalog, SessionInfo
from .schema import Database
from .store import SqliteConversationStore

__all__ = ("Database", "SessionCatalog", "SessionInfo", "SqliteConversationStore")
