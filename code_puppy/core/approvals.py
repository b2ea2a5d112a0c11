"""The one approval loop: what every front end does with the calls a run holds for approval, around the one question
it knows how to ask (the chat's prompt, an editor's `session/request_permission`).

Bound as pydantic-ai's `RequestInput`: the permission policy raises `ApprovalRequired(metadata={'scope', 'summary'})`
(the sandboxed shell `metadata={'sandbox': ESCALATE, ...}` for a command to run outside the sandbox), the run waits,
and the answers go back as `DeferredToolResults`. A call whose scope the user allowed "always" for the session passes
without a question; running outside the sandbox is allowed once at a time, never "always".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolDenied

from code_puppy.permissions.policy import PermissionPolicy
from code_puppy.sandbox.sandboxed_shell import ESCALATE

Verdict = Literal["yes", "no", "always", "cancel"]
"""The user's answer: once, no, for the rest of the session (only when the question offers it), or cancel the turn."""
NOBODY_ANSWERS = "No one can answer this call here."
"""What a call that needs an answer from outside the run (a question, an external tool) gets: no front end has one."""


@dataclass(frozen=True)
class Question:
    """One call waiting for approval, as a front end asks about it."""

    call: ToolCallPart
    summary: str
    """What the call would do, in a few words (`write src/a.py`, `run outside the sandbox ...`)."""
    escalate: bool
    """Whether it asks to run a command outside the sandbox (`always` is never offered)."""
    always: bool
    """Whether "always, for this session" can be offered."""
    metadata: dict[str, Any]
    """What the policy or the sandboxed shell said about the call."""


Ask = Callable[[Question], Awaitable[Verdict]]
"""How a front end asks one question."""


async def answer_approvals(policy: PermissionPolicy, requests: DeferredToolRequests, ask: Ask) -> DeferredToolResults:
    """Answer every call of one model step that waits for approval, asking `ask` about each in turn."""
    approvals: dict[str, bool | ToolDenied] = {}
    for call in requests.approvals:
        metadata: dict[str, Any] = requests.metadata.get(call.tool_call_id, {})
        escalate = metadata.get("sandbox") == ESCALATE
        scope = metadata.get("scope")
        if not escalate and scope is not None and scope in policy.session_allowed:
            approvals[call.tool_call_id] = True
            continue
        summary = str(metadata.get("summary") or policy.summary(call.tool_name, call.args_as_dict()))
        verdict = await ask(Question(call, summary, escalate, not escalate and scope is not None, metadata))
        if verdict == "always" and scope is not None and not escalate:
            policy.session_allowed.add(scope)
        approvals[call.tool_call_id] = True if verdict in ("yes", "always") else _denial(verdict, summary, metadata)
    calls = {call.tool_call_id: ToolDenied(NOBODY_ANSWERS) for call in requests.calls}
    return requests.build_results(approvals=approvals, calls=calls)


def _denial(verdict: Verdict, summary: str, metadata: dict[str, Any]) -> ToolDenied:
    """What the model is told of a call the user did not let run."""
    if verdict == "cancel":
        return ToolDenied("The user cancelled the turn.")
    if metadata.get("sandbox") != ESCALATE:
        return ToolDenied(f"The user denied this call ({summary}).")
    if denied := metadata.get("denied"):
        return ToolDenied(f"The user did not let it run outside the sandbox. Inside, it failed:\n{denied}")
    return ToolDenied("The user did not let it run outside the sandbox, so it did not run.")
