"""What a snapshot leaves out, and what a folder watch cannot see: the shadow repository's excludes (the worktrees'
folder and a trusted `.code-puppy/checkpointignore`), and the ignore files a watch may miss."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from code_puppy.paths import WORKTREES_DIR
from code_puppy.trust import CHECKPOINT_IGNORE, trusted_content

FileStat = tuple[int, int, int] | None
"""A file's identity, size and time (None: there is none)."""


def write_excludes(root: Path, directory: Path) -> bool:
    """Write the shadow repository's `info/exclude`: the worktrees' folder and what `.code-puppy/checkpointignore`
    says, kept in step with it while the user trusts its content (a repository's could switch checkpoints off);
    whether that applies."""
    try:
        content = (root / CHECKPOINT_IGNORE).read_bytes()
    except OSError:
        content = b""
    applied = content if content and trusted_content(root, CHECKPOINT_IGNORE, content) else b""
    # Worktrees are projects of their own, with their own checkpoints.
    wanted = f"/{WORKTREES_DIR}/\n".encode() + applied
    exclude = directory / "info" / "exclude"
    current = exclude.read_bytes() if exclude.is_file() else b""
    if current != wanted:
        exclude.parent.mkdir(exist_ok=True)
        exclude.write_bytes(wanted)
    return bool(applied)


def ignore_files(root: Path) -> tuple[FileStat, ...]:
    """The ignore files a folder watch may not see: the user's global one, which git reads even with its
    configuration shut out (`core.excludesFile`'s default), and `.code-puppy/checkpointignore`, in a folder `.gitignore`
    may leave out; each one's identity, size and time (None: there is none)."""
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    found: list[FileStat] = []
    for path in (os.path.join(config, "git", "ignore"), root / CHECKPOINT_IGNORE):
        try:
            stat = os.stat(path)
        except OSError:
            found.append(None)
        else:
            found.append((stat.st_ino, stat.st_size, stat.st_mtime_ns))
    return tuple(found)


def covered(path: str, excluded: Iterable[str]) -> bool:
    return any(path == item or (item.endswith("/") and path.startswith(item)) for item in excluded)
