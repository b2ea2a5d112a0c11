"""The chat's built-in slash commands: `Builtins`, one method per command, over the chat's `ChatControl`.

Imported before the prompt shows, so heavy modules are imported inside the methods. The chat runs a command only
once the runtime has loaded, unless it is registered as light (`LIGHT_COMMANDS`), which imports nothing heavy.
"""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, cast, get_args

from code_puppy.chat.jobs import show_resumed

if TYPE_CHECKING:
    from code_puppy.chat.commands import CommandHandler, CommandRegistry
    from code_puppy.chat.control import ChatControl

INIT_PROMPT = """\
Write a starting AGENTS.md at the root of this project for coding agents that will work on it. Look around first: \
the layout, the languages and frameworks, how to install, build, run, test, lint and format (read the build files \
and CI config, do not guess), the conventions the code follows, and anything surprising. Keep it short and \
concrete: commands in code blocks, one line per convention. If an AGENTS.md or CLAUDE.md exists, improve it instead \
of starting over."""
"""What `/init` asks the model, as Claude Code's and Codex's `/init` do."""
KEYS_HELP = (
    "\nWhile a turn runs: Enter steers it · Tab queues a next turn · Ctrl-C cancels it (your draft stays).\n"
    "@path attaches a file · !cmd runs a shell command · Esc-Enter or a trailing \\ adds a line · "
    "Ctrl-D quits.\nFrom another terminal: code-puppy steer TEXT."
)
"""What `/help` says after the list of commands."""


CLAUDE_ALIASES = {"clear": "new", "cost": "usage", "quit": "exit", "reset": "new", "tokens": "usage", "models": "model"}
"""Claude Code's, Codex's and aider's names for built-in commands: `/clear` and `/reset` start a new session, `/cost`
and `/tokens` are `/usage`."""


OTHER_COMMANDS = {
    "agents": "/agent lists the file-defined agents and puts one in charge",
    "status": "the toolbar shows the session, context, cost and mode; /model and /permissions change them",
    "context": "the toolbar shows the context used; /usage has the details",
    "config": "settings live in config.toml (README, Configuration)",
    "memory": "instructions live in AGENTS.md (or CLAUDE.md); edit it, or /init to start one",
    "approvals": "/permissions [MODE]",
    "diff": "!git diff",
    "login": "code-puppy reads API keys from the environment (OPENAI_API_KEY, ANTHROPIC_API_KEY, …)",
    "logout": "code-puppy reads API keys from the environment; unset the variable",
    "add": "@FILE in a prompt attaches that file",
    "read-only": "@FILE in a prompt attaches that file",
    "drop": "there is no set of files in the chat; @FILE attaches one to a prompt",
    "ask": "/permissions read-only (and /permissions ask to go back)",
    "code": "/permissions ask or /permissions accept-edits",
    "run": "!CMD runs a command; its output goes to the model with your next message",
    "test": "!CMD runs a command; its output goes to the model with your next message",
    "commit": "!git commit …, or ask the agent to commit",
}
"""Claude Code's, Codex's and aider's commands with no command of that name here: `/status` answers with what to use."""


LIGHT_COMMANDS = frozenset({"help", "steer", "queue", "init", "exit"})
"""The built-ins that run at once, before the runtime has loaded: they import nothing heavy (a turn they start waits
for the runtime itself)."""


def register_builtins(commands: CommandRegistry, chat: ChatControl) -> None:
    """Add the built-in commands to `commands`; plugins register theirs later and may replace them."""
    builtins = Builtins(chat, commands)
    for name, handler, help in (
        ("help", builtins.help, "list the commands and keys"),
        ("model", builtins.model, "[NAME] switch the model (no NAME: pick one, with prices)"),
        ("new", builtins.new, "start a new session"),
        ("sessions", builtins.sessions, "list this project's sessions"),
        ("resume", builtins.resume, "[ID|NAME] continue a stored session (no ID: pick one)"),
        ("rename", builtins.rename, "NAME call this session NAME (`code-puppy -r NAME` resumes it)"),
        ("fork", builtins.fork, "go on in a copy of this session; the original stays as it is"),
        ("usage", builtins.usage, "tokens and cost of this session, by kind and model"),
        ("budget", builtins.budget, "[USD|off] show the budgets, or set this chat's (--max-budget-usd)"),
        ("permissions", builtins.permissions, "[MODE] show or set the permission mode"),
        ("steer", builtins.steer, "TEXT send TEXT into the running turn (Enter does the same)"),
        ("queue", builtins.queue, "TEXT run TEXT as the next turn (Tab does the same)"),
        ("undo", builtins.undo, "put back the files the last turn changed"),
        ("rewind", builtins.rewind, "[N [both|code|conversation]] list the turns, or go back to before turn N"),
        ("compact", builtins.compact, "[FOCUS] summarize the older history now (the old history stays stored)"),
        ("mcp", builtins.mcp, "the MCP servers of this chat: status and tools"),
        ("agent", builtins.agent, "[NAME|default] list the file-defined agents, or put one in charge"),
        ("skills", builtins.skills, "list the skills the model can load"),
        ("init", builtins.init, "ask the model to write a starting AGENTS.md for this project"),
        ("exit", builtins.exit, "quit (Ctrl-D does the same)"),
    ):
        commands.register(name, handler, help, light=name in LIGHT_COMMANDS)
    for alias, target in CLAUDE_ALIASES.items():
        commands.alias(alias, target)


def register_file_commands(commands: CommandRegistry, chat: ChatControl) -> list[str]:
    """Add the commands defined in markdown files (`.code-puppy/commands`, `.claude/commands`, the user's); a
    built-in's name is never shadowed. Returns the lines to show: the files skipped and the names changed."""
    from code_puppy.definitions.file_commands import FileCommand, load_commands

    loaded = load_commands(chat.project_root, reserved=commands.names())

    def runner(command: FileCommand) -> CommandHandler:
        def run(args: str) -> None:
            chat.start_turn(command.expand(args), command=command)

        return run

    for command in loaded.items:
        commands.register(command.name, runner(command), command.help, light=True)  # a turn: it waits for the runtime
    return [f"warning: {problem}" for problem in loaded.problems] + [f"note: {note}" for note in loaded.notes]


class Builtins:
    """The built-in commands, each called with the text after its name; what one returns is printed."""

    def __init__(self, chat: ChatControl, commands: CommandRegistry) -> None:
        self._chat = chat
        self._commands = commands

    def help(self, args: str) -> str:
        return "\n".join(self._commands.help_lines()) + KEYS_HELP

    async def model(self, args: str) -> str:
        runtime = await self._chat.ready()
        note = ""
        if not args:
            from code_puppy.chat.model_choice import pick_model

            picked = await pick_model(runtime.settings, runtime.model_name)
            if picked is None:
                return f"model: {runtime.model_name} (unchanged)"
            args = picked.name
            if picked.endpoint is not None:  # a local server's model: reachable for this chat, until written down
                runtime.settings.models[picked.name] = picked.endpoint
                note = f" (this chat only; to keep it, add [models.{picked.name}] with base_url to config.toml)"
        runtime.switch_model(args)
        return f"model: {runtime.model_name}{note}"

    async def new(self, args: str) -> str:
        runtime = await self._chat.ready()
        await runtime.new_session()
        return f"new session {runtime.session.id[:8]}"

    async def sessions(self, args: str) -> str:
        from code_puppy.core.session_text import list_sessions

        runtime = await self._chat.ready()
        out = io.StringIO()
        list_sessions(runtime.store, self._chat.project_root, out)
        return out.getvalue().rstrip()

    async def resume(self, args: str) -> str | None:
        runtime = await self._chat.ready()
        if not args:
            from code_puppy.chat.picker import pick_session
            from code_puppy.errors import ConfigError

            try:
                picked = await pick_session(runtime.store, self._chat.project_root)
            except ConfigError as exc:
                return str(exc)
            if picked is None:
                return "no session picked"
            args = picked
        await runtime.resume(args)
        show_resumed(self._chat)
        return None

    async def rename(self, args: str) -> str:
        if not args:
            return "usage: /rename NAME"
        runtime = await self._chat.ready()
        if not runtime.session.messages:  # a name on a session no list shows yet would only block it for others
            return "nothing to name yet: this session has no turns (send a message first, or start with --name NAME)"
        try:
            runtime.session.rename(args)
        except ValueError as exc:
            return str(exc)
        return f"session {runtime.session.id[:8]} is now called {args!r}"

    async def fork(self, args: str) -> str:
        runtime = await self._chat.ready()
        if not runtime.session.messages:
            return "nothing to fork yet: this session has no turns"
        source = runtime.session.id
        fork = await runtime.fork()
        return f"forked session {source[:8]} → {fork.id[:8]}; you are now in the fork ({len(fork.messages)} messages)"

    def usage(self, args: str) -> str:
        runtime = self._chat.runtime
        if runtime is None:
            return "still loading"
        # Counted from the cost book, as the rows below: every request the session made, its title's included.
        total = runtime.session_cost()
        spending = runtime.project.spending
        requests = f"{total.requests} request{'s' if total.requests != 1 else ''}"
        lines = [
            f"session {runtime.session.id[:8]}: {requests} · {total.input_tokens:,} input tokens · "
            f"{total.output_tokens:,} output tokens · {total.describe()} · {runtime.context_used()}"
        ]
        book = spending.book
        for kind, model, totals in book.breakdown(runtime.session.id) if book is not None else []:
            requests = f"{totals.requests} request{'s' if totals.requests != 1 else ''}"
            tokens = f"{totals.input_tokens:,} in / {totals.output_tokens:,} out"
            lines.append(f"  {kind:<13}{model[:30]:<31}{requests:>13} · {tokens} · {totals.describe()}")
        rewrites = runtime.session.cache_epoch
        # A history rewritten after it was sent (compaction, a history processor) is written to the cache again.
        rewritten = f"history rewritten {rewrites} time{'s' if rewrites != 1 else ''} (each a cache write)"
        lines.append(f"prompt cache: {total.describe_cache() or 'nothing cached yet'} · {rewritten}")
        lines.append(f"this chat: {spending.invocation.describe()} over {spending.invocation.requests} requests")
        return "\n".join(lines)

    def budget(self, args: str) -> str:
        from dataclasses import replace

        from code_puppy.cost.spending import dollars
        from code_puppy.sessions.costs import format_cost

        runtime = self._chat.runtime
        if runtime is None:
            return "still loading"
        spending = runtime.project.spending
        if args:
            if args == "off":
                limit = None
            else:
                try:
                    limit = float(args.removeprefix("$"))
                except ValueError:
                    limit = -1.0
                if not (math.isfinite(limit) and limit > 0):  # `inf` and `1e400` would be no budget at all
                    return f"usage: /budget USD (a positive amount, e.g. /budget 2.50) or /budget off; got {args!r}"
            spending.budgets = replace(spending.budgets, max_usd=limit)
        standing = spending.standing()
        if not standing:
            return f"no budget set (this chat so far: {spending.invocation.describe()}); /budget USD sets one"
        shown = " · ".join(f"{label} {dollars(limit)}: {format_cost(spent)} spent" for label, limit, spent in standing)
        return f"budgets: {shown}"

    def permissions(self, args: str) -> str:
        from code_puppy.options import PermissionMode

        modes: tuple[str, ...] = get_args(PermissionMode)
        runtime = self._chat.runtime
        if runtime is None:
            return "still loading"
        policy = runtime.policy
        if args:
            if args not in modes:
                return f"unknown mode '{args}'; one of {', '.join(modes)}"
            from code_puppy.errors import ConfigError

            mode = cast(PermissionMode, args)  # checked against the literal above
            try:
                runtime.project.switch_mode(mode)
            except ConfigError as exc:
                return str(exc)
        allowed = ", ".join(sorted(policy.session_allowed)) or "nothing yet"
        return f"permission mode: {policy.mode} ({' | '.join(modes)}); allowed for this session: {allowed}"

    def steer(self, args: str) -> str | None:
        if not args:
            return "usage: /steer TEXT"
        if self._chat.busy():
            self._chat.steer(args)
        else:
            self._chat.start_turn(args)
        return None

    def queue(self, args: str) -> str | None:
        if not args:
            return "usage: /queue TEXT"
        if self._chat.busy():
            self._chat.queue(args)
        else:
            self._chat.start_turn(args)
        return None

    async def undo(self, args: str) -> str:
        from code_puppy.chat.rewinding import undo

        return await undo(self._chat, args)

    async def rewind(self, args: str) -> str:
        from code_puppy.chat.rewinding import rewind

        return await rewind(self._chat, args)

    async def compact(self, args: str) -> str:
        from code_puppy.cost.prompt_cache import prompt_caching
        from code_puppy.cost.spending import CostMeter
        from code_puppy.history.compaction import compact_history

        runtime = await self._chat.ready()
        kind = runtime.settings.history.compaction
        spending = runtime.project.spending
        spending.session_id = runtime.session.id  # the summary is this session's to pay for
        await runtime.project.plugins.pre_compact("manual", args or None, runtime.session)
        report = await compact_history(
            runtime.session,
            runtime.model,
            kind=kind,
            focus=args or None,
            summary_capabilities=[
                *prompt_caching(runtime.settings.run.prompt_cache),
                CostMeter(spending, kind="compaction"),
            ],
        )
        if not report.changed:
            return f"nothing to compact ({report.messages_before} messages)"
        return f"compacted {report.messages_before} → {report.messages_after} messages; the old history stays stored"

    async def mcp(self, args: str) -> str:
        runtime = await self._chat.ready()
        servers = runtime.project.live.mcp_servers
        toolset = servers.toolset if servers is not None else None
        if toolset is None:
            return "no MCP servers enabled (add [mcp_servers.NAME] to config.toml; `code-puppy mcp list` checks them)"
        lines: list[str] = []
        for server in toolset.servers:
            detail = f": {server.error}" if server.error else ""
            tools = ""
            if server.state == "running":
                tools = f" · {len(toolset.names[server.name])} tools"  # as the model was last offered them
            lines.append(f"{server.name} ({server.transport}) {server.state}{tools}{detail}")
        return "\n".join(lines) + "\n(servers start with the first turn that needs them)"

    async def agent(self, args: str) -> str:
        runtime = await self._chat.ready()
        project = runtime.project
        if args:
            from code_puppy.errors import ConfigError

            try:
                definition = None if args == "default" else project.find_agent(args)
                model_name = project.agent_model_name(definition)
                if project.options.model is None and model_name != runtime.model_name:
                    runtime.switch_model(model_name)
            except ConfigError as exc:
                return str(exc)
            project.use_agent(definition)
            who = f"agent {definition.name}" if definition is not None else "code-puppy itself"
            return f"{who} is in charge from the next turn (model {runtime.model_name})"
        active = project.active_agent
        lines = [f"{'*' if active is None else ' '} default  code-puppy itself"]
        for definition in project.agent_definitions.items:
            mark = "*" if active is not None and active.name == definition.name else " "
            lines.append(f"{mark} {definition.name}  {definition.description} ({definition.scope})")
        return "\n".join(lines) + "\n/agent NAME puts one in charge; the model can also delegate to each by name"

    async def skills(self, args: str) -> str:
        from code_puppy.definitions.files import load_skill_infos

        runtime = await self._chat.ready()
        loaded = load_skill_infos(self._chat.project_root)
        skills = [skill for skill in loaded.items if skill.name in runtime.project.skill_names]
        if not skills:
            return "no skills (add .code-puppy/skills/NAME/SKILL.md or .claude/skills/NAME/SKILL.md)"
        lines = [f"{skill.name}  {skill.description} ({skill.scope})" for skill in skills]
        return "\n".join(lines) + "\n(the model loads one when it needs it)"

    def init(self, args: str) -> None:
        self._chat.start_turn(f"{INIT_PROMPT}\n\n{args}".strip())

    def exit(self, args: str) -> None:
        """Cancels the running job; the chat leaves when a command named `exit` returns."""
        self._chat.cancel_job()
