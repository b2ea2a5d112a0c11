"""Writing a project file as `ProjectFileSystemToolset.open_write` hands it to the harness: opened through its folder's
descriptor without following a link (`open_for_write`), replaced whole by a synced temporary file renamed over it with
its mode (`AtomicReplacement`), or handed to the editor that holds it (`EditorWrite`)."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import stat
from collections.abc import Callable
from types import TracebackType
from typing import Any, BinaryIO

from pydantic_ai.exceptions import ModelRetry

FILE_FLAGS = os.O_NONBLOCK | os.O_NOFOLLOW
"""As the harness opens a file: a FIFO swapped in does not stall the open, a link swapped in is not followed."""


def open_for_write(folder: int, name: str, path: str, *, read_back: bool, create: bool) -> tuple[int, bool]:
    """Open `name` in `folder` for writing without truncating it, as the harness does by name: the descriptor, and
    whether this open created the file."""
    flags = (os.O_RDWR if read_back else os.O_WRONLY) | FILE_FLAGS
    try:
        if not create:
            return os.open(name, flags, dir_fd=folder), False
        # The file can go between the exclusive create finding it and the plain open: try both again, a few times.
        for _ in range(3):
            with contextlib.suppress(FileExistsError):
                return os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=folder), True
            with contextlib.suppress(FileNotFoundError):
                return os.open(name, flags, dir_fd=folder), False
        raise ModelRetry(f"Path {path!r} changed repeatedly while opening. Retry the write.")
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ModelRetry(f"Path {path!r} changed to a symlink before opening.") from error
        if error.errno in (errno.EISDIR, errno.ENODEV, errno.ENXIO):
            raise ModelRetry(f"Path {path!r} exists and is not a regular file.") from error
        raise


class EditorWrite(io.BytesIO):
    """The stream `open_write` hands the harness for an editor's file: it holds the file as the editor has it (for
    the harness's hash check), and what the harness writes goes to the editor when the block ends cleanly."""

    def __init__(self, current: bytes, commit: Callable[[str], None]) -> None:
        super().__init__(current)
        self._commit = commit

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if exc_type is None:
            self._commit(self.getvalue().decode("utf-8"))
        super().__exit__(exc_type, exc, traceback)


class AtomicReplacement(io.BufferedIOBase):
    """The stream `open_write` hands the harness: reads come from the file as it is (for the harness's hash check),
    writes go to a temporary file in the file's folder, and a clean close renames that over the file with the file's
    mode. Both go through the folder's descriptor, which this stream owns.

    The harness rewinds, truncates, then writes the whole new content, all inside `with`; whatever was written
    replaces the file when that block ends cleanly. Any other ending (a stale hash, a full disk, a plain `close`)
    removes the temporary file and leaves the original alone.
    """

    def __init__(self, current: BinaryIO, folder: int, name: str) -> None:
        super().__init__()
        self._current = current
        self._folder = folder
        self._name = name
        self._temporary: tuple[int, str] | None = None

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int | None = -1, /) -> bytes:
        return self._current.read(-1 if size is None else size)

    def seek(self, offset: int, whence: int = os.SEEK_SET, /) -> int:
        return self._current.seek(offset, whence)

    def truncate(self, size: int | None = None, /) -> int:
        return 0  # the new content starts empty; the file itself changes only when the block ends

    def write(self, data: Any, /) -> int:
        if self._temporary is None:
            self._temporary = temporary_file(self._folder, self._name)
        view = memoryview(data).cast("B")
        while view:
            view = view[os.write(self._temporary[0], view) :]
        return len(data)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        try:
            if exc_type is None and self._temporary is not None:
                self._replace(*self._temporary)
        finally:
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._temporary is not None:
                descriptor, name = self._temporary
                os.close(descriptor)
                with contextlib.suppress(FileNotFoundError):  # renamed over the file already
                    os.unlink(name, dir_fd=self._folder)
        finally:
            os.close(self._folder)
            self._current.close()
            super().close()

    def _replace(self, descriptor: int, name: str) -> None:
        current = os.fstat(self._current.fileno())
        os.fchmod(descriptor, stat.S_IMODE(current.st_mode))
        if (current.st_uid, current.st_gid) != (os.geteuid(), os.getegid()):
            # Root editing someone's file keeps it theirs; anyone else keeps what ownership they may.
            with contextlib.suppress(PermissionError):
                os.fchown(descriptor, current.st_uid, current.st_gid)
        os.fsync(descriptor)
        os.replace(name, self._name, src_dir_fd=self._folder, dst_dir_fd=self._folder)
        os.fsync(self._folder)  # the rename is durable once the folder's entry is


def temporary_file(folder: int, name: str) -> tuple[int, str]:
    """A new file in `folder` named after `name`, hidden, private, and never one that was already there."""
    while True:
        temporary = f".{name}.{secrets.token_hex(4)}.tmp"
        with contextlib.suppress(FileExistsError):
            return os.open(
                temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder
            ), temporary
