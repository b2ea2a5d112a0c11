"""`ProtectedFiles`: the project's agent and git configuration put back after a sandboxed command changed it.

Neither mechanism can keep all of it read-only: Landlock cannot refuse writes under a folder it allows, and bwrap can
only bind what exists (a `.code-puppy/` or `.git/commondir` created by a command would survive). So the state of
`Sandbox.guarded` is taken just before each foreground command and restored just after it: a planted hook or a
loosened config does not outlive the command that wrote it. What is put back is first copied to a folder in the
data directory, so an edit the user made meanwhile is never lost. (A background command that changes them later is
not caught.)
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from code_puppy.paths import WORKTREES_DIR, data_dir

Entry = tuple[int, bytes] | str | None
"""A file's mode and content, a symlink's target, or None for a folder."""


@dataclass(frozen=True)
class ProtectedFiles:
    root: Path
    """Paths are named relative to it in what the model and the user are told."""
    saved: dict[Path, Entry]
    paths: tuple[Path, ...]

    @classmethod
    def snapshot(cls, root: Path, paths: Sequence[Path]) -> ProtectedFiles:
        return cls(root, _state(paths, root / WORKTREES_DIR), tuple(paths))

    def restore(self) -> str | None:
        """Put back what changed since the snapshot; what to tell about it, or None when nothing changed."""
        now = _state(self.paths, self.root / WORKTREES_DIR)
        changed = sorted({path for path in (*self.saved, *now) if self.saved.get(path, 0) != now.get(path, 0)})
        if not changed:
            return None
        backup = data_dir() / "sandbox-put-back" / time.strftime("%Y%m%d-%H%M%S")
        failed: list[str] = []
        for path in changed:
            if path in now and now[path] is not None:  # a folder's files are copied one by one
                _copy_aside(path, backup / self._name(path))
        for path in sorted((path for path in changed if path in now), reverse=True):  # children before parents
            if not _remove(path):
                failed.append(self._name(path))
        for path in sorted(path for path in changed if path in self.saved):  # parents before children
            try:
                _put(path, self.saved[path])
            except OSError as exc:
                failed.append(f"{self._name(path)} ({exc.strerror})")
        names = ", ".join(self._name(path) for path in changed)
        note = (
            f"The sandbox put back {names}: commands may not change the files that configure code-puppy, other "
            f"agents or git. The changed versions are in {backup}."
        )
        return note + (f" It could not put back: {', '.join(failed)}." if failed else "")

    def _name(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix() if path.is_relative_to(self.root) else str(path)


def _state(paths: Sequence[Path], worktrees: Path) -> dict[Path, Entry]:
    """The entries under `paths`, but for the `worktrees` folder: other agents' checkouts, which change as they work
    and are no more this project's to put back than to read whole before every command."""
    state: dict[Path, Entry] = {}
    for path in paths:
        _read(path, state, worktrees)
    return state


def _read(path: Path, state: dict[Path, Entry], worktrees: Path) -> None:
    if path == worktrees:
        return
    try:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            state[path] = os.readlink(path)
        elif stat.S_ISDIR(mode):
            state[path] = None
            for child in path.iterdir():
                _read(child, state, worktrees)
        elif stat.S_ISREG(mode):
            state[path] = (stat.S_IMODE(mode), path.read_bytes())
    except OSError:
        return


def _copy_aside(path: Path, target: Path) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target, follow_symlinks=False)
    except OSError:
        return  # put back anyway: what the command wrote is not worth keeping the hook for


def _remove(path: Path) -> bool:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _put(path: Path, entry: Entry) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if entry is None:
        path.mkdir(exist_ok=True)
    elif isinstance(entry, str):
        path.symlink_to(entry)
    else:
        path.write_bytes(entry[1])
        path.chmod(entry[0])
