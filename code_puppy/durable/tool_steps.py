"""`DurableToolSteps`: each tool call of a durable run is a DBOS step: a resumed run never repeats a finished one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dbos import DBOS
from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability, CapabilityOrdering
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry, ToolRetryError
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import ToolDefinition

STEP_NAME = "code_puppy.tool_call"
"""The name every tool call's step is recorded under (compatibility data: never rename)."""


@dataclass
class DurableToolSteps(AbstractCapability[Any]):
    """Runs each tool call as one DBOS step when the run executes inside a DBOS workflow; transparent outside one.

    Outermost around tool execution: the policy, the approval, the sandbox, the plugins' hooks and the checkpoint of a
    call all run inside its step, once; a replayed call returns its recorded result without running any of them. A
    call that asks for approval, is deferred or asks the model to retry is recorded as that outcome and raised again
    on replay. pydantic-ai's own `child_workflow` tool metadata would need picklable deps; this needs none.
    """

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # process-local: it exists only for DBOS's workflow in this process

    def get_ordering(self) -> CapabilityOrdering:
        return CapabilityOrdering(position="outermost")

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        handler: Any,
    ) -> Any:
        if DBOS.workflow_id is None:
            return await handler(args)

        async def tool_call() -> dict[str, Any]:
            try:
                return {"result": await handler(args)}
            except ModelRetry as retry:
                return {"retry": retry.message}
            except ToolRetryError as retry:
                return {"retry_part": retry.tool_retry}
            except ApprovalRequired as asked:
                return {"approval": asked.metadata}
            except CallDeferred as deferred:
                return {"deferred": deferred.metadata, "kind": deferred.kind}

        outcome = await DBOS.run_step_async({"name": STEP_NAME}, tool_call)
        if "retry" in outcome:
            raise ModelRetry(outcome["retry"])
        if "retry_part" in outcome:
            raise ToolRetryError(outcome["retry_part"])
        if "approval" in outcome:
            raise ApprovalRequired(outcome["approval"])
        if "deferred" in outcome:
            raise CallDeferred(outcome["deferred"], kind=outcome["kind"])
        return outcome["result"]
