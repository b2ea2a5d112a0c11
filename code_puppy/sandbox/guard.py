"""`ProtectedFiles`: the project's agent and git configuration put back after a sandboxed command changed it.

Neither mechanism can keep all of it read-only: Landlock cannot refuse writes under a folder it allows, and bwrap can
only bind what exists (a `.code-puppy/` or `.git/commondir` created by a command would survive). So the state of
`Sandbox.guarded` is taken just before a foreground command and restored just after it: a planted hook or a loosened
config does not outlive the command that wrote it. What is put back is first copied to a folder in the data directory,
so an edit the user made meanwhile is never lost. (A background command that changes them later is caught by the next
foreground command's put-back only if it wrote before that command began.)

The put-back runs outside the sandbox, so it must not be led anywhere by what the command left behind: every file is
reached from a folder descriptor opened when the guard was made, one name at a time, and no symbolic link is ever
followed. A folder holding guarded files (`.git`) that a command renamed or replaced by a link is moved back first;
the descriptor follows the folder wherever it went.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from code_puppy.paths import WORKTREES_DIR, data_dir

Entry = tuple[int, bytes] | str | int | None
"""A file's mode and content, a symlink's target, another kind of file's mode (a FIFO, a socket), or None for a
folder."""
State = dict[Path, Entry]
_ABSENT = object()
_DIRECTORY = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_Action = Callable[[int, str], None]
"""Something done to the entry NAME of the folder FD."""


@dataclass
class _Anchor:
    """A folder that holds guarded paths, held open so that it can be found wherever a command moves it."""

    path: Path
    fd: int
    parent: int
    """The folder it was in when the guard was made."""


class ProtectedFiles:
    """The guarded paths of one sandbox, reached through folder descriptors opened once; `close` releases them."""

    def __init__(self, root: Path, paths: Sequence[Path]) -> None:
        self.root = root
        """Paths are named relative to it in what the model and the user are told."""
        self.paths = tuple(paths)
        self._skip = root / WORKTREES_DIR
        self._anchors: dict[Path, _Anchor] = {}
        self._notes: list[str] = []
        """What was put right while taking a snapshot, told with the next put-back."""
        self._folders = sorted({path.parent for path in self.paths}, key=lambda path: len(path.parts))
        self._open_anchors()

    def close(self) -> None:
        for anchor in self._anchors.values():
            os.close(anchor.fd)
            os.close(anchor.parent)
        self._anchors.clear()

    def snapshot(self) -> State:
        """The guarded entries as they are now (a folder moved away since the last put-back is moved back first)."""
        self._notes += self._reinstate()
        self._open_anchors()
        return self._state()

    def restore(self, saved: State) -> str | None:
        """Put back what changed since `saved`; what to tell about it, or None when nothing changed."""
        notes, self._notes = [*self._notes, *self._reinstate()], []
        now = self._state()
        changed = sorted(path for path in {*saved, *now} if saved.get(path, _ABSENT) != now.get(path, _ABSENT))
        if not changed:
            return " ".join(notes) or None
        backup = _backup()
        for path in changed:
            if path in now and backup is not None:
                _write_aside(backup / self._name(path), now[path])
        failed: list[str] = []
        for path in sorted((path for path in changed if path in now), reverse=True):  # children before parents
            try:
                self._at(path, _remove)
            except OSError as exc:
                failed.append(f"{self._name(path)} ({exc.strerror})")
        for path in sorted(path for path in changed if path in saved):  # parents before children
            try:
                self._at(path, lambda folder, name, entry=saved[path]: _put(folder, name, entry))
            except OSError as exc:
                failed.append(f"{self._name(path)} ({exc.strerror})")
        names = ", ".join(self._name(path) for path in changed)
        notes.append(
            f"The sandbox put back {names}: commands may not change the files that configure code-puppy, other agents "
            f"or git. {_kept(backup)}"
        )
        return " ".join(notes) + (f" It could not put back: {', '.join(failed)}." if failed else "")

    def _name(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix() if path.is_relative_to(self.root) else str(path)

    def _open_anchors(self) -> None:
        """Open the folders holding guarded paths that are not open yet (a `.git` made by `git init` since)."""
        for folder in self._folders:
            if folder not in self._anchors:
                with contextlib.suppress(OSError):  # not there (or not a folder): nothing to put back there either
                    parent = _walk(os.open("/", _DIRECTORY), folder.parent.parts[1:])
                    try:
                        self._anchors[folder] = _Anchor(folder, os.open(folder.name, _DIRECTORY, dir_fd=parent), parent)
                    except OSError:
                        os.close(parent)

    def _reinstate(self) -> list[str]:
        """Move back each anchor folder a command renamed (and what took its place aside); what to tell."""
        notes: list[str] = []
        for anchor in self._anchors.values():
            held = os.fstat(anchor.fd)
            try:
                there = os.stat(anchor.path.name, dir_fd=anchor.parent, follow_symlinks=False)
            except FileNotFoundError:
                there = None
            if there is not None and (there.st_dev, there.st_ino) == (held.st_dev, held.st_ino):
                continue
            where = os.readlink(f"/proc/self/fd/{anchor.fd}")
            if held.st_nlink == 0 or where.endswith(" (deleted)"):
                # Removed, not moved: nothing to move back; a folder made in its place is guarded from here on (a
                # link is not: nothing is read or written through the removed folder's descriptor).
                with contextlib.suppress(OSError):
                    fresh = os.open(anchor.path.name, _DIRECTORY, dir_fd=anchor.parent)
                    os.close(anchor.fd)
                    anchor.fd = fresh
                continue
            name = self._name(anchor.path)
            try:
                if there is not None:
                    impostor: State = {}
                    _read(anchor.parent, anchor.path.name, anchor.path, impostor, self._skip)
                    if (backup := _backup()) is not None:
                        for path, entry in sorted(impostor.items()):
                            _write_aside(backup / self._name(path), entry)
                    _remove(anchor.parent, anchor.path.name)
                    notes.append(f"A command replaced {name}. {_kept(backup)}")
                current = os.open("..", _DIRECTORY, dir_fd=anchor.fd)
                try:
                    moved = os.stat(Path(where).name, dir_fd=current, follow_symlinks=False)
                    if (moved.st_dev, moved.st_ino) != (held.st_dev, held.st_ino):
                        raise FileNotFoundError(2, "moved again")
                    os.rename(Path(where).name, anchor.path.name, src_dir_fd=current, dst_dir_fd=anchor.parent)
                finally:
                    os.close(current)
                notes.append(f"The sandbox moved {name} back from {where}: commands may not rename it.")
            except OSError as exc:
                notes.append(f"{name} was moved to {where} and could not be moved back ({exc.strerror}).")
        return notes

    def _state(self) -> State:
        """The entries under the guarded paths, but for the `worktrees` folder: other agents' checkouts, which change
        as they work and are no more this project's to put back than to read whole before every command."""
        state: State = {}
        for path in self.paths:
            if (anchor := self._anchors.get(path.parent)) is not None:
                with contextlib.suppress(OSError):
                    _read(anchor.fd, path.name, path, state, self._skip)
        return state

    def _at(self, path: Path, action: _Action) -> None:
        """`action(folder, name)` on `path`, its folder reached from its guarded path's anchor without links."""
        for guarded in self.paths:
            if (guarded == path or guarded in path.parents) and (anchor := self._anchors.get(guarded.parent)):
                folder = _walk(os.dup(anchor.fd), path.relative_to(anchor.path).parts[:-1])
                try:
                    return action(folder, path.name)
                finally:
                    os.close(folder)
        raise FileNotFoundError(2, "not guarded")


def _backup() -> Path | None:
    """A new folder for what one put-back removes; None when none can be made (a full disk): the put-back goes on."""
    folder = data_dir() / "sandbox-put-back"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=folder))
    except OSError:
        return None


def _kept(backup: Path | None) -> str:
    if backup is None:
        return f"The changed versions could not be kept ({data_dir() / 'sandbox-put-back'} cannot be written)."
    return f"The changed versions are in {backup}."


def _walk(fd: int, names: Sequence[str]) -> int:
    """The folder `names` below the folder `fd` (which it closes), reached without following a link."""
    try:
        for name in names:
            following = os.open(name, _DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = following
    except OSError:
        os.close(fd)
        raise
    return fd


def _read(folder: int, name: str, path: Path, state: State, skip: Path) -> None:
    if path == skip:
        return
    info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode):
        state[path] = os.readlink(name, dir_fd=folder)
    elif stat.S_ISDIR(info.st_mode):
        state[path] = None
        inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
        try:
            for child in os.listdir(inner):
                with contextlib.suppress(OSError):  # gone meanwhile
                    _read(inner, child, path / child, state, skip)
        finally:
            os.close(inner)
    elif stat.S_ISREG(info.st_mode):
        # Not blocking: a FIFO put in the file's place between the stat and the open must not hang the put-back.
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
        with os.fdopen(fd, "rb") as source:
            opened = os.fstat(fd).st_mode
            state[path] = (stat.S_IMODE(opened), source.read()) if stat.S_ISREG(opened) else stat.S_IFMT(opened)
    else:
        state[path] = stat.S_IFMT(info.st_mode)


def _write_aside(target: Path, entry: Entry) -> None:
    """Keep an entry a put-back removes, in the backup folder (a special file is only named by its absence)."""
    with contextlib.suppress(OSError):  # put back anyway: what the command wrote is not worth keeping the hook for
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry is None:
            target.mkdir(exist_ok=True)
        elif isinstance(entry, str):
            target.symlink_to(entry)
        elif isinstance(entry, tuple):
            target.write_bytes(entry[1])


def _remove(folder: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
            shutil.rmtree(name, dir_fd=folder)  # the descriptor-based walk, which never follows a link
        else:
            os.unlink(name, dir_fd=folder)


def _put(folder: int, name: str, entry: Entry) -> None:
    if entry is None:
        os.mkdir(name, dir_fd=folder)
    elif isinstance(entry, str):
        os.symlink(entry, name, dir_fd=folder)
    elif isinstance(entry, int):
        raise OSError(0, "not a regular file")
    else:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
        with os.fdopen(fd, "wb") as target:
            target.write(entry[1])
            os.fchmod(fd, entry[0])
