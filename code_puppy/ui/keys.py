"""The chat's keys: Enter sends (or steers the running turn), Tab queues, Ctrl-C cancels, y / n / a answer approvals."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from prompt_toolkit.filters import Condition
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

if TYPE_CHECKING:
    from code_puppy.ui.approvals import Answer
    from code_puppy.ui.chat import Chat

_ANSWERS: dict[str, Answer] = {"y": "yes", "n": "no", "a": "always"}


def chat_key_bindings(chat: Chat) -> KeyBindings:
    """Bindings that take precedence over the prompt's defaults; idle Enter and Tab keep theirs (send, complete)."""
    kb = KeyBindings()
    busy = Condition(chat.busy)
    approving = Condition(lambda: chat.approval is not None)

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
        elif time.monotonic() - chat.interrupted_at < 2:
            chat.quit()
        else:
            chat.interrupted_at = time.monotonic()
            chat.hint = "Ctrl-C again (or Ctrl-D) to quit"

    for key, answer in _ANSWERS.items():
        for variant in (key, key.upper()):
            kb.add(variant, filter=approving)(_answer(chat, answer))
    return kb


def _answer(chat: Chat, answer: Answer) -> Callable[[KeyPressEvent], None]:
    def handler(event: KeyPressEvent) -> None:
        if chat.approval is not None and not chat.approval.answer.done():
            chat.approval.answer.set_result(answer)

    return handler
