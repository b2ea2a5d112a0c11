"""The `stream-json` events, one definition of each shape: `-p --output-format stream-json` writes them as its run's
events come (`headless/sinks.py`), `code-puppy runs show ID --follow` builds them again from what a durable run stored
(`durable/follow.py`), and `--output-format json` prints the `result` alone. Here, below both, so they cannot drift."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic_ai.messages import BaseToolCallPart, BaseToolReturnPart

from code_puppy.sessions.costs import RequestCost

Status = Literal["success", "error", "limit", "interrupted", "terminated"]


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True)
class RunOutcome:
    """How one headless invocation ended: what `json` prints and `stream-json` ends with."""

    session_id: str | None
    """None when the invocation failed before it had a session."""
    output: str | None
    status: Status
    usage: Usage
    duration_ms: int
    error: str | None = None
    cost_usd: float | None = 0.0
    """What the invocation's model requests cost in US dollars (priced ones); None when none could be priced."""
    cost_complete: bool = True
    """Whether every request was priced."""
    denied: int = 0
    """Tool calls the permission policy, a permission rule or a plugin denied (`DeniedCalls`)."""


def session_event(session_id: str) -> dict[str, Any]:
    return {"type": "session", "session_id": session_id}


def text_delta(run: int, text: str) -> dict[str, Any]:
    return {"type": "text_delta", "run": run, "text": text}


def thinking_delta(run: int, text: str) -> dict[str, Any]:
    return {"type": "thinking_delta", "run": run, "text": text}


def tool_call_event(run: int, part: BaseToolCallPart[Any]) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "run": run,
        "tool_name": part.tool_name,
        "tool_call_id": part.tool_call_id,
        "args": part.args_as_dict(),
    }


def tool_result_event(run: int, part: BaseToolReturnPart[Any]) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "run": run,
        "tool_name": part.tool_name,
        "tool_call_id": part.tool_call_id,
        "outcome": part.outcome,
        "content": part.model_response_str(),
    }


def steer_event(run: int, enqueue_id: str, text: str) -> dict[str, Any]:
    return {"type": "steer", "run": run, "enqueue_id": enqueue_id, "text": text}


def plan_event(run: int, items: list[dict[str, Any]]) -> dict[str, Any]:
    """The model's whole task list (`core/plan.py` `PlanView.as_json`), after a tool call that changed it."""
    return {"type": "plan", "run": run, "items": items}


def request_event(cost: RequestCost) -> dict[str, Any]:
    """A model request that finished: what it used and cost (`cost_usd` None: it could not be priced)."""
    return {
        "type": "request",
        "run": cost.run,
        "kind": cost.kind,
        "model": cost.model,
        "usage": {
            "input_tokens": cost.input_tokens,
            "output_tokens": cost.output_tokens,
            "cache_read_tokens": cost.cache_read_tokens,
            "cache_write_tokens": cost.cache_write_tokens,
        },
        "cost_usd": cost.cost_usd,
    }


def result_event(outcome: RunOutcome) -> dict[str, Any]:
    return {"type": "result", **asdict(outcome)}
