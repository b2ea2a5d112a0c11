"""The editor's files: ACP's `fs/read_text_file` and `fs/write_text_file` as the file tools' `EditorFiles`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import RequestError
from acp.interfaces import Client
from acp.schema import ClientCapabilities


@dataclass
class ClientFiles:
    """The files of one session as its client holds them; only what the client advertised is delegated.

    It keeps what it read and wrote of each file during a turn, so the diff the editor is shown of an edit is the
    one made to its buffer, not to the disk.
    """

    client: Client
    session_id: str
    reads: bool
    writes: bool
    _read: dict[Path, str] = field(default_factory=dict[Path, str], init=False, repr=False)
    _written: dict[Path, tuple[str | None, str]] = field(
        default_factory=dict[Path, tuple[str | None, str]], init=False, repr=False
    )

    @property
    def holds_edits(self) -> bool:
        """Whether edits are made to the editor's buffers: only when they go back to it too (workspace/project_files.py
        computes a write from the disk otherwise)."""
        return self.reads and self.writes

    async def text_of(self, root: Path, args: dict[str, Any]) -> str | None:
        """The editor's text of the project file a file tool call names, when edits are made to it; else None (the
        disk, a new file, a path outside the project, a file the editor cannot read)."""
        path = args.get("path")
        if not self.holds_edits or not isinstance(path, str):
            return None
        target = (root / path).resolve()
        if not target.is_relative_to(root) or not target.is_file():
            return None
        try:
            return await self.read(target)
        except OSError:
            return None

    def take_change(self, path: Path) -> tuple[str | None, str] | None:
        """The text the editor had of `path` before the turn's last write to it (None: a new file) and what was
        written, once; None when nothing was written to it through the editor."""
        return self._written.pop(path, None)

    @classmethod
    def of(cls, client: Client, session_id: str, capabilities: ClientCapabilities) -> ClientFiles | None:
        """The client's files when it offers to read or write them, None when the tools use the disk."""
        fs = capabilities.fs
        reads, writes = bool(fs and fs.read_text_file), bool(fs and fs.write_text_file)
        return cls(client, session_id, reads, writes) if reads or writes else None

    async def read(self, path: Path) -> str:
        try:
            response = await self.client.read_text_file(session_id=self.session_id, path=str(path))
        except RequestError as error:
            raise OSError(str(error)) from error
        self._read[path] = response.content
        return response.content

    async def write(self, path: Path, content: str) -> None:
        try:
            await self.client.write_text_file(session_id=self.session_id, path=str(path), content=content)
        except RequestError as error:
            raise OSError(str(error)) from error
        self._written[path] = (self._read.get(path), content)
        self._read[path] = content
