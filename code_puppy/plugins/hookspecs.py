"""The hooks a plugin may implement: names and argument names are the public API (DESIGN §3 "Plugins").

An implementation takes any subset of its hook's arguments, by name, and may be `async`. Implementations run in
plugin order (discovery order; pluggy's `tryfirst`/`trylast` move one to the front or back), one at a time, and an
exception is reported once per plugin and otherwise ignored, except in `pre_tool_call`, where it blocks the call.
`session` is a read-only `SessionView`: `id`, `project_dir`, `model` and `messages` (the durable history).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from code_puppy.plugins import RegisterCommand, hookspec

if TYPE_CHECKING:
    from pydantic_ai import Agent
    from pydantic_ai.agent import AgentRunResult
    from pydantic_ai.capabilities import AbstractCapability

    from code_puppy.config import Settings
    from code_puppy.plugins import SessionView


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
def user_prompt_submit(prompt: str, session: SessionView) -> str | None:
    """The user's prompt, before its turn starts: return a new prompt, or None to keep it.

    Each plugin gets the prompt as the previous one rewrote it. Raising `code_puppy.PromptBlocked(reason)` blocks
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
def pre_tool_call(tool_name: str, args: dict[str, Any], session: SessionView) -> str | None:
    """Before a tool call runs, once per call, in every permission mode: a non-empty string blocks it.

    The first non-empty string in plugin order blocks; the model is told `Blocked by plugin NAME: REASON`.
    A hook that raises blocks the call too (fail closed).
    """


@hookspec
def post_tool_call(tool_name: str, args: dict[str, Any], result: Any, session: SessionView) -> None:
    """After a tool call ran and returned `result` (as the model sees it); not for denied or failed calls."""


@hookspec
def turn_end(result: AgentRunResult[str], session: SessionView) -> str | None:
    """After each successful run: a non-empty string is a follow-up prompt, run next in the same session.

    Every plugin is asked; the first non-empty prompt in plugin order runs. Never called after a failed,
    interrupted or limit-stopped run. `[plugins] max_continuations` (default 10) bounds the follow-ups per user turn.
    """
