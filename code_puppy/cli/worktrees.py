"""`code-puppy worktrees`: the git worktrees `-w NAME` runs agents in."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from code_puppy.cli.common import NAME, fail, guarded, store_exists

if TYPE_CHECKING:
    pass


@click.group("worktrees")
def worktrees_group() -> None:
    """The git worktrees `code-puppy -w NAME` runs agents in (.code-puppy/worktrees/NAME, branch code-puppy/NAME)."""


@worktrees_group.command("list")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def worktrees_list(*, output_format: str) -> None:
    """Each worktree: name, branch, uncommitted changes, its latest session, path."""

    def run() -> int:
        return print_list(Path.cwd(), output_format=output_format)

    sys.exit(_worktree_command(run))


@worktrees_group.command("remove")
@click.argument("name", type=NAME)
@click.option("--force", is_flag=True, help="Commit its uncommitted changes on its branch first, then remove it.")
def worktrees_remove(*, name: str, force: bool) -> None:
    """Remove worktree NAME (its branch stays); exit 1 naming its uncommitted changes, unless --force."""

    def run() -> int:
        from code_puppy.worktrees import check_name, find, remove, repository

        repo = repository(Path.cwd())
        worktree = find(repo, check_name(name))
        commit = remove(repo, worktree, force=force)
        saved = f"; its changes are commit {commit[:12]} on {worktree.branch}" if commit else ""
        click.echo(f"removed worktree {name}{saved}")
        return 0

    sys.exit(_worktree_command(run))


def _worktree_command(action: Callable[[], int]) -> int:
    from code_puppy.worktrees import WorktreeError

    def run() -> int:
        try:
            return action()
        except WorktreeError as exc:
            fail(str(exc), code=1)

    return guarded(run)


def print_list(cwd: Path, *, output_format: str) -> int:
    """`code-puppy worktrees list`: each worktree with its branch, whether it has uncommitted changes, and its latest
    session."""
    import json

    from code_puppy.worktrees import listed, repository

    repo = repository(cwd)
    worktrees = listed(repo)
    sessions = _latest_sessions([worktree.path for worktree in worktrees])
    if output_format == "json":
        rows = [
            {
                "name": worktree.name,
                "path": str(worktree.path),
                "branch": worktree.branch,
                "dirty": bool(worktree.changes),
                "changes": list(worktree.changes),
                "session": sessions.get(worktree.path),
            }
            for worktree in worktrees
        ]
        click.echo(json.dumps(rows, indent=1))
        return 0
    if not worktrees:
        click.echo(f"no worktrees in {repo} (`code-puppy -w NAME` starts an agent in one)")
        return 0
    rows = [("NAME", "BRANCH", "CHANGES", "SESSION", "PATH")]
    for worktree in worktrees:
        state = f"{len(worktree.changes)} uncommitted" if worktree.changes else "clean"
        # The session's short id, as `sessions list` shows it and `-r` takes it.
        session = session_id[:8] if (session_id := sessions.get(worktree.path)) else "-"
        rows.append((worktree.name, worktree.branch or "(detached)", state, session, str(worktree.path)))
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    for row in rows:
        click.echo("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[4]]))
    return 0


def _latest_sessions(paths: list[Path]) -> dict[Path, str]:
    """The id of each path's latest session, for those that have one."""

    if not paths or not store_exists():
        return {}
    from code_puppy.sessions.store import open_store

    with open_store(readonly=True) as store:
        return {path: info.id for path in paths if (info := store.sessions.latest(path)) is not None}
