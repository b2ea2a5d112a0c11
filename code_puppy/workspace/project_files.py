"""`ProjectFileSystem`: the harness file tools, with atomic writes and reads whose memory is bounded.

Writes: the harness truncates a file and writes the new content through the descriptor it opened, so a crash or a
full disk in between leaves half a file, and a file hard-linked to one outside the project changes both. Here the
new content goes to a temporary file beside the target, is synced, and is renamed over the target with its mode:
the file is whole at every moment, old or new, and its other links keep the old content (DESIGN §5: a file with
several hard links is not written through). The harness resolves symlinks before it writes, so a link inside the
project (`CLAUDE.md → AGENTS.md`) stays a link and the file it points to is the one replaced.

Descriptors: the harness checks the resolved path, then opens it by name, so a folder on it swapped for a link to
outside the project in between (a background command can loop on that) would take the write outside. Here every
open, the temporary file, the rename and `create_directory`'s folders go through directory descriptors, reached from
the root's one folder at a time with `O_NOFOLLOW` along the checked path: a link that appears on it makes the call
fail with a retry, and a folder moved meanwhile is still the folder that was checked. A link is followed only by the
harness's resolution, which checks where it leads.

Reads: the harness reads the whole file and holds it several times over (bytes, text, lines), about 1 GB for a
300 MB one-line file, to show at most `max_read_chars` of it. Here the file is streamed once: the lines and the
hash are computed as it passes, and only what the result can show is kept. The result is the harness's, to the
character.

Editors: when the run's deps carry `EditorFiles` (an ACP client that advertised `fs/read_text_file` or
`fs/write_text_file`), `read_file`, `write_file` and `edit_file` read the editor's buffer of the file instead of the
disk (so the model sees unsaved changes) and hand what they write to the editor instead of replacing the file. The
harness reads and writes through `open_read`/`open_write`, which are synchronous, so the call first fetches the buffer
(`call_tool`), and the content written is sent to the editor once the tool returns. Everything else stays: the path
checks, the permission policy around the call, and checkpoints, which snapshot the disk after the call, that is after
the editor answered the write (ACP's `fs/write_text_file` writes the file).

Skills: `read_file` also reads inside `read_roots` (the loaded skills' folders, named absolute or `~/…`), so a
user-level skill's `references/` and scripts can be read; only there outside the project, and only read (the
write tools still refuse every path outside the project, and the policy denies them first).

`ProjectFileSystemToolset._read_file`, `_create_directory`, `_resolve_path`, `_resolve_walk_entry` and `call_tool` are
the places that use private members of the harness toolset (its read and create entry points, path resolution, the
walk of `grep` and `list_files`, header and budget): the harness offers no public hook for reading, for making a
folder or for leaving a file out of a walk but its glob patterns, which cannot say Claude Code's gitignore rules.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import hashlib
import io
import itertools
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, cast

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.toolsets import FilteredToolset, ToolsetTool
from pydantic_ai_harness.filesystem import (
    READ_ONLY_TOOL_NAMES,
    DirectoryCreatedEvent,
    FileChangeRequestEvent,
    FileReadEvent,
    FileSystem,
    FileSystemToolset,
)

from code_puppy.run.deps import EditorFiles, deps_of
from code_puppy.tools import EDITOR_TOOLS
from code_puppy.workspace.file_writes import FILE_FLAGS, AtomicReplacement, EditorWrite, open_for_write

READ_CHUNK_BYTES = 1 << 20
"""Bytes read at a time; at least the 8 KiB the harness looks at to tell a binary file."""
BINARY_SAMPLE_BYTES = 8192
"""A NUL byte in this many leading bytes makes a file binary, as the harness decides."""
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""The characters `str.splitlines` ends a line on, which is how the harness counts and numbers lines."""
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
"""How each folder on a path is opened: a link where a folder was checked fails the open instead of being followed."""


@dataclass
class ProjectFileSystem(FileSystem[Any]):
    """The harness file tools with atomic writes and bounded reads, built once: the toolset holds only configuration,
    and building it (a JSON schema per tool, reading docstrings from source) costs ~50 ms that pydantic-ai would
    otherwise pay again on every run."""

    read_roots: tuple[Path, ...] = ()
    """Folders outside the project `read_file` may read too (the skills' folders); nothing there is written."""
    hidden: Callable[[Path], bool] | None = None
    """Files `grep` and `list_files` leave out as they walk a folder (what the permission rules deny reading), so a
    search of the folder above a denied file does not show its lines."""
    _toolset: Any = field(default=None, init=False, repr=False, compare=False)

    def get_toolset(self) -> Any:
        if self._toolset is None:
            toolset = ProjectFileSystemToolset(
                read_roots=self.read_roots,
                hidden=self.hidden,
                root_dir=Path(self.root_dir),
                allowed_patterns=self.allowed_patterns,
                denied_patterns=self.denied_patterns,
                protected_patterns=self.protected_patterns,
                max_read_lines=self.max_read_lines,
                max_read_chars=self.max_read_chars,
                max_list_results=self.max_list_results,
                max_search_results=self.max_search_results,
                max_find_results=self.max_find_results,
                id=self.id or "file_system",
                cwd=None if self.cwd is None else Path(self.cwd),
                content_hashes=self.content_hashes,
                tools=self.tools,
            )
            self._toolset = (
                FilteredToolset(toolset, lambda ctx, tool: tool.name in READ_ONLY_TOOL_NAMES)
                if self.read_only
                else toolset
            )
        return self._toolset


@dataclass
class _EditorCall:
    """One file tool call going through the editor: the buffer it read, what it wrote."""

    files: EditorFiles
    buffers: dict[Path, bytes] = field(default_factory=dict[Path, bytes])
    written: dict[Path, str] = field(default_factory=dict[Path, str])


_editor_call: ContextVar[_EditorCall | None] = ContextVar("code_puppy_editor_call", default=None)
"""The editor call running in this task (parallel tool calls run in tasks of their own)."""


class ProjectFileSystemToolset(FileSystemToolset[Any]):
    """The harness file toolset: `write_file` and `edit_file` replace files atomically, `read_file` streams; the
    three go through the run's editor when it has one; every open goes through folder descriptors."""

    def __init__(
        self, *, read_roots: tuple[Path, ...] = (), hidden: Callable[[Path], bool] | None = None, **options: Any
    ) -> None:
        super().__init__(**options)
        self._read_roots = tuple(Path(os.path.realpath(root)) for root in read_roots)
        self._hidden = hidden
        for tool in self.tools.values():
            tool.args_validator = _refuse_nul_paths

    def _resolve_walk_entry(self, entry: Path) -> Path | None:
        target = super()._resolve_walk_entry(entry)
        return None if target is None or (self._hidden is not None and self._hidden(target)) else target

    def _outside_read(self, path: str) -> tuple[Path, Path] | None:
        """`path` resolved, with the read root it lies in, when it lies outside the project in one of the folders
        `read_file` may read there (a skill's, named `~/…` or absolute); else None, and the harness decides."""
        if not self._read_roots:
            return None
        real = Path(os.path.realpath(self._cwd / path))
        if real.is_relative_to(self._real_root):
            return None
        root = next((root for root in self._read_roots if real.is_relative_to(root)), None)
        return None if root is None else (real, root)

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        deps = deps_of(ctx)
        files = deps.files if deps is not None else None
        path = tool_args.get("path")
        if files is None or name not in EDITOR_TOOLS or not isinstance(path, str):
            return await super().call_tool(name, tool_args, ctx, tool)
        call = _EditorCall(files)
        # A write is computed from the buffer only when it also goes back to the editor: written to the disk, it
        # would replace the file with an edit of text the disk does not hold.
        if files.reads and (name == "read_file" or files.writes):
            try:
                resolved = self._safe_resolve(path)
            except (OSError, ModelRetry):
                resolved = None  # the tool itself refuses the path, and says why
            if resolved is not None and resolved.is_file() and not self._binary(resolved):
                try:
                    call.buffers[resolved] = (await files.read(resolved)).encode()
                except OSError as error:
                    raise ModelRetry(f"The editor could not read {path!r}: {error}") from error
        token = _editor_call.set(call)
        try:
            result = await super().call_tool(name, tool_args, ctx, tool)
        finally:
            _editor_call.reset(token)
        for resolved, content in call.written.items():
            try:
                await files.write(resolved, content)
            except OSError as error:
                raise ModelRetry(f"The editor did not write {path!r}: {error}") from error
        return result

    def _binary(self, resolved: Path) -> bool:
        """Whether the file on disk is binary, as the harness decides: no editor holds it as text."""
        with self._read_disk(resolved) as source:
            return b"\0" in source.read(BINARY_SAMPLE_BYTES)

    def open_read(self, resolved: Path) -> BinaryIO:
        call = _editor_call.get()
        if call is not None and resolved in call.buffers:
            return io.BytesIO(call.buffers[resolved])
        return self._read_disk(resolved)

    def _read_disk(self, resolved: Path, root: Path | None = None) -> BinaryIO:
        """The file on disk, whatever the editor holds (`root`: the read root it lies in, outside the project)."""
        folder = self._open_folder(resolved.parent, root=root)
        try:
            return os.fdopen(os.open(resolved.name, os.O_RDONLY | FILE_FLAGS, dir_fd=folder), "rb")
        finally:
            os.close(folder)

    def _open_folder(self, folder: Path, *, create: bool = False, root: Path | None = None) -> int:
        """A descriptor of `folder` (resolved and checked), reached from the root (the project's, or `root`) one folder
        at a time without following a link, making the missing ones on the way when `create` is set."""
        start = self._real_root if root is None else root
        descriptor = os.open(start, FOLDER_FLAGS)
        try:
            for name in folder.relative_to(start).parts:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, dir_fd=descriptor)
                child = os.open(name, FOLDER_FLAGS, dir_fd=descriptor)
                os.close(descriptor)
                descriptor = child
        except OSError as error:
            os.close(descriptor)
            if error.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                raise ModelRetry(
                    f"A folder on {self._relative_to_root(folder)!r} was moved, removed or replaced by a link while "
                    "it was opened, so nothing was done. Retry."
                ) from error
            raise
        return descriptor

    def _resolve_path(self, path: str) -> Path:
        try:
            return super()._resolve_path(path)
        except OSError as error:
            if error.errno != errno.EINVAL:
                raise
            # `realpath` found a link and read it after a concurrent swap had made it a folder again.
            raise ModelRetry(f"Path {path!r} changed while it was resolved. Retry.") from error

    def open_write(self, resolved: Path, *, read_back: bool, create: bool) -> tuple[BinaryIO, bool]:
        call = _editor_call.get()
        if call is not None and call.files.writes:
            if not create and not resolved.is_file():
                raise FileNotFoundError(f"File not found: {self._relative_to_root(resolved)}")
            if resolved in call.buffers:
                current = call.buffers[resolved]
            elif resolved.is_file():
                with self._read_disk(resolved) as source:
                    current = source.read()
            else:
                current = b""
            return EditorWrite(current, lambda content: call.written.__setitem__(resolved, content)), (
                not resolved.exists()
            )
        # The checks that matter before anything changes, as the harness's open makes them: a regular file, not a
        # link swapped in, one this process may write (a read-only file is not replaced just because its folder is
        # writable), created exclusively when new.
        path = self._relative_to_root(resolved)
        folder = self._open_folder(resolved.parent)
        try:
            descriptor, created = open_for_write(folder, resolved.name, path, read_back=read_back, create=create)
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                os.close(descriptor)
                raise ModelRetry(f"Path {path!r} exists and is not a regular file.")
        except BaseException:
            os.close(folder)
            raise
        current = os.fdopen(descriptor, "rb+" if read_back else "wb")
        return cast(BinaryIO, AtomicReplacement(current, folder, resolved.name)), created

    async def _create_directory(self, ctx: RunContext[Any] | None, path: str) -> str:
        # The harness's, with the folders made through descriptors: its `mkdir(parents=True)` goes by name.
        try:
            resolved = self._safe_resolve(path, write=True)
            if resolved.is_dir():
                return f"Created directory: {path}"
            if resolved.exists():
                raise ModelRetry(f"Path {path!r} exists and is not a directory.")
            if not next(parent for parent in resolved.parents if parent.exists()).is_dir():
                raise ModelRetry(f"Path {path!r} has a parent that is not a directory.")
            location = self._event_location(resolved)
            if ctx is not None:
                request = FileChangeRequestEvent(**location, operation="create_directory", diff="", truncated=False)
                await ctx.emit(request)
                if request.cancelled:
                    return (
                        f"[{location['path']!r} was not created: {request.cancel_reason or 'cancelled by a listener'}]"
                    )
            os.close(self._open_folder(resolved, create=True))
        except (OSError, ValueError) as error:
            raise _retry(error, path) from error
        if ctx is not None:
            await ctx.emit(DirectoryCreatedEvent(**location))
        return f"Created directory: {path}"

    async def _read_file(
        self, ctx: RunContext[Any] | None, path: str, *, offset: int = 0, limit: int | None = None
    ) -> str:
        if path.startswith("~/"):
            path = str(Path(path).expanduser())  # as the skills' folders are named to the model
        outside = self._outside_read(path)
        try:
            resolved = self._safe_resolve(path) if outside is None else outside[0]
            if not resolved.is_file():
                if resolved.is_dir():
                    raise FileNotFoundError(f"'{path}' is a directory, not a file.")
                raise FileNotFoundError(f"File not found: {path}")
            if offset < 0 or (limit is not None and limit < 0):
                raise ValueError("offset and limit must not be negative.")
            opened = self.open_read(resolved) if outside is None else self._read_disk(resolved, outside[1])
            with opened as source:
                scan = _scan(source, offset, self._max_read_lines if limit is None else limit, self._max_read_chars)
            if scan.binary:
                result = f"[Binary file: {scan.size} bytes. Use a binary-aware tool to inspect.]"
            else:
                header = self._read_header(path, scan.total, scan.content_hash)
                result = header + scan.body(offset, self._body_budget(header))
        except (OSError, ValueError) as error:
            raise _retry(error, path) from error
        if ctx is not None:
            if outside is None:
                await ctx.emit(FileReadEvent(**self._event_location(resolved), content_hash=scan.content_hash))
            else:
                await ctx.emit(
                    FileReadEvent(path=str(resolved), root_dir=str(outside[1]), content_hash=scan.content_hash)
                )
        return result


def _retry(error: OSError | ValueError, path: str) -> ModelRetry:
    """What the model can correct (a missing file, a bad offset) is a retry, as in the harness, named by the path the
    model gave rather than the absolute one."""
    if isinstance(error, OSError) and error.strerror:
        return ModelRetry(f"[Errno {error.errno}] {error.strerror}: {path!r}")
    return ModelRetry(str(error))


def _refuse_nul_paths(ctx: RunContext[Any], **args: Any) -> None:
    """Refuse a path no file can have before anything looks at it (the permission policy resolves it first)."""
    path = args.get("path")
    if isinstance(path, str) and "\0" in path:
        raise ModelRetry(f"Path {path!r} holds a NUL byte, which no file name can hold.")


@dataclass
class _Scan:
    """One pass over a file: its hash, its size if binary, else its line count and the read window's lines."""

    binary: bool = False
    size: int = 0
    content_hash: str = ""
    total: int = 0
    window: list[tuple[str, int]] = field(default_factory=list[tuple[str, int]])
    """(text, length) of the window's lines up to the first past `max_read_chars`; that one's text may be cut."""

    def body(self, offset: int, budget: int | None) -> str:
        """The numbered lines that fit `budget`, then what to read next, as the harness words both."""
        if self.total == 0:
            return "(empty file)\n"
        if offset >= self.total:
            raise ValueError(f"Offset {offset} exceeds file length ({self.total} lines).")
        shown: list[str] = []
        for number, (text, length) in enumerate(self.window, start=offset + 1):
            width = len(f"{number:>6}\t") + length
            if budget is not None and width > budget:
                if not shown:
                    return (
                        f"... (Line {number} is {length:,} characters and does not fit the read window. "
                        f"Use offset={number} to skip it, or a shell byte range to inspect it.)\n"
                    )
                break
            shown.append(f"{number:>6}\t{text}")
            if budget is not None:
                budget -= width
        result = "".join(shown)
        if not result.endswith("\n"):
            result += "\n"
        if (remaining := self.total - offset - len(shown)) > 0:
            result += f"... ({remaining} more lines. Use offset={offset + len(shown)} to continue reading.)\n"
        return result


def _scan(source: BinaryIO, offset: int, limit: int, max_chars: int | None) -> _Scan:
    """Stream `source` once, keeping at most about `max_chars` characters of the lines from `offset` on."""
    chunks = iter(partial(source.read, READ_CHUNK_BYTES), b"")
    first = next(chunks, b"")
    digest = hashlib.sha256()
    if b"\0" in first[:BINARY_SAMPLE_BYTES]:
        scan = _Scan(binary=True)
        for chunk in itertools.chain([first], chunks):
            digest.update(chunk)
            scan.size += len(chunk)
        scan.content_hash = digest.hexdigest()[:12]
        return scan
    # A text file hashes as the harness hashes it: its leniently decoded text, re-encoded.
    scan = _Scan()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def texts() -> Iterator[str]:
        for chunk in itertools.chain([first], chunks):
            text = decoder.decode(chunk)
            digest.update(text.encode("utf-8"))
            yield text
        text = decoder.decode(b"", final=True)
        digest.update(text.encode("utf-8"))
        yield text

    kept = 0
    for index, (text, length) in enumerate(_lines(texts(), max_chars)):
        scan.total += 1
        if offset <= index < offset + limit and (max_chars is None or kept <= max_chars):
            scan.window.append((text, length))
            kept += len(f"{index + 1:>6}\t") + length
    scan.content_hash = digest.hexdigest()[:12]
    return scan


def _lines(texts: Iterable[str], cap: int | None) -> Iterator[tuple[str, int]]:
    """The lines `str.splitlines(keepends=True)` would make of the joined texts: the first `cap` characters of each
    (all of it without a cap) and its whole length, holding no more than that of any line."""
    head: list[str] = []
    kept = length = 0
    carry = ""
    for chunk in texts:
        text = carry + chunk
        # A CR at the end may be the first half of a CRLF that the next text completes.
        carry = "\r" if text.endswith("\r") else ""
        for piece in (text[:-1] if carry else text).splitlines(keepends=True):
            if cap is None or kept < cap:
                take = piece if cap is None else piece[: cap - kept]
                head.append(take)
                kept += len(take)
            length += len(piece)
            if piece[-1] in LINE_BREAKS:
                yield "".join(head), length
                head, kept, length = [], 0, 0
    if carry:
        head.append(carry)
        length += 1
        yield "".join(head), length
    elif length:
        yield "".join(head), length
