"""`build_pydantic_agent`: the one place where code-puppy's agent is assembled from capabilities."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.capabilities import HandleDeferredToolCalls, LocalWorkspace, RequestInput
from pydantic_ai.models import Model
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, RunContext, ToolDenied
from pydantic_ai_harness.repo_context import RepoContext
from pydantic_ai_harness.shell import LLM_API_KEY_ENV_PATTERNS, MAX_FOREGROUND_WAIT, Shell
from pydantic_ai_harness.subagents import SubAgents
from pydantic_ai_harness.tool_output_limits import Band, ToolOutputLimits, Truncate

from code_puppy.agents.compaction import PersistentCompaction, compaction_strategy
from code_puppy.agents.cut_off_calls import CutOffCalls
from code_puppy.agents.history_persistence import DurableHistory, HistoryPersistence
from code_puppy.agents.history_processors import HistoryRevision, resolve_history_processing
from code_puppy.agents.instructions import build_instructions
from code_puppy.agents.mcp_servers import McpServers, referenced_variables
from code_puppy.agents.permissions import PermissionPolicy
from code_puppy.agents.project_files import ProjectFileSystem
from code_puppy.agents.provider_retries import ProviderRetries, request_settings
from code_puppy.agents.shell_outputs import ShellOutputs
from code_puppy.agents.steering import Steering, SteeringInbox
from code_puppy.agents.turn_journal import TurnJournal
from code_puppy.agents.user_history_processor import UserHistoryProcessor
from code_puppy.config import PermissionMode, Settings
from code_puppy.plugins.host import AgentHooks
from code_puppy.sessions.session import Session

FILE_TOOLS = ("read_file", "write_file", "edit_file", "create_directory", "list_files", "grep")
"""The harness file tools offered; `create_directory` is included because `write_file` needs an existing parent."""
SECRET_ENV_PATTERNS = (
    *LLM_API_KEY_ENV_PATTERNS,
    "*_API_KEY",
    "*_API_TOKEN",
    "*_ACCESS_KEY*",
    "*_SECRET_KEY",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_OPENAI_*",
    "HF_TOKEN",
    "HUGGINGFACE_*",
    "CO_API_KEY",
)
"""Variables stripped from the shell tool's environment: every provider's credentials, not just the chosen one's.
Plain `*_TOKEN` stays (GITHUB_TOKEN for `gh`, say) unless an MCP server's config reads it."""
MAX_READ_CHARS = 60_000
"""Characters of complete lines per `read_file`, under `MAX_OUTPUT_CHARS` so the output cap never cuts a read."""
MAX_OUTPUT_CHARS = 64_000
"""Characters kept from any tool result."""

AskUser = Callable[[RunContext[Any], DeferredToolRequests, str], Awaitable[DeferredToolResults | None]]
"""Answers the calls waiting for approval in one model step (pydantic-ai's `RequestInput.ask`)."""


def build_pydantic_agent(
    settings: Settings,
    *,
    model: Model | str,
    project_root: Path,
    permission_mode: PermissionMode | None = None,
    allow: tuple[str, ...] = (),
    interactive: bool = False,
    shell_env: Mapping[str, str] | None = None,
    session: DurableHistory | None = None,
    history_processors: Sequence[Callable[..., Any]] | None = None,
    history_processor_condition: Callable[..., Any] | None = None,
    plugins: AgentHooks | None = None,
    steering: SteeringInbox | None = None,
    ask: AskUser | None = None,
) -> Agent[None, str]:
    """Assemble the agent: one capabilities list, outermost first.

    `permission_mode` and `allow` extend the config's `[permissions]`; `shell_env` is the environment the shell
    tool starts commands with (secrets are stripped from it either way); `session` is the durable history
    successful runs are absorbed into (an in-memory session when none is given). `history_processors` and
    `history_processor_condition`, when given, replace `[history] processors` and `processor_condition`;
    `plugins` adds the plugins' tool hooks and capabilities; `steering` is the inbox whose text reaches the running
    run; `ask` answers approvals while the run waits (it makes the policy interactive; without it, a call that would
    ask is denied).

    Raises:
        ConfigError: A history processor or condition that cannot be imported or used.
    """
    history = session if session is not None else Session.in_memory()
    revision = history if isinstance(history, HistoryRevision) else None
    processing = resolve_history_processing(
        settings.history, processors=history_processors, condition=history_processor_condition
    )
    root = project_root.resolve()
    policy = PermissionPolicy(
        root,
        mode=permission_mode or settings.permissions.mode,
        allow=(*settings.permissions.allow, *allow),
        interactive=interactive or ask is not None,
        pre_tool_call=plugins.pre_tool_call if plugins is not None else None,
    )
    secret_variables = [endpoint.api_key_env for endpoint in settings.models.values() if endpoint.api_key_env]
    secret_variables += [name for server in settings.mcp_servers.values() for name in referenced_variables(server)]
    return Agent(
        model,
        instructions=build_instructions(root),
        model_settings=request_settings(settings.run, model),
        capabilities=[
            LocalWorkspace(root),
            ProviderRetries(),
            Steering(steering if steering is not None else SteeringInbox()),
            policy,
            # Outside the output limits, so plugins' post_tool_call gets the result the model gets.
            *([plugins.post_tool_call_hook()] if plugins is not None else []),
            ProjectFileSystem(root_dir=root, content_hashes=False, max_read_chars=MAX_READ_CHARS, tools=FILE_TOOLS),
            Shell(
                cwd=root,
                denied_commands=[],
                default_timeout=MAX_FOREGROUND_WAIT,
                allow_interactive=True,
                env=dict(shell_env if shell_env is not None else os.environ),
                denied_env_patterns=[*SECRET_ENV_PATTERNS, *secret_variables],
                tools=["shell"],
            ),
            ShellOutputs(),
            RepoContext(workspace_dir=root, expose_inventory_tool=False),
            SubAgents(include_self=True, agent_folders=None),
            McpServers(settings.mcp_servers, project_root=root),
            TruncatedToolOutputs(bands=[Band(over=MAX_OUTPUT_CHARS, action=Truncate(max_chars=MAX_OUTPUT_CHARS))]),
            CutOffCalls(),
            *(plugins.capabilities if plugins is not None else []),
            # Approvals: the user answers while the run waits (RequestInput); with nobody to ask, the safety net
            # denies with a reason instead of ending the run with DeferredToolRequests output.
            RequestInput(ask) if ask is not None else HandleDeferredToolCalls(handler=_deny_unanswered),
            # User policy first, compaction as the safety net on what remains (agents/compaction.py): both see the
            # request as every capability above left it, and what they accept becomes the run's history.
            UserHistoryProcessor(processing.processors, condition=processing.condition, revision=revision),
            PersistentCompaction(compaction_strategy(settings.history.compaction), revision=revision),
            # Custody of the run: step by step while it runs, then its whole transcript once it succeeds. The only
            # after_run implementer, so its position is inert; it sits last as the run's final custodian.
            *([TurnJournal(history)] if isinstance(history, Session) else []),
            HistoryPersistence(history),
        ],
        # A coding model often misses a path or an edit anchor twice in a row; pydantic-ai's default of one
        # retry would end the whole run there.
        retries={"tools": 3},
        defer_model_check=True,
    )


class TruncatedToolOutputs(ToolOutputLimits[Any]):
    """Tool-output limits that only truncate, so no `read_tool_result` spill tool is offered."""

    def get_toolset(self) -> None:
        return None


def _deny_unanswered(ctx: RunContext[Any], requests: DeferredToolRequests) -> DeferredToolResults:
    reason = ToolDenied("Nobody can approve this call in a non-interactive run; it was denied. Do not retry it.")
    return requests.build_results(
        approvals={call.tool_call_id: reason for call in requests.approvals},
        calls={call.tool_call_id: reason for call in requests.calls},
    )
