"""`build_pydantic_agent`: the one place where code-puppy's agent is assembled from capabilities."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability, LocalWorkspace, RequestInput
from pydantic_ai.models import Model
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, RunContext, ToolDenied
from pydantic_ai_harness.repo_context import RepoContext
from pydantic_ai_harness.shell import LLM_API_KEY_ENV_PATTERNS, MAX_FOREGROUND_WAIT, Shell
from pydantic_ai_harness.subagents import SubAgent
from pydantic_ai_harness.tool_output_limits import Band, ToolOutputLimits, Truncate

from code_puppy.checkpoints.capability import Checkpoints
from code_puppy.checkpoints.shadow import ShadowRepo
from code_puppy.config import Settings
from code_puppy.cost.prompt_cache import prompt_caching
from code_puppy.cost.spending import CostMeter, Spending
from code_puppy.definitions.agent_scope import AgentScope, ScopedPlanning, ScopedSubAgents
from code_puppy.definitions.files import AgentDefinition
from code_puppy.definitions.skill_library import skill_folders
from code_puppy.history.compaction import PersistentCompaction, compaction_strategy
from code_puppy.options import PermissionMode
from code_puppy.permissions.claude_rules import ClaudeRules
from code_puppy.permissions.policy import PermissionPolicy
from code_puppy.plugins.host import PluginHost
from code_puppy.run.cut_off_calls import CutOffCalls
from code_puppy.run.deps import RunDeps, RunDepth, deps_of
from code_puppy.run.history_persistence import HistoryPersistence
from code_puppy.run.provider_retries import ProviderRetries
from code_puppy.run.steering import Steering
from code_puppy.run.turn_journal import TurnJournal
from code_puppy.sandbox import ProjectSandbox
from code_puppy.sandbox.sandboxed_shell import SandboxedShell
from code_puppy.tools import FILE_TOOLS
from code_puppy.workspace.project_files import ProjectFileSystem
from code_puppy.workspace.shell_outputs import ShellOutputs

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
"""Variables stripped from the environment of every command run for the agent (`without_secrets`): every provider's
credentials, not just the chosen one's. Plain `*_TOKEN` stays (GITHUB_TOKEN for `gh`, say) unless an MCP server's
config reads it."""
MAX_READ_CHARS = 60_000
"""Characters of complete lines per `read_file`, under `MAX_OUTPUT_CHARS` so the output cap never cuts a read."""
MAX_OUTPUT_CHARS = 64_000
"""Characters kept from any tool result."""
DURABLE_AGENT_NAME = "code_puppy"
"""The main agent's name, which a durable run's model-request steps are recorded under."""

C = TypeVar("C", bound=AbstractCapability[Any])


@dataclass(frozen=True, kw_only=True)
class AgentOptions:
    """What `build_pydantic_agent` builds the agent of a project with, besides the settings."""

    project_root: Path
    """The project the tools work in (resolved here): its files, its shell's working folder, its instructions."""
    model: Model | str | None = None
    """The default model; each run may name its own."""
    permission_mode: PermissionMode | None = None
    """Replaces `[permissions] mode` (the command line's `--permission-mode`, `--yolo`)."""
    allow: tuple[str, ...] = ()
    """Allow-list entries added to `[permissions] allow` (the command line's `--allow`)."""
    claude_rules: ClaudeRules = field(default_factory=ClaudeRules)
    """The permission rules of Claude Code's settings files (`.claude/settings.json`, the user's)."""
    instructions: str | None = None
    """Added to the instructions of every request (the command line's `--append-system-prompt`)."""
    shell_env: Mapping[str, str] | None = None
    """The environment the shell tool starts commands in (default: this process's); secrets are stripped either way
    (`without_secrets`)."""
    history_processors: Sequence[Callable[..., Any]] | None = None
    """Replace `[history] processors`: the user's history processors, run before every model request."""
    history_processor_condition: Callable[..., Any] | None = None
    """Replaces `[history] processor_condition`: when the processors run."""
    plugins: PluginHost | None = None
    """The plugins' tool hooks and capabilities."""
    sandbox: ProjectSandbox | None = None
    """Where `auto` mode runs the shell tool's commands (default: one made from `[sandbox]` when needed)."""
    spending: Spending | None = None
    """Prices and records every model request and holds the budgets (default: counted in memory, no budget)."""
    checkpoints: ShadowRepo | None = None
    """Where the project is snapshotted around each call that can change it (None: no checkpoints)."""
    agents: Sequence[AgentDefinition] = ()
    """The file-defined agents the model may delegate to by name, with only their tools, under the same policy,
    plugins and sandbox."""
    agent_models: Mapping[str, Model] | None = None
    """Each file-defined agent's model by name (the run's model when absent)."""
    skills: Sequence[AbstractCapability[Any]] = ()
    """The harness `Skills` the model loads on demand."""
    durable: bool = False
    """Whether runs may be durable (`--durable`): inside a DBOS workflow, model requests and tool calls are steps."""


def build_pydantic_agent(settings: Settings, options: AgentOptions) -> Agent[RunDeps, str]:
    """Assemble the agent of a project: one capabilities list, outermost first; built once per process and project.

    Each run brings what belongs to its conversation as its `deps` (`RunDeps`: the session, the steering inbox, who
    answers approvals) and may name its `model`.

    Raises:
        ConfigError: A history processor or condition that cannot be imported or used.
    """
    root = options.project_root.resolve()
    plugins = options.plugins
    spending = options.spending if options.spending is not None else Spending()
    # The history-processor and MCP code is imported only when configured: a run without either never pays for it.
    user_processing: list[AbstractCapability[Any]] = []
    history = settings.history
    configured = (history.processors, history.processor_condition, history.summary_model)
    if options.history_processors is not None or options.history_processor_condition is not None or any(configured):
        from code_puppy.history.processing import resolve_history_processing
        from code_puppy.history.user_history_processor import UserHistoryProcessor
        from code_puppy.models import model_resolver

        # Checked whenever set (a condition without processors, a summary model nobody uses: their one-line errors).
        processing = resolve_history_processing(
            history,
            processors=options.history_processors,
            condition=options.history_processor_condition,
            resolve_model=model_resolver(settings),
            source_of=lambda key: settings.source_of("history", key),
        )
        if processing.processors:
            user_processing.append(
                UserHistoryProcessor(
                    processing.processors,
                    condition=processing.condition,
                    summary_model=processing.summary_model,
                    resolve_model=processing.resolve_model,
                    summary_capabilities=[
                        *prompt_caching(settings.run.prompt_cache),
                        CostMeter(spending, kind="summary"),
                    ],
                )
            )
    sandbox = options.sandbox or ProjectSandbox(settings.sandbox, root)
    mcp_servers: list[AbstractCapability[Any]] = []
    if any(server.enabled for server in settings.mcp_servers.values()):
        from code_puppy.mcp.servers import McpServers

        mcp_servers.append(McpServers(settings.mcp_servers, project_root=root, sandbox=sandbox))
    compaction = compaction_strategy(
        settings.history.compaction,
        summary_capabilities=[*prompt_caching(settings.run.prompt_cache), CostMeter(spending, kind="compaction")],
    )
    policy = PermissionPolicy(
        root,
        mode=options.permission_mode or settings.permissions.mode,
        allow=(*settings.permissions.patterns, *options.allow, *options.claude_rules.allow_list),
        rules=options.claude_rules,
        pre_tool_call=options.plugins.pre_tool_call if options.plugins is not None else None,
        sandbox_modes=settings.sandbox.modes,
        unsandboxed=settings.permissions.unsandboxed,
    )
    scope = AgentScope(policy, root)
    # One instance of each tool capability serves the main agent and every delegate: the same policy decisions,
    # "always allow" scopes, sandbox and background commands.
    tools: list[AbstractCapability[Any]] = [
        policy,
        # Outside the output limits, so plugins' post_tool_call gets the result the model gets (and its feedback is
        # never cut off).
        *([options.plugins.tool_call_hooks()] if options.plugins is not None else []),
        # Inside the policy (only the calls it let through are wrapped, after it decided on the command as
        # written) and the plugins' hooks (their post_tool_call sees the command as written too).
        SandboxedShell(policy, sandbox),
        ProjectFileSystem(
            root_dir=root,
            content_hashes=False,
            max_read_chars=MAX_READ_CHARS,
            tools=FILE_TOOLS,
            # The user's skills' folders are readable wherever they are: a skill's references and scripts live there.
            read_roots=skill_folders(options.skills, project_root=root),
            hidden=options.claude_rules.hides if options.claude_rules.has_read_rules else None,
        ),
        Shell(
            cwd=root,
            denied_commands=[],
            default_timeout=MAX_FOREGROUND_WAIT,
            allow_interactive=True,
            env=without_secrets(options.shell_env if options.shell_env is not None else os.environ, settings),
            tools=["shell"],
        ),
        ShellOutputs(),
    ]
    limits = TruncatedToolOutputs(bands=[Band(over=MAX_OUTPUT_CHARS, action=Truncate(max_chars=MAX_OUTPUT_CHARS))])
    approvals = RequestInput(partial(_ask_or_deny, options.plugins))
    meter = CostMeter(spending)
    # One instance for the main agent and its delegates: a delegate's changes are the turn's too.
    checkpointing = [Checkpoints(options.checkpoints)] if options.checkpoints is not None else []
    # DBOS is imported only for a durable run: a plain one never pays for it.
    durability: list[AbstractCapability[Any]] = []
    tool_steps: list[AbstractCapability[Any]] = []
    if options.durable:
        from pydantic_ai.durable_exec.dbos import DBOSDurability

        from code_puppy.durable.tool_steps import DurableToolSteps

        durability, tool_steps = [DBOSDurability()], [DurableToolSteps()]

    def run_frame() -> list[AbstractCapability[Any]]:
        """The outermost entries of every agent's list, new for each agent but the shared checkpoints."""
        return [
            # The run's nesting (`in_main_run`): the main conversation's run, or one delegated from inside it.
            RunDepth(),
            # Outermost around tool execution: its snapshots enclose everything the other capabilities do to a call.
            *checkpointing,
            LocalWorkspace(root),
            ProviderRetries(settings.run),
            # Tools, instructions and the conversation cached; OpenAI requests keyed by the session.
            *prompt_caching(settings.run.prompt_cache),
        ]

    def guards() -> list[AbstractCapability[Any]]:
        """What every agent's tool calls and results pass through: the shared output limits, then `CutOffCalls` (a
        malformed call's JSON repaired where nothing is lost, a cut-off one refused)."""
        return [limits, CutOffCalls()]

    delegates = [
        SubAgent(
            Agent(
                (options.agent_models or {}).get(definition.name),
                deps_type=RunDeps,
                name=definition.name,
                description=definition.description,
                # The main list's entries a delegate keeps, in the same order: its own frame, its scope, the shared
                # tools and their guards, and the shared approvals and meter.
                capabilities=[
                    *run_frame(),
                    AgentScope(policy, root, definition=definition),
                    *tools,
                    *guards(),
                    approvals,
                    meter,
                ],
                retries={"tools": 3},
                defer_model_check=True,
            )
        )
        for definition in options.agents
    ]
    return Agent(
        options.model,
        deps_type=RunDeps,
        # Durable runs record their steps under this name: it is compatibility data, never to be renamed.
        name=DURABLE_AGENT_NAME if options.durable else None,
        capabilities=[
            # Outermost around every tool call: a finished call's recorded result is all a resumed run sees of it.
            *tool_steps,
            *run_frame(),
            Steering(),
            # The instructions, and what a file-defined agent or command in charge may use (before the policy,
            # which every call it lets through still passes).
            scope,
            *tools,
            RepoContext(
                workspace_dir=root,
                home_dir=Path.home() if Path.home() in root.parents else None,
                filenames=("AGENTS.md", "CLAUDE.md", ".code-puppy/instructions.md"),
                expose_inventory_tool=False,
            ),
            # Their instructions name `delegate_task` and the plan tools only while the scope in charge offers them.
            ScopedSubAgents(agents=delegates, include_self=True, agent_folders=None, scope=scope),
            # The model's task list, one per run; its changes are events the chat and stream-json show.
            *([ScopedPlanning(scope=scope)] if settings.tools.planning else []),
            *options.skills,
            *mcp_servers,
            *guards(),
            *(options.plugins.capabilities if options.plugins is not None else []),
            # Approvals: the run's `ask` answers while the run waits; with nobody to ask, calls are denied with a
            # reason instead of ending the run with DeferredToolRequests output.
            approvals,
            # Before compaction, so a spent budget stops a step before its summary is paid for too.
            meter,
            # User policy first, compaction as the safety net on what remains (history/compaction.py): both see the
            # request as every capability above left it, and what they accept becomes the run's history.
            *user_processing,
            *(
                [PersistentCompaction(compaction, before_store=plugins.pre_compact if plugins is not None else None)]
                if compaction is not None
                else []
            ),
            # Custody of the run: step by step while it runs, then its whole transcript once it succeeds. The only
            # after_run implementer, so its position is inert; it sits last as the run's final custodian.
            TurnJournal(),
            HistoryPersistence(),
            # Model requests as DBOS steps inside a durable run's workflow; it orders itself innermost.
            *durability,
        ],
        # A coding model often misses a path or an edit anchor twice in a row; pydantic-ai's default of one
        # retry would end the whole run there.
        retries={"tools": 3},
        instructions=options.instructions,
        defer_model_check=True,
    )


def without_secrets(environment: Mapping[str, str], settings: Settings) -> dict[str, str]:
    """`environment` without the variables no command run for the agent may see: every provider's credentials
    (`SECRET_ENV_PATTERNS`), the `api_key_env` of each `[models]` entry, and what any MCP server's config reads (a
    disabled one's too)."""
    patterns = [
        *SECRET_ENV_PATTERNS,
        *(endpoint.api_key_env for endpoint in settings.models.values() if endpoint.api_key_env),
    ]
    if settings.mcp_servers:
        from code_puppy.mcp.server import referenced_variables

        patterns += [name for server in settings.mcp_servers.values() for name in referenced_variables(server)]
    return {
        name: value
        for name, value in environment.items()
        if not any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)
    }


def capability(agent: Agent[Any, Any], kind: type[C]) -> C | None:
    """The agent's capability of type `kind`, if it has one (the live object: the policy's mode is switched on it)."""
    return next((found for found in agent.root_capability.capabilities if isinstance(found, kind)), None)


class TruncatedToolOutputs(ToolOutputLimits[Any]):
    """Tool-output limits that only truncate, so no `read_tool_result` spill tool is offered."""

    def get_toolset(self) -> None:
        return None


async def _ask_or_deny(
    plugins: PluginHost | None, ctx: RunContext[Any], requests: DeferredToolRequests, token: str
) -> DeferredToolResults | None:
    if (deps := deps_of(ctx)) is not None and deps.ask is not None:
        if plugins is None:
            return await deps.ask(ctx, requests, token)
        # Plugins hear of each question before it is asked (Claude Code's Notification and PermissionRequest), and
        # may answer it instead of the user.
        answered: dict[str, bool | ToolDenied] = {}
        for call in requests.approvals:
            summary = str(requests.metadata.get(call.tool_call_id, {}).get("summary") or call.tool_name)
            decision = await plugins.permission_request(call, summary, deps.session)
            if decision is not None:
                answered[call.tool_call_id] = decision.permission == "allow" or ToolDenied(decision.reason or "Denied.")
        left = [call for call in requests.approvals if call.tool_call_id not in answered]
        if not left and not requests.calls:
            return requests.build_results(approvals=answered)
        asked = await deps.ask(ctx, replace(requests, approvals=left), token)
        if asked is None or not answered:
            return asked
        return replace(asked, approvals={**asked.approvals, **answered})
    reason = ToolDenied("Nobody can approve this call in a non-interactive run; it was denied. Do not retry it.")
    return requests.build_results(
        approvals={call.tool_call_id: reason for call in requests.approvals},
        calls={call.tool_call_id: reason for call in requests.calls},
    )
