"""`Watcher`: inotify on the folders a snapshot covers, so a snapshot can be known to still hold without a walk (Linux).

A snapshot's `git status` walk tells what changed since the one before; the snapshot before a tool call is there only
to tell the user's edits (made while the model thought) from the call's. When no event came from any folder the
snapshot covers since just before its walk started, nothing it covers changed, and the latest snapshot is still the
project's state. `ShadowRepo` asks `token` before each walk and `clean` when it would reuse one; every doubt (an event,
a lost event, a folder not watched yet, a failure) answers "walk".

What a directory watch cannot see, and so is left to the walk after the call (which always runs): a write through a
shared memory mapping, a write to a project file through a hard link outside the project, and changes made by another
machine on a network filesystem (only local filesystems are watched: `_LOCAL`).

Events from folders the snapshot does not cover (`.git`, folders ignored as a whole, the worktrees' folder) are never
asked for: they are not watched. Adding a watch fails when the user's limit (`fs.inotify.max_user_watches`) is reached
or a folder cannot be read: the watcher is then off for the process (a debug log), and every snapshot walks, as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import struct
import sys
import weakref
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

MAX_WATCHES: int | None = None
"""A limit of our own on the watches (None: the kernel's alone); a test's seam for `max_user_watches`."""
NEW_FOLDERS_AT_ONCE = 2000
"""Folders a drain adds watches for before it gives up on them and leaves them to the walk and the next `sync` (a
first `npm install` makes a `node_modules` git ignores as a whole: watched for one walk at most)."""

_IN_MODIFY = 0x2
_IN_ATTRIB = 0x4
_IN_CLOSE_WRITE = 0x8
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_UNMOUNT = 0x2000
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_IN_ISDIR = 0x40000000
_MASK = (
    _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_CREATE | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO
    | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR | _IN_DONT_FOLLOW
)  # fmt: skip
_HEADER = struct.Struct("iIII")
"""`struct inotify_event`: wd, mask, cookie, len; then `len` bytes of name."""
_LOCAL = frozenset(
    {
        0xEF53,  # ext2/3/4
        0x58465342,  # xfs
        0x9123683E,  # btrfs
        0x01021994,  # tmpfs
        0xF2F52010,  # f2fs
        0x2FC12FC1,  # zfs
        0x794C7630,  # overlayfs
        0xCA451A4E,  # bcachefs
        0x858458F6,  # ramfs
        0x3153464A,  # jfs
        0x52654973,  # reiserfs
    }
)
"""`statfs` types of local filesystems, where every change to a file goes through this kernel and so raises an event
(not NFS, SMB, FUSE, 9p, ...)."""


class _Libc:
    def __init__(self) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self.init1 = libc.inotify_init1
        self.init1.argtypes = [ctypes.c_int]
        self.add_watch = libc.inotify_add_watch
        self.add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self.rm_watch = libc.inotify_rm_watch
        self.rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        self.statfs = libc.statfs
        self.statfs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]


_libc: _Libc | None = None


def _load() -> _Libc | None:
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        try:
            _libc = _Libc()
        except (OSError, AttributeError) as exc:
            log.debug("no inotify: %s", exc)
    return _libc


class Watcher:
    """inotify watches on every folder under `root` but `skip` (see the module docstring). Not thread-safe: its
    `ShadowRepo` uses it under its lock."""

    def __init__(self, root: Path, libc: _Libc, descriptor: int) -> None:
        self.root = root
        self._libc = libc
        self._fd = descriptor
        self._close = weakref.finalize(self, os.close, descriptor)
        self.healthy = True
        """False once anything failed: off for good (every snapshot walks)."""
        self.events = 0
        """Events read so far (and lost ones: an overflow counts as one)."""
        self._paths: dict[int, str] = {}
        """Each watch's folder (project-relative, "" for the root)."""
        self._watched: dict[str, int] = {}
        self._skip: frozenset[str] = frozenset()
        self._stale = True
        """Some folder may not be watched, or a watch's path is out of date (a folder moved): `sync` before the next
        walk can count."""
        self._devices: dict[int, bool] = {}

    @classmethod
    def start(cls, root: Path, skip: Iterable[str]) -> Watcher | None:
        """Watch `root` but the folders `skip` names (project-relative, no trailing slash); None where inotify is not
        there or cannot watch it all."""
        libc = _load()
        if libc is None:
            return None
        descriptor = libc.init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if descriptor < 0:
            log.debug("inotify_init1 failed: %s", os.strerror(ctypes.get_errno()))
            return None
        watcher = cls(root, libc, descriptor)
        watcher.sync(skip)
        if not watcher.healthy:
            watcher.close()
            return None
        return watcher

    def close(self) -> None:
        self.healthy = False
        self._close()

    def token(self) -> int | None:
        """Before a walk: read what came, and add watches for new folders; the count of events the walk is known from
        (`clean` later), or None when the walk is not (a folder may be unwatched, or the watcher is off)."""
        self._drain()
        return self.events if self.healthy and not self._stale else None

    def clean(self, token: int) -> bool:
        """Nothing changed in the covered folders since the walk `token` was taken for began."""
        self._drain()
        return self.healthy and not self._stale and self.events == token

    def needs_sync(self, skip: Iterable[str]) -> bool:
        """After a walk: the folders it left out are not those left out of the watches (or a folder is not watched)."""
        return self._stale or frozenset(skip) != self._skip

    def sync(self, skip: Iterable[str]) -> None:
        """Watch every folder under the root but `skip` and `.git` folders, and no other; each folder is watched
        before it is listed, so a subfolder made meanwhile raises an event."""
        self._skip = frozenset(skip)
        self._stale = False
        old = self._paths
        self._paths, self._watched = {}, {}
        if not self._add("", syncing=True):
            self._fail("cannot watch the project's root")
        pending = self._subfolders("")
        while pending and self.healthy:
            folder = pending.pop()
            if self._add(folder, syncing=True):
                pending.extend(self._subfolders(folder))
        for wd in set(old) - set(self._paths):
            self._libc.rm_watch(self._fd, wd)  # its IN_IGNORED is not counted

    def _skipped(self, folder: str) -> bool:
        name = folder.rpartition("/")[2]
        return name == ".git" or folder in self._skip or any(folder.startswith(f"{item}/") for item in self._skip)

    def _subfolders(self, folder: str) -> list[str]:
        found: list[str] = []
        try:
            with os.scandir(self.root / folder if folder else self.root) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        path = f"{folder}/{entry.name}" if folder else entry.name
                        if not self._skipped(path):
                            found.append(path)
        except (FileNotFoundError, NotADirectoryError):
            pass  # gone since: its parent's event says so
        except OSError as exc:
            self._fail(f"cannot list {folder or '.'}: {exc.strerror}")
        return found

    def _add(self, folder: str, *, syncing: bool = False) -> bool:
        """Watch `folder`; False when it is gone (its parent's event tells), watched under another path, or the watcher
        failed."""
        if not self.healthy:
            return False
        if MAX_WATCHES is not None and folder not in self._watched and len(self._watched) >= MAX_WATCHES:
            self._fail("the watch limit is reached")
            return False
        path = self.root / folder if folder else self.root
        encoded = os.fsencode(path)
        try:
            device = os.lstat(encoded).st_dev
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as exc:
            self._fail(f"cannot stat {folder or '.'}: {exc.strerror}")
            return False
        if not self._local(device, encoded):
            self._fail(f"{folder or '.'} is not on a local filesystem")
            return False
        wd = self._libc.add_watch(self._fd, encoded, _MASK)
        if wd < 0:
            number = ctypes.get_errno()
            if number in (errno.ENOENT, errno.ENOTDIR):
                return False
            self._fail(f"cannot watch {folder or '.'}: {os.strerror(number)}")
            return False
        known = self._paths.get(wd)
        if known is not None and known != folder:
            if syncing:  # the same folder under two paths (a bind mount): events would name the wrong one
                self._fail(f"{folder} and {known} are one folder")
            else:  # a folder moved in from elsewhere in the project: its path is in doubt until the next sync
                self._stale = True
            return False
        self._paths[wd] = folder
        self._watched[folder] = wd
        return True

    def _local(self, device: int, path: bytes) -> bool:
        if device not in self._devices:
            buffer = ctypes.create_string_buffer(512)
            if self._libc.statfs(path, buffer) != 0:
                return False
            kind = ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF
            self._devices[device] = kind in _LOCAL
        return self._devices[device]

    def _fail(self, reason: str) -> None:
        if self.healthy:
            log.debug("checkpoints: folder watching is off: %s", reason)
        self.healthy = False
        self._close()

    def _drain(self) -> None:
        """Read every event there is: each counts, and a new folder is watched (with what it holds) at once."""
        added = 0
        while self.healthy:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return
            except OSError as exc:
                self._fail(f"cannot read events: {exc.strerror}")
                return
            position = 0
            while position + _HEADER.size <= len(data):
                wd, mask, _, length = _HEADER.unpack_from(data, position)
                name = data[position + _HEADER.size : position + _HEADER.size + length].rstrip(b"\0")
                position += _HEADER.size + length
                if mask & _IN_IGNORED:
                    folder = self._paths.pop(wd, None)
                    if folder is not None and self._watched.get(folder) == wd:
                        del self._watched[folder]
                    continue
                self.events += 1
                if mask & (_IN_Q_OVERFLOW | _IN_MOVE_SELF | _IN_UNMOUNT) or (
                    mask & _IN_MOVED_FROM and mask & _IN_ISDIR
                ):
                    self._stale = True  # a folder may be unwatched, or watched under a path it left
                elif mask & (_IN_CREATE | _IN_MOVED_TO) and mask & _IN_ISDIR and not self._stale:
                    parent = self._paths.get(wd)
                    if parent is None:
                        self._stale = True
                        continue
                    child = os.fsdecode(name)
                    folder = f"{parent}/{child}" if parent else child
                    if not self._skipped(folder):
                        added = self._add_tree(folder, added)

    def _add_tree(self, top: str, added: int) -> int:
        pending = [top]
        while pending and self.healthy and not self._stale:
            if added >= NEW_FOLDERS_AT_ONCE:
                self._stale = True
                break
            folder = pending.pop()
            added += 1
            if self._add(folder):
                pending.extend(self._subfolders(folder))
        return added
