"""`AgentScope`: what a file-defined agent or command may use, narrowed from what the user's mode allows (issue 15).

A definition's `tools` and `permission_mode` only take away: tools it does not list are neither offered nor run,
a `Bash(git:*)` grant refuses every command with a segment that is not `git …`, and a stricter mode than the
user's decides first. What passes still goes through the permission policy, plugins and sandbox, as any call.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import KW_ONLY, dataclass, replace
from pathlib import Path
from typing import Any, cast

from pydantic_ai import RunContext, ToolDefinition
from pydantic_ai.capabilities import AbstractCapability, WrapModelRequestHandler, WrapRunHandler
from pydantic_ai.exceptions import ApprovalRequired, SkipToolExecution
from pydantic_ai.messages import (
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    SystemPromptPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import ToolDenied
from pydantic_ai_harness.planning import Planning
from pydantic_ai_harness.subagents import SubAgents

from code_puppy.definitions.files import AgentDefinition, ToolGrant, stricter_mode
from code_puppy.options import PermissionMode
from code_puppy.permissions.policy import PermissionPolicy, allowed_by_list, mcp_allowed
from code_puppy.run.deps import deps_of
from code_puppy.run.instructions import build_instructions
from code_puppy.tools import ALWAYS_ALLOWED_TOOL_NAMES, LOAD_SKILL_TOOL, MCP_PERMISSION_KEY, SHELL_TOOL_NAMES

ALWAYS_OFFERED = frozenset({LOAD_SKILL_TOOL})
"""Tools every scope keeps: loading a skill changes nothing by itself."""
SHELL_COMPANIONS = frozenset({*SHELL_TOOL_NAMES, "check_command", "stop_command"})
"""Tools that come with `shell`: checking on and stopping what it started."""
DELEGATE_TOOL = "delegate_task"


_running: ContextVar[AgentDefinition | None] = ContextVar("code_puppy.running_agent", default=None)


def running_agent() -> AgentDefinition | None:
    """The file-defined agent whose run the code running belongs to (a delegate's, or the one in charge), or None
    for code-puppy itself: its frontmatter `hooks:` apply (the bundled shell_hooks plugin)."""
    return _running.get()


@dataclass
class AgentScope(AbstractCapability[Any]):
    """Narrows a run to a file-defined agent: its instructions, its tools, at most its permission mode.

    On the main agent the definition is switched on the live object (`--agent`, `/agent`), and a command's
    `allowed-tools` narrow one turn (`command_grant`); each delegate gets its own fixed scope.
    """

    policy: PermissionPolicy
    """The policy every call still passes; its mode is the user's."""
    project_root: Path
    _: KW_ONLY
    definition: AgentDefinition | None = None
    """The agent in charge, or None for code-puppy itself."""
    command_grant: ToolGrant | None = None
    """A running command's `allowed-tools`, on top of the agent's."""

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    def get_instructions(self) -> Any:
        return self._instructions

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        token = _running.set(self.definition)
        try:
            return await handler()
        finally:
            _running.reset(token)

    def _instructions(self, ctx: RunContext[Any]) -> str:
        definition = self.definition
        if definition is None:
            return build_instructions(self.project_root, offered=self.offers_tool)
        return build_instructions(
            self.project_root, persona=definition.instructions, name=definition.name, offered=self.offers_tool
        )

    @property
    def mode(self) -> PermissionMode:
        """The mode calls are decided in: the user's, or the definition's when it is stricter."""
        definition = self.definition
        mode = stricter_mode(self.policy.mode, definition.permission_mode if definition else None)
        return cast(PermissionMode, mode)  # one of the policy's or the definition's, both checked modes

    def _grants(self) -> list[ToolGrant]:
        grants = [self.definition.grant] if self.definition is not None else []
        return [*grants, *([self.command_grant] if self.command_grant is not None else [])]

    def offers_tool(self, name: str) -> bool:
        """Whether the model sees the built-in tool `name` (the instructions mention only those)."""
        return self.offers(ToolDefinition(name=name))

    def offers(self, tool_def: ToolDefinition) -> bool:
        """Whether every grant in force lets the model see `tool_def`."""
        if tool_def.name in ALWAYS_OFFERED:
            return True
        if self.mode == "read-only" and tool_def.name not in ALWAYS_ALLOWED_TOOL_NAMES:
            return False
        return all(_granted(grant, tool_def) for grant in self._grants())

    async def prepare_tools(self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]) -> list[ToolDefinition]:
        if self.definition is None and self.command_grant is None:
            return tool_defs
        return [tool_def for tool_def in tool_defs if self.offers(tool_def)]

    async def before_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: dict[str, Any]
    ) -> dict[str, Any]:
        if (self.definition is None and self.command_grant is None) or ctx.tool_call_approved:
            return args
        who = f"agent '{self.definition.name}'" if self.definition is not None else "this command"
        if not self.offers(tool_def):
            raise SkipToolExecution(ToolDenied(f"`{call.tool_name}` is not among the tools {who} may use."))
        if call.tool_name in SHELL_TOOL_NAMES:
            command = str(args.get("command", ""))
            for grant in self._grants():
                if grant.shell_patterns is not None and not allowed_by_list(command, grant.shell_patterns):
                    allowed = ", ".join(grant.shell_patterns)
                    raise SkipToolExecution(
                        ToolDenied(f"`{command}` is outside the commands {who} may run ({allowed}). Do not retry it.")
                    )
        if self.mode == self.policy.mode:
            return args
        stricter = replace(self.policy, mode=self.mode)
        mcp = (tool_def.metadata or {}).get(MCP_PERMISSION_KEY)
        decision, reason = stricter.decide(call.tool_name, args, mcp_permission=mcp if isinstance(mcp, str) else None)
        if decision == "allow":
            return args
        if decision == "ask" and (deps := deps_of(ctx)) is not None and deps.ask is not None:
            scope = stricter.scope(call.tool_name, args)
            if scope not in self.policy.session_allowed:
                raise ApprovalRequired(metadata={"scope": scope, "summary": stricter.summary(call.tool_name, args)})
            return args
        raise SkipToolExecution(
            ToolDenied(reason or f"{who} runs in '{self.mode}' mode, which needs the user's approval for this.")
        )


def _granted(grant: ToolGrant, tool_def: ToolDefinition) -> bool:
    mcp = (tool_def.metadata or {}).get(MCP_PERMISSION_KEY)
    if isinstance(mcp, str):
        if grant.denied and mcp_allowed(mcp, sorted(grant.denied)):
            return False
        return grant.tools is None or mcp_allowed(mcp, sorted(grant.tools))
    name = "shell" if tool_def.name in SHELL_COMPANIONS else tool_def.name
    return name not in grant.denied and (grant.tools is None or name in grant.tools)


@dataclass
class ScopedSubAgents(SubAgents[Any]):
    """The harness `SubAgents`, whose instructions (the `delegate_task` listing) reach the model only while the scope
    in charge offers `delegate_task`: an agent or command without it is not told to delegate."""

    scope: AgentScope | None = None

    def get_instructions(self) -> Any:
        return _while_offered(super().get_instructions(), self.scope, DELEGATE_TOOL)


@dataclass
class ScopedPlanning(Planning[Any]):
    """The harness `Planning`, whose guidance reaches the model only while the scope in charge offers `write_plan`,
    and whose plan reminder is a request-scoped system prompt: the provider's cache breakpoint then lands before it, on
    what the next request still sends, so a tool loop with a plan reads its conversation back from the prompt cache."""

    scope: AgentScope | None = None

    def get_instructions(self) -> Any:
        return _while_offered(super().get_instructions(), self.scope, "write_plan")

    async def wrap_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, handler: WrapModelRequestHandler
    ) -> ModelResponse:
        async def request_scoped(request_context: ModelRequestContext) -> ModelResponse:
            messages = request_context.messages
            last = messages[-1] if messages else None
            if isinstance(last, ModelRequest):
                parts = [_request_scoped(part) for part in last.parts]
                messages[-1] = replace(last, parts=parts)
            return await handler(request_context)

        return await super().wrap_model_request(ctx, request_context=request_context, handler=request_scoped)


PLAN_REMINDER = "<plan-reminder>\n"
"""How the harness's plan reminder begins (a user prompt appended to the request)."""


def _request_scoped(part: ModelRequestPart) -> ModelRequestPart:
    """The harness's plan reminder as a request-scoped system prompt; any other part as it is."""
    if isinstance(part, UserPromptPart) and isinstance(part.content, list) and part.content[:1] == [PLAN_REMINDER]:
        return SystemPromptPart("".join(item for item in part.content if isinstance(item, str)), scope="request")
    return part


def _while_offered(instructions: Any, scope: AgentScope | None, tool: str) -> Any:
    if instructions is None or scope is None:
        return instructions

    def offered(ctx: RunContext[Any]) -> Any:
        return instructions if scope.offers_tool(tool) else None

    return offered
