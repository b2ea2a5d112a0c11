"""`PlanView`: the model's task list (pydantic-ai-harness `Planning`) as the run's events build it, for the front ends:
the chat's live checklist, stream-json's `plan` events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import AgentStreamEvent, FunctionToolResultEvent
from pydantic_ai_harness.planning import (
    PlanCompletedEvent,
    PlanCreatedEvent,
    PlanDeletedEvent,
    PlanItem,
    PlanStatusChangedEvent,
    PlanUpdatedEvent,
)

MARKS = {"pending": "☐", "in_progress": "◐", "completed": "☑", "blocked": "⊘"}
"""How each status shows in the checklist."""


@dataclass
class PlanView:
    """The plan as its change events describe it, in the order its steps were added."""

    items: dict[str, PlanItem] = field(default_factory=dict[str, PlanItem])
    changed: bool = False
    """Whether it changed since `settled` last said so."""

    def update(self, event: AgentStreamEvent) -> bool:
        """Take in one event; whether it was a plan change."""
        if isinstance(event, PlanDeletedEvent):
            self.items.pop(event.item.id, None)
        elif isinstance(event, PlanCreatedEvent | PlanUpdatedEvent | PlanStatusChangedEvent | PlanCompletedEvent):
            self.items[event.item.id] = event.item
        else:
            return False
        self.changed = True
        return True

    def settled(self, event: AgentStreamEvent) -> bool:
        """Whether `event` ends a tool call after which the plan is not what was last shown (a call that rewrites
        the plan emits one event per step: the plan is shown once, when the call is done)."""
        if not (self.changed and isinstance(event, FunctionToolResultEvent)):
            return False
        self.changed = False
        return True

    def lines(self) -> list[str]:
        """One checklist line per step, then the progress."""
        items = list(self.items.values())
        if not items:
            return []
        done = sum(1 for item in items if item.status.value == "completed")
        lines = [f"{MARKS.get(item.status.value, '☐')} {_label(item)}" for item in items]
        return [*lines, f"({done}/{len(items)} done)"]

    def as_json(self) -> list[dict[str, Any]]:
        """The steps for a `plan` event: id, content, status."""
        return [{"id": item.id, "content": item.content, "status": item.status.value} for item in self.items.values()]


def _label(item: PlanItem) -> str:
    if item.status.value == "in_progress" and item.active_form:
        return item.active_form
    return item.content
