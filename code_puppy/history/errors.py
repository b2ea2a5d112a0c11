"""The errors a history processor's run ends with, in a module of their own: reporting them imports no more."""

from __future__ import annotations

from pydantic_ai.exceptions import AgentRunError

__all__ = ("HistoryProcessingError", "HistoryProcessingValidationError")


class HistoryProcessingError(AgentRunError):
    """A history processor or its condition failed: nothing was sent and the history was left as it was."""

    def __init__(self, message: str, *, processor: str | None = None) -> None:
        super().__init__(message)
        self.processor = processor
        """The processor (or condition) at fault, by import path or qualified name."""


class HistoryProcessingValidationError(HistoryProcessingError):
    """A history processor returned a history that breaks a validation rule; nothing was sent."""

    def __init__(
        self, rule: str, sentence: str, *, processor: str, group: int | None = None, output_index: int | None = None
    ) -> None:
        super().__init__(f"[{rule}] {processor} returned an invalid history: {sentence}", processor=processor)
        self.rule = rule
        """The rule broken, `V1` to `V12`."""
        self.group = group
        """The input group concerned, when there is one."""
        self.output_index = output_index
        """The index in the processor's output of the message concerned, when there is one."""
