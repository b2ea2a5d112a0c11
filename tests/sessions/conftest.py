"""The store tests run on both backends: a SQLite file, and a fresh database on the test PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from code_puppy.sessions.schema import Location
from code_puppy.sessions.store import SqliteConversationStore

LOCATION_ARGUMENT = "(sys.argv[1] if '://' in sys.argv[1] else __import__('pathlib').Path(sys.argv[1]))"
"""What a test's child script opens: the location the test passed as its first argument."""


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest, db_path: Path) -> Location:
    """Where the test's store is: a SQLite file, or a PostgreSQL url."""
    return db_path if request.param == "sqlite" else request.getfixturevalue("postgres_url")


@pytest.fixture
def store(location: Location) -> Iterator[SqliteConversationStore]:
    """A real sessions store of the test's own, on each backend, open for the test."""
    with SqliteConversationStore(location) as opened:
        yield opened
