"""`code-puppy plugins` and `code-puppy trust`: the plugins found for a project, and trusting its own files."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

import click

from code_puppy.cli.common import debug_requested, guarded

if TYPE_CHECKING:
    from code_puppy.plugins.host import Status


@click.group("plugins")
def plugins_group() -> None:
    """List plugins; trust this project's own plugins."""


@plugins_group.command("list")
def plugins_list() -> None:
    """Every plugin found for this project: name, source, whether it runs, its last error."""

    def run() -> None:
        from code_puppy.paths import find_project_root

        list_plugins(find_project_root(Path.cwd()), sys.stdout, debug=debug_requested())

    sys.exit(guarded(run))


@plugins_group.command("trust")
def plugins_trust() -> None:
    """Trust this project as it is now, and run its .code-puppy/plugins (a later change needs trusting again)."""
    _trust()


@click.command("trust")
def trust() -> None:
    """Trust this project's config files and plugins as they are now (SHA-256 recorded; a change needs trust again)."""
    _trust()


def _trust() -> NoReturn:
    def run() -> None:
        from code_puppy.paths import find_project_root

        trust_plugins(find_project_root(Path.cwd()), sys.stdout)

    sys.exit(guarded(run))


ENABLED: dict[Status, str] = {
    "enabled": "yes",
    "disabled": "no (disabled)",
    "idle": "no (not configured)",
    "failed": "no (failed to load)",
    "untrusted": "no (not trusted)",
    "changed": "no (changed since trusted)",
    "replaced": "no (replaced)",
}


def list_plugins(project_root: Path, out: TextIO, *, debug: bool = False) -> None:
    """One row per plugin found, in plugin order: name, source, whether it runs, its last error."""
    from code_puppy.config import load_settings
    from code_puppy.plugins.discovery import load_plugins
    from code_puppy.plugins.host import remembered_errors

    host = load_plugins(load_settings(project_root), project_root, debug=debug, stderr=io.StringIO())
    remembered = remembered_errors()
    rows = [("NAME", "SOURCE", "ENABLED", "LAST ERROR")]
    for plugin in host.plugins:
        source = f"entry point {plugin.location}" if plugin.source == "entry point" else plugin.source
        rows.append((plugin.name, source, ENABLED[plugin.status], plugin.error or remembered.get(plugin.name, "")))
    if len(rows) == 1:
        print("no plugins found", file=out)
        return
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("  ".join([*cells, row[3]]).rstrip(), file=out)


def trust_plugins(project_root: Path, out: TextIO) -> None:
    """Trust the project as it is now: its covered config files and its plugins folder."""
    from code_puppy.plugins.discovery import plugins_in
    from code_puppy.trust import project_plugins_dir, trust_project

    entry = trust_project(project_root)
    commands = [name for name in entry["files"] if "/commands/" in name]
    listed = [name for name in entry["files"] if name not in commands]
    listed += [f"{len(commands)} command file{'s' if len(commands) != 1 else ''}"] if commands else []
    files = ", ".join(listed) or "no config files"
    folder = project_plugins_dir(project_root)
    names = ", ".join(plugin.name for plugin in plugins_in(folder, "project")) or "none yet"
    print(
        f"trusted {project_root}: {files}; plugins in {folder}: {names} (sha256 {entry['plugins_sha256'][:16]}…)",
        file=out,
    )
