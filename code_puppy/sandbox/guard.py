"""`ProtectedFiles`: under Landlock, the project's agent and git configuration put back after a command changed it.

Landlock cannot refuse writes under a folder it allows, so `.code-puppy/`, `.git/hooks` and the rest of
`READ_ONLY_IN_PROJECT` are writable by a command in the project. Their state is taken just before a foreground command
and restored just after it: a planted hook or a loosened config does not outlive the command that wrote it. (A
background command that changes them later is not caught; bwrap's read-only binds are.)
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from code_puppy.sandbox import READ_ONLY_IN_PROJECT

Entry = tuple[int, bytes] | str | None
"""A file's mode and content, a symlink's target, or None for a folder."""


@dataclass(frozen=True)
class ProtectedFiles:
    root: Path
    saved: dict[Path, Entry]

    @classmethod
    def snapshot(cls, root: Path) -> ProtectedFiles:
        return cls(root, _state(root))

    def restore(self) -> list[str]:
        """Put back what changed since the snapshot; the project-relative paths that had changed."""
        now = _state(self.root)
        changed = sorted({path for path in (*self.saved, *now) if self.saved.get(path, 0) != now.get(path, 0)})
        for path in sorted((path for path in changed if path in now), reverse=True):  # children before parents
            _remove(path)
        for path in sorted(path for path in changed if path in self.saved):  # parents before children
            entry = self.saved[path]
            path.parent.mkdir(parents=True, exist_ok=True)
            if entry is None:
                path.mkdir(exist_ok=True)
            elif isinstance(entry, str):
                path.symlink_to(entry)
            else:
                path.write_bytes(entry[1])
                path.chmod(entry[0])
        return [path.relative_to(self.root).as_posix() for path in changed]


def _state(root: Path) -> dict[Path, Entry]:
    state: dict[Path, Entry] = {}
    for name in READ_ONLY_IN_PROJECT:
        _read(root / name, state)
    return state


def _read(path: Path, state: dict[Path, Entry]) -> None:
    try:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            state[path] = os.readlink(path)
        elif stat.S_ISDIR(mode):
            state[path] = None
            for child in path.iterdir():
                _read(child, state)
        elif stat.S_ISREG(mode):
            state[path] = (stat.S_IMODE(mode), path.read_bytes())
    except OSError:
        return


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        return
