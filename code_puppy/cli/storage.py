"""`code-puppy storage check|migrate`: where the sessions store is and what it holds, and a local SQLite store
copied into the PostgreSQL one of `[storage] url`."""

from __future__ import annotations

import sys

import click

from code_puppy.cli.common import guarded


@click.group("storage")
def storage() -> None:
    """The sessions store: the SQLite file, or PostgreSQL at `[storage] url`."""


@storage.command("check")
def storage_check() -> None:
    """Report the store: backend, where (a url without its password), schema version and counts. Exit 2 when it
    cannot be reached."""

    def run() -> int:
        from code_puppy.paths import store_location
        from code_puppy.sessions.copying import summary
        from code_puppy.sessions.schema import Database

        location = store_location()
        if not isinstance(location, str) and not location.exists():
            click.echo(f"backend: sqlite\nfile: {location} (none yet: code-puppy creates it with the first session)")
            return 0
        database = Database(location, readonly=not isinstance(location, str))
        try:
            found = summary(database)
        finally:
            database.close()
        where = f"url: {database.path}" if database.postgres else f"file: {database.path}"
        lines = [
            f"backend: {'postgresql' if database.postgres else 'sqlite'}",
            where,
            f"schema: {found.migrations[-1] if found.migrations else 'none'} ({len(found.migrations)} migrations)",
            *(f"{label}: {count}" for label, count in found.counts.items()),
        ]
        click.echo("\n".join(lines))
        return 0

    sys.exit(guarded(run))


@storage.command("migrate")
@click.option(
    "--from",
    "source",
    type=click.Choice(["sqlite"]),
    required=True,
    help="sqlite: this machine's sessions.db in the data directory.",
)
def storage_migrate(*, source: str) -> None:
    """Copy the local SQLite store into the PostgreSQL store of `[storage] url`: every session not there yet, with its
    messages, search text, journals, checkpoints and costs. Running it again copies nothing new."""
    del source  # the one source there is

    def run() -> int:
        from code_puppy.errors import ConfigError
        from code_puppy.paths import sessions_db, storage_url
        from code_puppy.sessions.copying import copy_store
        from code_puppy.sessions.schema import Database

        url = storage_url()
        if url is None:
            raise ConfigError("storage migrate copies into PostgreSQL: set [storage] url or CODE_PUPPY_STORAGE_URL")
        path = sessions_db()
        if not path.is_file():
            raise ConfigError(f"no SQLite store to copy at {path}")
        target = Database(url)
        try:
            local = Database(path)
            try:
                counts = copy_store(local, target)
            finally:
                local.close()
        finally:
            target.close()
        click.echo(f"{counts.describe()} (from {path} to {target.path})")
        return 0

    sys.exit(guarded(run))
