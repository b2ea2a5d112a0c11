"""`ChatControl`: the chat as its slash commands and jobs see it. They read it and act through it; its state is its own.

Key bindings have a narrower view still, `KeyTarget` in `keys.py`. `Chat` is the one implementation of both.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from code_puppy.chat.approvals import Answer
    from code_puppy.chat.live import Live, Screen
    from code_puppy.chat.runtime import ChatRuntime
    from code_puppy.definitions.file_commands import FileCommand


class ChatControl(Protocol):
    @property
    def project_root(self) -> Path: ...

    @property
    def screen(self) -> Screen:
        """Output goes here, above the prompt."""
        ...

    @property
    def live(self) -> Live:
        """The running job's live region: its spinner line and the line still streaming."""
        ...

    @property
    def runtime(self) -> ChatRuntime | None:
        """The project and conversation, once loaded."""
        ...

    async def ready(self) -> ChatRuntime:
        """The runtime, waiting for it to load."""
        ...

    def busy(self) -> bool:
        """Whether a job (a turn, `!cmd`, a slow command) is running."""
        ...

    def steer(self, text: str) -> None:
        """Send `text` into the running turn; queue it when no turn runs."""
        ...

    def queue(self, text: str) -> None:
        """Run `text` as a turn once the running job ends."""
        ...

    def start_turn(self, text: str, *, command: FileCommand | None = None) -> None:
        """Run `text` as a turn now; only when nothing is running. `command`: the file command it expands, whose
        `model` and `allowed-tools` hold for the turn."""
        ...

    def cancel_job(self) -> None: ...

    def attach(self, text: str, kind: str) -> None:
        """Send `text` with the next turn's prompt, for the model to see with it, as an `attachment` of `kind`."""
        ...

    def detach(self, kind: str) -> None:
        """Send none of the attachments of `kind` waiting for the next turn's prompt."""
        ...

    def put_input(self, text: str) -> None:
        """Make `text` the input line's content, to edit and send again."""
        ...

    async def confirm(self, items: list[Any], question: str, *, always: bool = True) -> Answer:
        """Show `items` and ask `question` in the input line: yes, no (or always, with `always`)."""
        ...
