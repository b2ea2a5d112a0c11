"""The hooks a plugin may implement: names and argument names are the public API (DESIGN §3 "Plugins").

An implementation takes any subset of its hook's arguments, by name, and may be `async`. Implementations run in
plugin order (discovery order; pluggy's `tryfirst`/`trylast` move one to the front or back), one at a time, and an
exception is reported once per plugin and otherwise ignored, except in `pre_tool_call`, where it blocks the call.
`session` is a read-only `SessionView`: `id`, `project_dir`, `model`, `permission_mode` and `messages` (the durable
history). Tool-call hooks also get the call's `tool_call_id`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from code_puppy.plugins import RegisterCommand, hookspec

if TYPE_CHECKING:
    from pydantic_ai import Agent
    from pydantic_ai.agent import AgentRunResult
    from pydantic_ai.capabilities import AbstractCapability

    from code_puppy.config import Settings
    from code_puppy.plugins import Context, SessionView, ToolDecision


@hookspec
def startup(settings: Settings) -> None:
    """Once, before the first run. `settings.plugins.options["NAME"]` is the plugin's `[plugins.NAME]` table."""


@hookspec
def shutdown() -> None:
    """Once, when code-puppy is done."""


@hookspec
def register_commands(register: RegisterCommand) -> None:
    """Add slash commands to the interactive chat: `register(name, handler, help)`."""


@hookspec
def register_capabilities(settings: Settings) -> list[AbstractCapability[Any]] | None:
    """Capabilities appended to every agent `build_pydantic_agent` builds; asked once, right after `startup`."""


@hookspec
def session_start(source: str, session: SessionView) -> Context | str | None:
    """Once per session in this process, when its first turn here starts: `source` is `startup` (a session with no
    messages yet) or `resume` (one that has some: `-c`, `-r`, `/resume`, an editor's `session/load`).

    A returned text (a `Context` or a string) reaches the model as context with that turn's prompt, in a part of its
    own; it never becomes part of the prompt.
    """


@hookspec
def session_end(reason: str, session: SessionView) -> None:
    """Once for each session `session_start` was called for, when code-puppy is done (`reason` is `exit`), before
    `shutdown`."""


@hookspec
def user_prompt_submit(prompt: str, session: SessionView) -> Context | str | None:
    """The user's prompt, before its turn starts: return a new prompt, a `Context` for the model, or None.

    Each plugin gets the prompt as the previous one rewrote it. A `Context` goes to the model beside the prompt, in a
    part of its own (titles and the search index leave it out). Raising `code_puppy.PromptBlocked(reason)` blocks
    it: nothing is sent to the model and nothing is saved. Not called for `turn_end` follow-ups.
    """


@hookspec
def agent_run_start(agent: Agent[Any, str], prompt: str, session: SessionView) -> None:
    """Before each run of the main conversation (the user's prompt, then each follow-up)."""


@hookspec
def agent_run_end(
    agent: Agent[Any, str], result: AgentRunResult[str] | None, error: BaseException | None, session: SessionView
) -> None:
    """After each run of the main conversation.

    On success `result` is set, `error` is None and `session.messages` already holds the run. On failure,
    interruption or a limit `result` is None, `error` is the exception and `session.messages` holds what the run
    completed (the checkpoint). A history change made here is overwritten by the turn-end `persist_result_history`.
    """


@hookspec
def pre_tool_call(
    tool_name: str, args: dict[str, Any], tool_call_id: str, session: SessionView
) -> ToolDecision | str | None:
    """Before a tool call runs, once per call, in every permission mode: a non-empty string blocks it.

    The first non-empty string (or `ToolDecision` with `permission="deny"`) in plugin order blocks; the model is told
    `Blocked by plugin NAME: REASON`. A `ToolDecision` may instead allow the call without the mode's question, ask
    the user, change its arguments (later plugins see the new ones) or stop the turn; a `stop` wins over everything,
    a denial over a question, a question over an allowance. A hook that raises blocks the call too (fail closed), and
    so does one that raises `TurnStopped`, which also ends the turn.
    """


@hookspec
def post_tool_call(
    tool_name: str, args: dict[str, Any], result: Any, tool_call_id: str, session: SessionView
) -> str | None:
    """After a tool call ran and returned `result` (as the model sees it); not for denied or failed calls.

    A non-empty string is feedback for the model: it is added to the result the model gets, after it, naming the
    plugin (a lint complaint the model then fixes). Raising `TurnStopped` ends the turn after the call.
    """


@hookspec
def tool_call_failed(tool_name: str, args: dict[str, Any], error: str, tool_call_id: str, session: SessionView) -> None:
    """After a tool call that ran failed (raised; what the model is told is `error`); not for denied calls."""


@hookspec
def permission_request(
    tool_name: str, args: dict[str, Any], summary: str, tool_call_id: str, session: SessionView
) -> ToolDecision | None:
    """When a call is about to be put to the user for approval (only when someone can answer), with the question's
    `summary`: a `ToolDecision` with `permission` `allow` or `deny` answers it instead of the user (the first such in
    plugin order); None lets the user be asked."""


@hookspec
def subagent_start(agent_name: str, prompt: str, tool_call_id: str, session: SessionView) -> None:
    """Before a `delegate_task` call runs its agent (`agent_name`, with `prompt`), once the call is let through."""


@hookspec
def subagent_stop(agent_name: str, result: str | None, tool_call_id: str, session: SessionView) -> None:
    """After a delegated agent's run ended: `result` is what the model gets, None when it failed."""


@hookspec
def pre_compact(trigger: str, instructions: str | None, session: SessionView) -> None:
    """Before a compaction is stored: `trigger` is `manual` (`/compact`, with its `instructions`) or `auto` (the
    compaction strategy shrank a run's history; called before the shrunk history replaces it)."""


@hookspec
def turn_end(result: AgentRunResult[str], session: SessionView) -> str | None:
    """After each successful run: a non-empty string is a follow-up prompt, run next in the same session.

    Every plugin is asked; the first non-empty prompt in plugin order runs. Never called after a failed,
    interrupted or limit-stopped run. `[plugins] max_continuations` (default 10) bounds the follow-ups per user turn.
    """
