"""The session picker (`code-puppy -r` with no id, `/resume` with none): type to filter by name, title and what was
said, arrows to move, Enter to resume, Esc to cancel; the last exchange of the session under the cursor below."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from prompt_toolkit.application import Application, in_terminal
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.layout import BufferControl, FormattedTextControl, HSplit, Layout, VSplit, Window
from prompt_toolkit.layout.dimension import Dimension
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from code_puppy.core.session_text import age
from code_puppy.errors import ConfigError
from code_puppy.mentions import typed_text
from code_puppy.sessions.catalog import SessionInfo
from code_puppy.sessions.search import SearchQueryError, search
from code_puppy.sessions.store import SqliteConversationStore

ROWS = 12
"""Sessions shown at once; the list scrolls with the cursor."""
PREVIEW_CHARS = 400


class SessionPicker:
    """The picker over `sessions` (newest first) of a project; `run` returns the id chosen, or None."""

    def __init__(self, store: SqliteConversationStore, sessions: Sequence[SessionInfo], project_dir: Path) -> None:
        self._store = store
        self._sessions = list(sessions)
        self._project_dir = project_dir
        self.shown = list(sessions)
        """The sessions the filter lets through, in order."""
        self.cursor = 0
        self._previews: dict[str, list[str]] = {}
        self._now = datetime.now(UTC)
        self._filter = Buffer(multiline=False, on_text_changed=lambda _: self._refilter())
        keys = KeyBindings()
        keys.add("up")(self._move(-1))
        keys.add("down")(self._move(1))
        keys.add("enter")(self._choose)
        keys.add("escape", eager=True)(self._cancel)
        keys.add("c-c")(self._cancel)
        body = HSplit(
            [
                Window(
                    FormattedTextControl(
                        [("bold", "Resume a session"), ("ansigray", "  type to filter · ↑↓ · Enter resumes · Esc")]
                    ),
                    height=1,
                ),
                VSplit(
                    [
                        Window(FormattedTextControl([("ansicyan bold", "filter› ")]), width=8, height=1),
                        Window(BufferControl(self._filter), height=1),
                    ]
                ),
                Window(FormattedTextControl(self._rows), height=Dimension(min=1, max=ROWS)),
                Window(height=1, char="─", style="ansigray"),
                Window(FormattedTextControl(self._preview), height=Dimension(min=1, max=8), wrap_lines=True),
            ]
        )
        self.app: Application[str | None] = Application(
            layout=Layout(body, focused_element=self._filter), key_bindings=keys, erase_when_done=True
        )

    async def run(self) -> str | None:
        return await self.app.run_async()

    def _move(self, step: int) -> Callable[[KeyPressEvent], None]:
        def handler(event: KeyPressEvent) -> None:
            if self.shown:
                self.cursor = max(0, min(len(self.shown) - 1, self.cursor + step))

        return handler

    def _choose(self, event: KeyPressEvent) -> None:
        if self.shown:
            event.app.exit(result=self.shown[self.cursor].id)

    def _cancel(self, event: KeyPressEvent) -> None:
        event.app.exit(result=None)

    def _refilter(self) -> None:
        words = self._filter.text.lower().split()
        if not words:
            self.shown = list(self._sessions)
        else:
            said = self._said(words)
            self.shown = [
                info
                for info in self._sessions
                if info.id in said or all(word in f"{info.name or ''} {info.title} {info.id}".lower() for word in words)
            ]
        self.cursor = 0

    def _said(self, words: list[str]) -> set[str]:
        """The sessions whose prompts or answers have every word (as a prefix)."""
        # Plain words, each a prefix (`search` makes them FTS5 strings).
        query = " ".join(word.replace('"', "") + "*" for word in words if word.replace('"', "").strip("*"))
        if not query:
            return set()
        try:
            hits = search(self._store.database, query, project_dir=self._project_dir, limit=len(self._sessions))
            return {hit.session_id for hit in hits}
        except SearchQueryError:
            return set()

    def _rows(self) -> StyleAndTextTuples:
        if not self.shown:
            return [("ansigray", "  no session matches")]
        first = max(0, min(self.cursor - ROWS // 2, len(self.shown) - ROWS))
        rows: StyleAndTextTuples = []
        for index, info in enumerate(self.shown[first : first + ROWS], start=first):
            turns = str(info.turns) if info.indexed else "-"
            line = f"{info.id[:8]}  {age(info.updated_at, self._now):>4}  {turns:>3} turns  {info.label}"
            selected = index == self.cursor
            rows.append(("reverse" if selected else "", f"{'›' if selected else ' '} {line}"))
            rows.append(("", "\n"))
        return rows[:-1]

    def _preview(self) -> StyleAndTextTuples:
        if not self.shown:
            return []
        info = self.shown[self.cursor]
        if info.id not in self._previews:
            self._previews[info.id] = []
            self.app.create_background_task(self._load_preview(info.id))
        lines = self._previews[info.id] or ["(nothing said yet)"]
        return [("ansigray" if line.startswith("›") else "", line + "\n") for line in lines]

    async def _load_preview(self, session_id: str) -> None:
        """Read the session's last prompt and the answer to it, shortened, then redraw."""
        record = await self._store.read_record(session_id)
        try:
            entries = await self._store.read_history(record.head_id, limit=30) if record is not None else []
        except KeyError:  # a concurrent delete released its history
            entries = []
        prompt, answer = "", ""
        for entry in reversed(entries):
            message = entry.message
            if isinstance(message, ModelResponse) and not answer:
                answer = " ".join(p.content for p in message.parts if isinstance(p, TextPart)).strip()
            elif isinstance(message, ModelRequest):
                texts = [typed_text(p.content) for p in message.parts if isinstance(p, UserPromptPart)]
                if found := " ".join(texts).strip():
                    prompt = found
                    break
        self._previews[session_id] = [f"› {_short(prompt)}", _short(answer)] if prompt else []
        self.app.invalidate()


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


async def pick_session(store: SqliteConversationStore, project_dir: Path) -> str | None:
    """Let the user pick one of `project_dir`'s sessions (not archived) in the terminal: its id, or None (Esc).

    Raises:
        ConfigError: The project has no session to pick.
    """
    sessions = store.sessions.recent(project_dir, limit=500, failed=False)
    if not sessions:
        raise ConfigError(f"no session to resume in {project_dir}")
    # Inside the chat, its prompt steps aside while the picker has the terminal; at start-up there is none.
    async with in_terminal():
        return await SessionPicker(store, sessions, project_dir).run()


async def pick_at_start(project_dir: Path) -> str | None:
    """`code-puppy -r` with no id: the picker before the chat starts, with older sessions indexed beside it."""
    from code_puppy.sessions.search import start_indexer
    from code_puppy.sessions.store import open_store

    with open_store() as store:
        indexing = start_indexer(store.database.location)
        try:
            return await pick_session(store, project_dir)
        finally:
            indexing.set()
