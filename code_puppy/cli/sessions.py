"""`code-puppy sessions`: list, search, show, export, rename, archive, delete and import sessions; check and repair
the database."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from code_puppy.cli.common import NAME, fail, guarded, session_output, store_exists, with_store

if TYPE_CHECKING:
    from code_puppy.sessions.store import SqliteConversationStore


@click.group()
def sessions() -> None:
    """List, show, export and delete stored sessions; check and repair the database."""


@sessions.command("list")
@click.option(
    "--all",
    "all_projects",
    is_flag=True,
    help="Every session: of every project, and those whose runs all failed before the model answered (TURNS: failed).",
)
@click.option("--archived", is_flag=True, help="The archived sessions instead.")
def sessions_list(*, all_projects: bool, archived: bool) -> None:
    """Sessions of this project (id, age, turns the model answered, project, cost, name or title), newest first."""

    from code_puppy.paths import find_project_root

    project = None if all_projects else find_project_root(Path.cwd())
    if not store_exists():
        click.echo(f"no sessions{f' in {project}' if project else ''}")
        return
    with_store(
        lambda store: _listing()(store, project, sys.stdout, archived=archived, failed=all_projects), readonly=True
    )


@sessions.command("rename")
@click.argument("session_id", metavar="ID", type=NAME)
@click.argument("name", metavar="NAME", type=NAME)
def sessions_rename(*, session_id: str, name: str) -> None:
    """Call a session NAME, which `-r NAME` resumes it by (names are unique)."""
    if not name.strip():
        fail("the name is empty")
    with_store(lambda store: session_output().rename_session(store, session_id, name.strip(), sys.stdout))


@sessions.command("archive")
@click.argument("session_id", metavar="ID", type=NAME)
def sessions_archive(*, session_id: str) -> None:
    """Hide a session from lists, pickers, search and -c, without deleting it (`-r ID` still resumes it)."""
    with_store(lambda store: session_output().archive_session(store, session_id, sys.stdout, archived=True))


@sessions.command("unarchive")
@click.argument("session_id", metavar="ID", type=NAME)
def sessions_unarchive(*, session_id: str) -> None:
    """List an archived session again (`sessions list --archived` shows them)."""
    with_store(lambda store: session_output().archive_session(store, session_id, sys.stdout, archived=False))


@sessions.command("search")
@click.argument("query", metavar="QUERY")
@click.option(
    "--project",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="PATH",
    help="Only the sessions of the project at PATH (default: this one).",
)
@click.option("--all", "all_projects", is_flag=True, help="Sessions of every project.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def sessions_search(*, query: str, project: Path | None, all_projects: bool, output_format: str) -> None:
    """Sessions whose prompts or answers match every word of QUERY ("a phrase" in quotes, prefix*).

    Exit 0 with matches, 1 without (or when the search index is damaged), 2 for an empty or non-UTF-8 query.
    """
    from code_puppy.paths import find_project_root

    if all_projects and project is not None:
        fail("use either --project or --all, not both")
    root = None if all_projects else find_project_root((project or Path.cwd()).resolve())
    if not store_exists():
        click.echo("[]" if output_format == "json" else "", nl=output_format == "json")
        click.echo("no session matches (there are no sessions yet)", err=True)
        sys.exit(1)
    color = output_format == "text" and sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    with_store(
        lambda store: session_output().search_sessions(
            store, query, sys.stdout, project_dir=root, as_json=output_format == "json", color=color
        )
    )


@sessions.command("show")
@click.argument("session_id", metavar="ID", type=NAME)
@click.option("--groups", is_flag=True, help="Show the history groups processors see, with protections and tokens.")
def sessions_show(*, session_id: str, groups: bool) -> None:
    """A readable transcript of a session."""
    with_store(lambda store: session_output().show_session(store, session_id, sys.stdout, groups=groups), readonly=True)


@sessions.command("export")
@click.argument("session_id", metavar="ID", type=NAME)
def sessions_export(*, session_id: str) -> None:
    """A session as JSON: its metadata and its messages (pydantic-ai's ModelMessagesTypeAdapter form)."""
    with_store(lambda store: session_output().export_session(store, session_id, sys.stdout), readonly=True)


@sessions.command("delete")
@click.argument("session_id", metavar="ID", type=NAME)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def sessions_delete(*, session_id: str, yes: bool) -> None:
    """Delete a session and its messages."""

    def action(store: SqliteConversationStore) -> None:
        from code_puppy.sessions.session import find_session

        info = find_session(store, session_id)
        if not yes:
            if not sys.stdin.isatty():
                fail(f"not deleting session {info.id} without --yes: nobody can confirm (stdin is not a terminal)")
            click.confirm(
                f"Delete session {info.id} ({info.title or 'untitled'}, {info.message_count} messages)?", abort=True
            )
        store.sessions.delete(info.id)
        click.echo(f"deleted session {info.id}")

    with_store(action)


@sessions.command("import")
@click.argument("paths", metavar="PATH...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True, help="Say what would be imported; change nothing.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def sessions_import(*, paths: tuple[Path, ...], dry_run: bool, output_format: str) -> None:
    """Import Claude Code transcripts (~/.claude/projects) and Codex rollouts (~/.codex/sessions) as sessions.

    A folder imports every .jsonl file under it. A file imported before is not imported again.
    """
    from code_puppy.paths import find_project_root

    for path in paths:
        if not path.exists():
            fail(f"{path}: no such file or directory")

    def action(store: SqliteConversationStore | None) -> int:
        from code_puppy.sessions.importing import import_paths

        return import_paths(
            store,
            list(paths),
            dry_run=dry_run,
            default_project=find_project_root(Path.cwd()),
            out=sys.stdout,
            err=sys.stderr,
            as_json=output_format == "json",
        )

    if dry_run and not store_exists():
        sys.exit(guarded(lambda: action(None)))

    def run() -> int:
        from code_puppy.sessions.store import open_store

        with open_store(readonly=dry_run) as store:
            return action(store)

    sys.exit(guarded(run))


@sessions.command("check")
def sessions_check() -> None:
    """Read every page of sessions.db (SQLite's integrity_check): exit 0 when it is sound, 1 with what is wrong."""
    sys.exit(guarded(lambda: session_output().check_store(sys.stdout)))


@sessions.command("repair")
def sessions_repair() -> None:
    """Move a damaged sessions.db aside (sessions.db.corrupt-DATE) and rebuild it from what can still be read."""
    sys.exit(guarded(lambda: session_output().repair_store(sys.stdout)))


def _listing() -> Callable[..., None]:
    from code_puppy.core.session_text import list_sessions

    return list_sessions
