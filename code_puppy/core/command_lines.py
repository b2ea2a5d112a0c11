"""A file command's `` !`cmd` `` lines, run before its prompt is sent, their output in their place (Claude Code's way).

Only a trusted command's (the user's own, or a project's whose file `code-puppy trust` recorded as it is): each line
is a shell call like the model's, so it passes the plugins' `pre_tool_call` and the permission policy (with the
command's `allowed-tools` grant in force, as in Claude Code, where `Bash(git status:*)` lets `!`git status`` run),
asks where a call would ask and someone can answer, and runs in the sandbox where the shell tool would. The lines are
the command author's, not the model's, so the narrowing of its `allowed-tools` (what the model is offered) does not
apply to them. A line that may not run is replaced by the reason, and the user is told in one line. An untrusted
project's command is sent as it is written, with a one-line note.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pydantic_ai import RunContext
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import DeferredToolRequests, ToolApproved
from pydantic_ai.usage import RunUsage

from code_puppy.definitions.file_commands import SHELL_LINE
from code_puppy.plugins.process import run_shell
from code_puppy.run.deps import RunDeps
from code_puppy.sandbox import SandboxUnavailable
from code_puppy.trust import project_trust

if TYPE_CHECKING:
    from collections.abc import Callable

    from code_puppy.core.conversation import Conversation
    from code_puppy.definitions.file_commands import FileCommand
    from code_puppy.run.deps import AskUser

LINE_TIMEOUT = 120.0
"""Seconds a line may run, as long as the shell tool's default."""
MAX_OUTPUT = 30_000
"""Characters of a line's output put in the prompt; the rest is cut, with a note."""


async def run_command_lines(
    conversation: Conversation,
    command: FileCommand,
    prompt: str,
    *,
    ask: AskUser | None,
    warn: Callable[[str], None],
) -> str:
    """`prompt` (`command`'s expanded body) with each `` !`cmd` `` replaced by what it printed, or by why it did not
    run; call it inside `conversation.command(command)`, so that the command's grant is in force."""
    lines = command.shell_lines(prompt)
    if not lines:
        return prompt
    if not command.trusted:
        project = conversation.project
        why = project_trust(project.root).why_not(command.path.relative_to(project.root).as_posix())
        note = f"the !`…` lines of /{command.name} were not run ({why}; `code-puppy trust` lets them run)"
        warn(note)
        return f"{prompt}\n\n(Note: {note}; they are sent as written.)"
    outputs: dict[str, str] = {}
    for line in dict.fromkeys(lines):
        outputs[line] = await _run_line(conversation, command, line, ask=ask, warn=warn)
    return SHELL_LINE.sub(lambda match: outputs.get((match[1] or match[2]).strip(), match[0]), prompt)


async def _run_line(
    conversation: Conversation, command: FileCommand, line: str, *, ask: AskUser | None, warn: Callable[[str], None]
) -> str:
    project = conversation.project
    refused, line = await _refusal(conversation, command, line, ask)
    if refused is not None:
        warn(f"/{command.name}: `{line}` was not run: {refused}")
        return f"(`{line}` was not run: {refused})"
    try:
        wrapped, environment = project.agent_command(line)
    except SandboxUnavailable as exc:
        warn(f"/{command.name}: `{line}` was not run: {exc}")
        return f"(`{line}` was not run: {exc})"
    done = await run_shell(wrapped, cwd=project.root, timeout=LINE_TIMEOUT, env=environment, merge_stderr=True)
    if done.returncode is None:
        return f"(`{line}` ran out of time after {LINE_TIMEOUT:.0f} seconds)"
    output = done.stdout.rstrip("\n")
    if len(output) > MAX_OUTPUT:
        output = f"{output[:MAX_OUTPUT]}\n(… {len(output) - MAX_OUTPUT} more characters cut)"
    return output if done.returncode == 0 else f"{output}\n(exit {done.returncode})".lstrip("\n")


async def _refusal(
    conversation: Conversation, command: FileCommand, line: str, ask: AskUser | None
) -> tuple[str | None, str]:
    """Why `line` may not run, or None when it may (after asking, where the policy asks and someone can answer); and
    the line to run, as a plugin's `pre_tool_call` rewrote it (the policy decides on that one)."""
    project = conversation.project
    args: dict[str, Any] = {"command": line}
    policy = project.policy
    plugins = policy.pre_tool_call
    hooked = await plugins("shell", args, conversation.session, "") if plugins is not None else None
    if hooked is not None and hooked.permission == "deny":
        return hooked.reason, line
    if hooked is not None and hooked.args is not None:
        rewritten = hooked.args.get("command")
        if not isinstance(rewritten, str) or not rewritten.strip():
            return "a hook changed it into no command", line
        line = rewritten
        args = {"command": line}
    scope = project.live.scope
    if scope.mode != policy.mode:  # the agent in charge runs in a stricter mode
        policy = replace(policy, mode=scope.mode)
    decision, reason = policy.decide("shell", args)
    if hooked is not None and hooked.permission == "allow" and decision == "ask" and not reason:
        decision = "allow"  # as for the model's calls: the mode's own question only
    elif hooked is not None and hooked.permission == "ask" and decision == "allow":
        decision = "ask"
    if decision == "allow" or (decision == "ask" and policy.scope("shell", args) in policy.session_allowed):
        return None, line
    if decision == "ask" and ask is not None:
        return (None if await _approved(conversation, command, line, ask) else "the user did not allow it"), line
    if decision == "ask" and not reason:
        reason = (
            f"it needs the user's approval in '{policy.mode}' mode and nobody can answer here "
            "(`--allow`, a `Bash(…)` entry in allowed-tools, or another mode lets it run)"
        )
    return reason.removesuffix(" Do not retry it."), line  # said to the user and in the prompt, not to a model


async def _approved(conversation: Conversation, command: FileCommand, line: str, ask: AskUser) -> bool:
    """Ask the user about `line` as about the shell tool's call, through the front end's approval question."""
    policy = conversation.project.policy
    call = ToolCallPart("shell", {"command": line}, tool_call_id=f"command-line-{abs(hash(line))}")
    metadata = {"scope": policy.scope("shell", call.args_as_dict()), "summary": f"run `{line}` for /{command.name}"}
    requests = DeferredToolRequests(approvals=[call], metadata={call.tool_call_id: metadata})
    context = RunContext[Any](deps=RunDeps(conversation.session), model=conversation.model, usage=RunUsage())
    results = await ask(context, requests, "")
    answer = results.approvals.get(call.tool_call_id) if results is not None else None
    return answer is True or isinstance(answer, ToolApproved)
