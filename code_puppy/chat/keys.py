"""The chat's keys: Enter sends (or steers the running turn), Tab queues, Ctrl-C cancels, y / n / a answer approvals."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from prompt_toolkit.filters import Condition
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

if TYPE_CHECKING:
    from code_puppy.chat.approvals import Answer

_ANSWERS: dict[str, Answer] = {"y": "yes", "n": "no", "a": "always"}


class KeyTarget(Protocol):
    """What the keys do to the chat; the input line itself is theirs."""

    def busy(self) -> bool: ...

    def approving(self) -> bool:
        """Whether the prompt is asking an approval question."""
        ...

    def answer(self, answer: Answer) -> None:
        """Answer the approval question."""
        ...

    def while_busy(self, text: str) -> None:
        """Enter while a job runs."""
        ...

    def queue(self, text: str) -> None: ...

    def cancel_job(self) -> None: ...

    def interrupt_idle(self) -> None:
        """Ctrl-C at an empty prompt while nothing runs."""
        ...


def chat_key_bindings(chat: KeyTarget) -> KeyBindings:
    """Bindings that take precedence over the prompt's defaults; idle Enter and Tab keep theirs (send, complete)."""
    kb = KeyBindings()
    busy = Condition(chat.busy)
    approving = Condition(chat.approving)

    @kb.add("enter", filter=~approving)
    def _enter(event: KeyPressEvent) -> None:  # pyright: ignore[reportUnusedFunction]
        buffer = event.current_buffer
        if buffer.complete_state is not None and buffer.complete_state.current_completion is not None:
            buffer.complete_state = None  # accept the highlighted completion
            return
        text = buffer.text
        if text.endswith("\\") and buffer.cursor_position == len(text):
            buffer.delete_before_cursor()
            buffer.insert_text("\n")
        elif not chat.busy():
            buffer.validate_and_handle()
        elif text.strip():
            buffer.append_to_history()
            buffer.reset()
            chat.while_busy(text.strip())

    @kb.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:  # pyright: ignore[reportUnusedFunction]
        event.current_buffer.insert_text("\n")

    @kb.add("tab", filter=busy & ~approving)
    def _queue(event: KeyPressEvent) -> None:  # pyright: ignore[reportUnusedFunction]
        buffer = event.current_buffer
        text = buffer.text.strip()
        if text:
            buffer.append_to_history()
            buffer.reset()
            chat.queue(text.removeprefix("/queue ").strip() if text.startswith("/queue ") else text)

    # `<sigint>`: a Ctrl-C that arrives while output is written above the prompt (the tty is briefly cooked).
    @kb.add("c-c")
    @kb.add("<sigint>")
    def _interrupt(event: KeyPressEvent) -> None:  # pyright: ignore[reportUnusedFunction]
        buffer = event.current_buffer
        if chat.busy():
            chat.cancel_job()  # the draft stays
        elif buffer.text:
            buffer.reset()
        else:
            chat.interrupt_idle()

    for key, answer in _ANSWERS.items():
        for variant in (key, key.upper()):
            kb.add(variant, filter=approving)(_answer(chat, answer))
    return kb


def _answer(chat: KeyTarget, answer: Answer) -> Callable[[KeyPressEvent], None]:
    def handler(event: KeyPressEvent) -> None:
        chat.answer(answer)

    return handler
