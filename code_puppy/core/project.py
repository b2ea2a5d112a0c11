"""`Project`: one project root in this process, with its settings, plugins, sessions store and agent, made once.

Every front end starts here: the settings, the model and the plugins come from `RunOptions` in this one place, a
bad one stops the invocation (exit 2) before anything is sent, and the agent is built once, so switching the model,
starting a new session or resuming one keeps its MCP servers, plugin state and "always allow" approvals.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models import Model

from code_puppy.checkpoints.capability import Checkpoints
from code_puppy.checkpoints.rewind import Rewinder, finish_interrupted_rewind, interrupted_line, open_shadow
from code_puppy.checkpoints.shadow import ShadowRepo
from code_puppy.config import Settings, load_settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent, capability, without_secrets
from code_puppy.cost.spending import Budgets, Spending, unpriced_model_message
from code_puppy.definitions.agent_scope import AgentScope
from code_puppy.definitions.file_commands import FileCommand
from code_puppy.definitions.files import AgentDefinition, Loaded, folders, load_agents, skill_files
from code_puppy.definitions.skill_library import skill_capabilities, skill_names
from code_puppy.errors import ConfigError
from code_puppy.models import choose_model_name, definition_model_name, resolve_model
from code_puppy.options import PermissionMode, RunOptions
from code_puppy.permissions.claude_rules import ClaudePermissions, claude_permissions, with_command_line
from code_puppy.permissions.claude_settings import claude_settings_files
from code_puppy.permissions.policy import PermissionPolicy
from code_puppy.plugins import RegisterCommand
from code_puppy.plugins.discovery import load_plugins
from code_puppy.plugins.host import PluginHost
from code_puppy.run.deps import RunDeps
from code_puppy.run.history_persistence import recover_interrupted_turn
from code_puppy.sandbox import ProjectSandbox, SandboxUnavailable
from code_puppy.sandbox.sandboxed_shell import SandboxedShell
from code_puppy.sessions.search import start_indexer
from code_puppy.sessions.session import Session, open_session
from code_puppy.sessions.store import build_serializers, open_store

if TYPE_CHECKING:
    from code_puppy.mcp.servers import McpServers


@dataclass(frozen=True)
class LiveCapabilities:
    """The capabilities of the built agent that the front ends steer while it lives, taken from it once when it is
    built: the policy (`/permissions` switches its mode, approvals remember scopes on it), the scope (the file-defined
    agent in charge, a file command's narrowing), the checkpoints (what a turn changed), the shell (its commands end
    with the project) and the MCP servers (`/mcp`)."""

    policy: PermissionPolicy
    scope: AgentScope
    shell: SandboxedShell
    checkpoints: Checkpoints | None
    mcp_servers: McpServers | None

    @classmethod
    def of(cls, agent: Agent[RunDeps, str]) -> LiveCapabilities:
        policy, scope, shell = (
            capability(agent, PermissionPolicy),
            capability(agent, AgentScope),
            capability(agent, SandboxedShell),
        )
        assert policy is not None and scope is not None and shell is not None  # build_pydantic_agent always has them
        # The builder imports the MCP code only when servers are configured: until then, there is no McpServers.
        mcp = sys.modules.get("code_puppy.mcp.servers")
        servers = capability(agent, mcp.McpServers) if mcp is not None else None
        return cls(policy, scope, shell, capability(agent, Checkpoints), servers)


class Project:
    """A project root as this process serves it. Building one reads config and plugins and opens the sessions store;
    `start` builds the agent and enters it (MCP servers start with the first run that lists tools); `close` ends
    both.

    Raises (from the constructor):
        ConfigError: A bad config, model or plugin set-up; `StoreError` for a sessions database that cannot be used.
    """

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.root = options.project_root
        settings = load_settings(self.root)
        self.settings: Settings = settings.model_copy(update={"mcp_servers": {}}) if options.no_mcp else settings
        self.claude = read_claude_permissions(self.root, options)
        """The permission rules of Claude Code's settings files, and their default mode."""
        self.mode: PermissionMode = options.permission_mode or settings.permissions.mode
        """The permission mode the project starts in: the command line's, else config.toml's, else a Claude Code
        settings file's `defaultMode`, else ask."""
        if options.permission_mode is None and settings.source_of("permissions", "mode") is None:
            self.mode = self.claude.default_mode or self.mode
        self.model_name = choose_model_name(self.settings, options.model)
        self._models: dict[str, Model] = {self.model_name: resolve_model(self.settings, self.model_name)}
        self.user_model_name = self.model_name
        """The model the user chose (`-m`, config), which `inherit` and a switch back to code-puppy go back to."""
        # Prompts, so they load whether the project is trusted or not: they can only narrow the user's mode.
        self.agent_definitions = load_agents(self.root)
        """The file-defined agents (`.code-puppy/agents`, `.agents/agents`, `.claude/agents`, the user's)."""
        self._on_session_model: set[str] = set()
        """Agents whose `model` cannot be used here: they run on the user's model, as Claude Code runs them."""
        for definition in self.agent_definitions.items:
            if definition.model is not None and (why := self._model_problem(definition.model)) is not None:
                self._on_session_model.add(definition.name)
                self.agent_definitions.notes.append(
                    f"agent '{definition.name}': {why}; it runs on the session's model ({self.user_model_name})"
                )
        report(self.agent_definitions)
        self.active_agent: AgentDefinition | None = None
        """The file-defined agent in charge (`--agent`, `/agent`), or None for code-puppy itself."""
        if options.agent is not None:
            self.active_agent = self.find_agent(options.agent)
            if options.model is None:
                self.model_name = self.agent_model_name(self.active_agent)
        self.plugins = (
            PluginHost(project_dir=self.root, debug=options.debug)
            if options.no_plugins
            else load_plugins(self.settings, self.root, debug=options.debug)
        )
        self.sandbox = ProjectSandbox(self.settings.sandbox, self.root)
        self.require_sandbox(self.mode)  # before anything runs
        self.store = open_store()
        self.spending = Spending(
            budgets=Budgets.of(self.settings.budget, options.max_budget_usd),
            book=self.store.costs,
            project_dir=self.root,
        )
        """What this process spends, and its budgets."""
        try:
            self.check_priced(self.model_name)  # the main model, which also writes summaries and serves delegates
        except ConfigError:
            self.store.close()
            raise
        self.shadow: ShadowRepo | None = None
        """Where the project's files are checkpointed; None when checkpoints are off."""
        self.checkpoint_note: str | None = None
        """Why checkpoints are off, when they should be on (no git), in one line."""
        if self.settings.checkpoints.enabled:
            self.shadow, self.checkpoint_note = open_shadow(
                self.root, max_file_mb=self.settings.checkpoints.max_file_mb
            )
        self.durable = options.durable or options.durable_run is not None
        """Whether the agent is built for durable runs (a headless front end also sets it for `[run] durable`)."""
        self._agent: Agent[RunDeps, str] | None = None
        self._live: LiveCapabilities | None = None
        self._stopped = False
        self._indexer: threading.Event | None = None
        self.skill_names: set[str] = set()
        """The skills the model can load, once started."""

    @property
    def agent(self) -> Agent[RunDeps, str]:
        assert self._agent is not None, "start() builds the agent"
        return self._agent

    @property
    def live(self) -> LiveCapabilities:
        assert self._live is not None, "start() builds the agent"
        return self._live

    @property
    def policy(self) -> PermissionPolicy:
        """The live permission policy: `/permissions` switches its mode, approvals remember scopes on it."""
        return self.live.policy

    def find_agent(self, name: str) -> AgentDefinition:
        """The file-defined agent `name`.

        Raises:
            ConfigError: There is none, in one line naming the ones there are.
        """
        for definition in self.agent_definitions.items:
            if definition.name == name:
                return definition
        known = ", ".join(sorted(d.name for d in self.agent_definitions.items)) or "none defined"
        raise ConfigError(f"unknown agent '{name}' (agents: {known}; see `code-puppy agents list`)")

    def agent_model_name(self, definition: AgentDefinition | None) -> str:
        """The model `definition` runs on (the user's for code-puppy itself), named as `-m` names one."""
        if definition is None or definition.name in self._on_session_model:
            return self.user_model_name
        return definition_model_name(self.settings, definition.model, self.user_model_name)

    def use_agent(self, definition: AgentDefinition | None) -> None:
        """Put `definition` (None: code-puppy itself) in charge of the following runs: its instructions, its tools
        and, unless `-m` chose one, its model."""
        self.active_agent = definition
        self.live.scope.definition = definition
        if self.options.model is None:
            self.model_name = self.agent_model_name(definition)

    def narrow_to(self, command: FileCommand | None) -> None:
        """Narrow the following runs to `command`'s `allowed-tools` (a file command's turn), and, for a trusted
        command (the user's, or a trusted project's), let those tools run without asking; None: not any more."""
        grant = command.grant if command is not None and command.grant.tools is not None else None
        self.live.scope.command_grant = grant
        trusted = grant is not None and grant.tools is not None and command is not None and command.trusted
        granted = grant.tools if trusted and grant is not None and grant.tools is not None else frozenset[str]()
        self.policy.granted_tools = granted - {"shell"}
        # A bare `Bash` grants every command, as an allow-list entry `*` covers it (never a redirection or `$(…)`).
        patterns = grant.shell_patterns if grant is not None else None
        self.policy.granted_commands = (patterns or ("*",)) if "shell" in granted else ()

    def _model_problem(self, written: str) -> str | None:
        try:
            self.model(definition_model_name(self.settings, written, self.user_model_name))
        except ConfigError as exc:
            return f"model '{written}': {exc}"
        return None

    def require_sandbox(self, mode: PermissionMode) -> None:
        """Make sure `mode` has the sandbox when it runs commands in one (`auto`, and those in `[sandbox] modes`).

        Raises:
            ConfigError: There is none here, in one line saying why and what to do instead.
        """
        if mode != "auto" and mode not in self.settings.sandbox.modes:
            return
        try:
            self.sandbox.get()
        except SandboxUnavailable as exc:
            instead = "use another mode (accept-edits, ask)" if mode == "auto" else f"drop {mode} from [sandbox] modes"
            raise ConfigError(
                f"permission mode {mode} needs the sandbox, and {exc}; {instead}, or see `code-puppy sandbox check`"
            ) from None

    def switch_mode(self, mode: PermissionMode) -> None:
        """Go on in permission mode `mode` (`/permissions`, an editor's mode), the sandbox checked first.

        Raises:
            ConfigError: `mode` needs the sandbox and there is none here, in one line.
        """
        self.require_sandbox(mode)
        self.policy.mode = mode

    def agent_command(self, command: str) -> tuple[str, dict[str, str]]:
        """How a command plugins run for the agent runs (`SessionView.run_agent_command`): as the `shell` tool's."""
        if self.policy.sandboxes(command):
            return self.sandbox.get().wrap(command, cwd=self.root), self.command_environment()
        return command, self.command_environment()

    def command_environment(self) -> dict[str, str]:
        """The environment for a command run on the user's behalf whose output the model gets (`!cmd`): this one
        without the secrets, as the shell tool's."""
        return without_secrets(os.environ, self.settings)

    def check_priced(self, name: str) -> None:
        """Refuse model `name` when a budget is set and nothing can price it (unless `[budget] unknown_price`).

        Raises:
            ConfigError: In one line naming the model and what to do.
        """
        if self.spending.unpriced([self.model(name)]) is not None:
            raise ConfigError(unpriced_model_message(name))

    def model(self, name: str | None = None) -> Model:
        """The model named `name` (a model string or a `[models]` name), the chosen one by default; made once."""
        name = name or self.model_name
        if name not in self._models:
            self._models[name] = resolve_model(self.settings, name)
        return self._models[name]

    def rewinder(self) -> Rewinder:
        """Rewinds this project's sessions; it restores files with git even when `[checkpoints] enabled = false`
        (checkpoints taken before it was switched off)."""
        shadow = self.shadow
        if shadow is None:
            shadow, _ = open_shadow(self.root, max_file_mb=self.settings.checkpoints.max_file_mb)
        return Rewinder(self.store, self.root, shadow)

    async def open_session(self) -> tuple[Session, str | None]:
        """The session the options ask for (new, `-c`, `-r`), with the note about what it recovered: a rewind a killed
        process left half done, an interrupted turn."""
        finished = await finish_interrupted_rewind(self.shadow, self.store) if self.shadow is not None else None
        rewound = interrupted_line(finished) if finished is not None else None
        session = await open_session(
            self.store,
            self.root,
            model=self.model_name,
            continue_last=self.options.continue_last,
            resume=self.options.resume,
            fork=self.options.fork,
            name=self.options.name,
        )
        if (self.options.continue_last or self.options.resume) and self.options.durable_run is None:
            from code_puppy.durable.runs import refuse_interrupted_durable_run

            refuse_interrupted_durable_run(session.id)
        recovered = await recover_interrupted_turn(session)
        return session, "; ".join(filter(None, (rewound, recovered))) or None

    async def start(self, register_command: RegisterCommand | None = None) -> None:
        """Start the plugins (their capabilities join the agent), build the agent and enter it."""
        await self.plugins.startup(self.settings)
        if register_command is not None:
            await self.plugins.register_commands(register_command)
        agent_models = {
            definition.name: self.model(name)
            for definition in self.agent_definitions.items
            if (name := self.agent_model_name(definition)) != self.user_model_name
        }
        skills = _skills(self.root)
        self.skill_names = skill_names(skills)
        self._agent = build_pydantic_agent(
            self.settings,
            AgentOptions(
                project_root=self.root,
                model=self.model(),
                permission_mode=self.mode,
                allow=self.options.allow,
                claude_rules=self.claude.rules,
                instructions=self.options.append_system_prompt,
                plugins=self.plugins,
                sandbox=self.sandbox,
                spending=self.spending,
                checkpoints=self.shadow,
                agents=self.agent_definitions.items,
                agent_models=agent_models,
                skills=skills,
                durable=self.durable,
            ),
        )
        self._live = LiveCapabilities.of(self._agent)
        if self.active_agent is not None:
            self.use_agent(self.active_agent)
        self.plugins.agent_command = self.agent_command
        self.plugins.permission_mode = lambda: self.policy.mode
        if self._live.checkpoints is not None:
            self.plugins.tracked = self._live.checkpoints.tracked
        # Built while the first model request is out, rather than when its answer is first journaled. Not a daemon:
        # an exit waits for it (a tenth of a second at most) instead of tearing the interpreter down under it.
        threading.Thread(target=build_serializers, name="code-puppy serializers").start()
        # Likewise the price table (~30 ms to load), which pricing the first response would otherwise wait for.
        threading.Thread(target=self.spending.priceable, args=(self.model(),), name="code-puppy prices").start()
        # Sessions stored before the search index existed are read into it beside the run (sessions/search.py).
        self._indexer = start_indexer(self.store.database.location)
        await self._agent.__aenter__()

    async def stop(self) -> None:
        """Leave the agent (MCP servers stop, the provider's HTTP client closes) and shut the plugins down; once."""
        if self._stopped or self._agent is None:
            return
        self._stopped = True
        try:
            await self._agent.__aexit__(None, None, None)
        finally:
            try:
                await self.plugins.session_end()
                await self.plugins.shutdown()
            finally:
                # Nothing the agent's commands started outlives the chat or the headless invocation.
                if self._live is not None:
                    self._live.shell.end_commands()
                self.sandbox.close()

    async def close(self) -> None:
        """`stop`, then close the sessions store."""
        try:
            await self.stop()
        finally:
            if self._indexer is not None:
                self._indexer.set()
            if self.shadow is not None:
                self.shadow.close()
            self.store.close()

    async def __aenter__(self) -> Project:
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.close()


def read_claude_permissions(root: Path, options: RunOptions) -> ClaudePermissions:
    """The permissions of Claude Code's settings files for this project and of the command line (`--allowedTools`,
    `--disallowedTools`), with one line on stderr for each file that cannot be read and each thing in them that does
    not apply."""
    files, warnings = claude_settings_files(root)
    permissions = claude_permissions(files, root.resolve())
    if options.allowed_tools or options.disallowed_tools:
        permissions = with_command_line(permissions, options.allowed_tools, options.disallowed_tools, root.resolve())
    for warning in warnings:
        print(f"code-puppy: warning: {warning}", file=sys.stderr, flush=True)
    for note in permissions.notes:
        print(f"code-puppy: note: {note}", file=sys.stderr, flush=True)
    return permissions


def report(loaded: Loaded[Any]) -> None:
    """One line on stderr for each definition skipped or cut, and for each shadowed one."""
    for problem in loaded.problems:
        print(f"code-puppy: warning: {problem}", file=sys.stderr, flush=True)
    for note in loaded.notes:
        print(f"code-puppy: note: {note}", file=sys.stderr, flush=True)


def _skills(root: Path) -> list[AbstractCapability[Any]]:
    """The skills folders' skills for the agent (the harness parses them only when there is a `SKILL.md`)."""
    if not any(next(skill_files(folder), None) for folder, _ in folders(root, "skills")):
        return []

    loaded = skill_capabilities(root)
    report(loaded)
    return loaded.items
