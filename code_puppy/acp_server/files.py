"""The editor's files: ACP's `fs/read_text_file` and `fs/write_text_file` as the file tools' `EditorFiles`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from acp import RequestError
from acp.interfaces import Client
from acp.schema import ClientCapabilities


@dataclass(frozen=True)
class ClientFiles:
    """The files of one session as its client holds them; only what the client advertised is delegated."""

    client: Client
    session_id: str
    reads: bool
    writes: bool

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
        return response.content

    async def write(self, path: Path, content: str) -> None:
        try:
            await self.client.write_text_file(session_id=self.session_id, path=str(path), content=content)
        except RequestError as error:
            raise OSError(str(error)) from error
