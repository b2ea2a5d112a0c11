"""The chat's built-in slash commands and jobs: a turn, `!cmd`, and what the commands print.

Imported before the prompt shows, so heavy modules are imported inside the functions, which only run once the
runtime has loaded.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import time
from typing import TYPE_CHECKING, Any, get_args

from code_puppy.ui.input import expand_mentions

if TYPE_CHECKING:
    from code_puppy.core.run import TurnOutcome
    from code_puppy.ui.chat import Chat

MAX_SHELL_CONTEXT = 8_000
"""Characters of a `!cmd`'s output passed on to the model with the next message."""


def register_builtins(chat: Chat) -> None:
    register = chat.commands.register

    def help_(args: str) -> str:
        keys = (
            "\nWhile a turn runs: Enter steers it · Tab queues a next turn · Ctrl-C cancels it (your draft stays).\n"
            "@path attaches a file · !cmd runs a shell command · Esc-Enter or a trailing \\ adds a line · "
            "Ctrl-D quits.\nFrom another terminal: code-puppy steer TEXT."
        )
        return "\n".join(chat.commands.help_lines()) + keys

    async def model(args: str) -> str:
        runtime = await chat.ready()
        if not args:
            named = ", ".join(sorted(runtime.settings.models)) or "none"
            return f"model: {runtime.model_name} (named in config: {named}); /model NAME switches"
        runtime.switch_model(args)
        chat.model_name = args
        return f"model: {args}"

    async def new(args: str) -> str:
        runtime = await chat.ready()
        await runtime.new_session()
        return f"new session {runtime.session.id[:8]}"

    async def sessions(args: str) -> str:
        from code_puppy.sessions.commands import list_sessions

        runtime = await chat.ready()
        out = io.StringIO()
        list_sessions(runtime.store, chat.options.project_root, out)
        return out.getvalue().rstrip()

    async def resume(args: str) -> str | None:
        if not args:
            return "usage: /resume ID (/sessions lists them)"
        runtime = await chat.ready()
        await runtime.resume(args)
        show_resumed(chat)
        return None

    def usage(args: str) -> str:
        if chat.runtime is None:
            return "still loading"
        total = chat.runtime.session.usage
        return (
            f"session {chat.runtime.session.id[:8]}: {total.requests} requests · {total.input_tokens} input tokens · "
            f"{total.output_tokens} output tokens · {chat.runtime.context_used()}"
        )

    def permissions(args: str) -> str:
        from code_puppy.config import PermissionMode

        modes: tuple[str, ...] = get_args(PermissionMode)
        if chat.runtime is None:
            return "still loading"
        policy = chat.runtime.policy
        if args:
            if args not in modes:
                return f"unknown mode '{args}'; one of {', '.join(modes)}"
            policy.mode = args  # type: ignore[assignment]  # checked against the literal above
        allowed = ", ".join(sorted(policy.session_allowed)) or "nothing yet"
        return f"permission mode: {policy.mode} ({' | '.join(modes)}); allowed for this session: {allowed}"

    def steer(args: str) -> None:
        if not args:
            chat.screen.print("usage: /steer TEXT")
        elif chat.busy():
            chat.steer(args)
        else:
            chat.start_turn(args)

    def queue(args: str) -> None:
        if not args:
            chat.screen.print("usage: /queue TEXT")
        elif chat.busy():
            chat.queue(args)
        else:
            chat.start_turn(args)

    async def compact(args: str) -> str:
        from code_puppy.agents.compaction import compact_history

        runtime = await chat.ready()
        kind = runtime.settings.history.compaction
        report = await compact_history(runtime.session, runtime.model, kind=kind, focus=args or None)
        if not report.changed:
            return f"nothing to compact ({report.messages_before} messages)"
        return f"compacted {report.messages_before} → {report.messages_after} messages; the old history stays stored"

    async def mcp(args: str) -> str:
        from code_puppy.agents.mcp_servers import McpServers

        runtime = await chat.ready()
        from code_puppy.agents.builder import capability

        servers = capability(runtime.agent, McpServers)
        toolset = servers.toolset if servers is not None else None
        if toolset is None:
            return "no MCP servers enabled (add [mcp_servers.NAME] to config.toml; `code-puppy mcp list` checks them)"
        lines: list[str] = []
        for server in toolset.servers:
            detail = f": {server.error}" if server.error else ""
            tools = ""
            if server.state == "running" and server.toolset is not None:
                tools = f" · {sum(server.offers(t.name) for t in await server.toolset.list_tools())} tools"
            lines.append(f"{server.name} ({server.transport}) {server.state}{tools}{detail}")
        return "\n".join(lines) + "\n(servers start with the first turn that needs them)"

    def exit_(args: str) -> None:
        chat.cancel_job()

    register("help", help_, "list the commands and keys")
    register("model", model, "[NAME] show or switch the model")
    register("new", new, "start a new session")
    register("sessions", sessions, "list this project's sessions")
    register("resume", resume, "ID continue a stored session")
    register("usage", usage, "tokens and requests of this session")
    register("permissions", permissions, "[MODE] show or set the permission mode")
    register("steer", steer, "TEXT send TEXT into the running turn (Enter does the same)")
    register("queue", queue, "TEXT run TEXT as the next turn (Tab does the same)")
    register("compact", compact, "[FOCUS] summarize the older history now (the old history stays stored)")
    register("mcp", mcp, "the MCP servers of this chat: status and tools")
    register("exit", exit_, "quit (Ctrl-D does the same)")


async def turn_job(chat: Chat, text: str) -> None:
    """One user turn on the shared run path, with `code-puppy steer` accepted while it runs."""
    from rich.text import Text

    from code_puppy.core.run import unrun_follow_up_note
    from code_puppy.ui.chat_sink import ChatSink, describe_usage

    prompt, attached = expand_mentions(text, chat.options.project_root)
    if attached:
        chat.screen.print(Text(f"  ↳ attached {', '.join(attached)}", style="dim"))
    runtime = await chat.ready()
    sink = ChatSink(chat.screen, chat.live, chat.options.project_root)
    started = time.monotonic()
    async with runtime.steerable():
        outcome = await runtime.turn(prompt, sink)
    sink.flush_text()
    chat.job_ok = outcome.error is None
    chat.screen.print(Text(_ending(outcome, time.monotonic() - started, describe_usage), style="dim"), "")
    if outcome.unrun_follow_up:
        limit = runtime.settings.plugins.max_continuations
        chat.screen.print(Text(unrun_follow_up_note(outcome.unrun_follow_up, limit), style="yellow"))
    if runtime.session.notice:
        chat.screen.print(Text(runtime.session.notice, style="yellow"))
        runtime.session.notice = None


def _ending(outcome: TurnOutcome, seconds: float, describe_usage: Any) -> str:
    from code_puppy.core.events import ending

    status, message = ending(outcome)
    if status == "success":
        return f"· {describe_usage(outcome.usage, seconds)}"
    if status in ("interrupted", "terminated"):
        return "⏹ turn cancelled · finished work kept"
    return f"{'⏹' if status == 'limit' else '✗'} {message}"


async def shell_job(chat: Chat, command: str) -> None:
    """`!cmd`: run a shell command in the project; its output goes above, and to the model with the next message."""
    from rich.text import Text

    if not command:
        chat.screen.print("usage: !COMMAND")
        return
    process = await asyncio.create_subprocess_shell(
        command,
        cwd=chat.options.project_root,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = await process.communicate()
    except asyncio.CancelledError:
        os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        raise
    text = output.decode(errors="replace").rstrip()
    chat.screen.print(
        Text(f"$ {command}", style="bold"), text or "(no output)", Text(f"exit {process.returncode}", style="dim")
    )
    chat.shell_context.append(
        f'<shell-command exit_code="{process.returncode}">\n$ {command}\n{text[-MAX_SHELL_CONTEXT:]}\n</shell-command>'
    )


def show_resumed(chat: Chat) -> None:
    """A short look at where a resumed session left off."""
    from rich.text import Text

    from code_puppy.sessions.commands import transcript

    runtime = chat.runtime
    if runtime is None:
        return
    lines = [line for line in transcript(runtime.session.messages) if line.strip()]
    chat.screen.print(
        Text(f"resumed session {runtime.session.id[:8]} · {len(runtime.session.messages)} messages", style="bold"),
        *(Text(line[:200], style="dim") for line in lines[-8:]),
    )
    if runtime.recovered:
        chat.screen.print(Text(runtime.recovered, style="yellow"))
        runtime.recovered = None
