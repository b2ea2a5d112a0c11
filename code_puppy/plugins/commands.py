"""`code-puppy plugins list|trust`."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TextIO

from code_puppy.config import load_settings
from code_puppy.plugins.discovery import load_plugins, plugins_in
from code_puppy.plugins.host import Status, remembered_errors
from code_puppy.trust import project_plugins_dir, trust_project

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
    entry = trust_project(project_root)
    files = ", ".join(entry["files"]) or "no config files"
    folder = project_plugins_dir(project_root)
    names = ", ".join(plugin.name for plugin in plugins_in(folder, "project")) or "none yet"
    print(
        f"trusted {project_root}: {files}; plugins in {folder}: {names} (sha256 {entry['plugins_sha256'][:16]}…)",
        file=out,
    )
