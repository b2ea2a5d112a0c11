"""`PluginHost`: the loaded plugins, and the one way code-puppy calls their hooks.

pluggy stops at the first exception and does not say whose it was, so every hook is called one implementation at a
time: a plugin's failure is reported once (one line naming it; the traceback with --debug) and stays its own.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import json
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TextIO, cast

import pluggy
from pydantic_ai import Agent, RunContext, ToolDefinition
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.capabilities import AbstractCapability, Hooks
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, SkipToolExecution
from pydantic_ai.messages import ToolCallPart, ToolReturn

from code_puppy.config import Settings, data_dir
from code_puppy.errors import one_line
from code_puppy.paths import write_json
from code_puppy.plugins import (
    PROJECT_NAME,
    AgentCommand,
    Context,
    PromptBlocked,
    RegisterCommand,
    SessionView,
    ToolDecision,
    Tracked,
    TurnStopped,
    hookspecs,
)
from code_puppy.run.deps import deps_of
from code_puppy.sessions.session import Session

Status = Literal["enabled", "disabled", "idle", "untrusted", "changed", "replaced", "failed"]
"""Whether a found plugin runs, and if not, why: `changed` is a trusted project folder whose content changed, `idle` a
bundled plugin nothing configures."""
ERRORS_FILE = "plugin_errors.json"
"""Each plugin's last error, kept in the data directory for `code-puppy plugins list`."""


@dataclass
class Plugin:
    """One plugin discovery found, loaded or not."""

    name: str
    source: str
    """bundled | entry point | user | project"""
    location: str
    """Where it was found: a path, or an entry point's `module:attr`."""
    status: Status = "enabled"
    error: str | None = None
    """Why it did not load, or the last error one of its hooks raised in this process."""
    namespace: object | None = field(default=None, repr=False)
    """The loaded module (or object) whose `@hookimpl` functions are registered."""


class PluginHost:
    """The plugins of one code-puppy process, registered with pluggy; an empty host calls nothing."""

    def __init__(self, *, project_dir: Path, debug: bool = False, stderr: TextIO | None = None) -> None:
        self.plugins: list[Plugin] = []
        """Every plugin found, in plugin order, whether it runs or not."""
        self.project_dir = project_dir
        self.debug = debug
        """Whether a failure's traceback is shown (`--debug`)."""
        self.capabilities: list[AbstractCapability[Any]] = []
        """What `register_capabilities` returned, asked once by `startup`."""
        self.agent_command: AgentCommand | None = None
        """How `SessionView.run_agent_command` runs a command; set once the permission policy exists."""
        self.tracked: Tracked | None = None
        """What `SessionView.tracked` encloses a hook's command in: the checkpoints' snapshots; set with the agent."""
        self.permission_mode: Callable[[], str] | None = None
        """The live permission mode, for `SessionView.permission_mode`; set with the agent."""
        self.started: dict[str, Session] = {}
        """The sessions `session_start` was called for, by id: `session_end` is called for each at the end."""
        self._stderr = stderr
        self._reported: set[str] = set()
        self._order: dict[str, int] = {}
        self._manager = pluggy.PluginManager(PROJECT_NAME)
        self._manager.add_hookspecs(hookspecs)

    def add(self, plugin: Plugin) -> None:
        """Take in a found plugin; an enabled, loaded one is registered and its hooks are called from now on."""
        self.plugins.append(plugin)
        if plugin.status == "enabled" and plugin.namespace is not None:
            self._order[plugin.name] = len(self._order)
            self._register(plugin)

    def _register(self, plugin: Plugin) -> None:
        try:
            self._manager.register(plugin.namespace, name=plugin.name)
        except Exception as exc:  # pluggy's PluginValidationError: an argument its hook does not have, …
            plugin.status = "failed"
            self.fail(plugin.name, f"cannot be registered: {one_line(exc, typed=True)}", exc)
            return
        unknown = [caller.name for caller in self._manager.get_hookcallers(plugin.namespace) or [] if not caller.spec]
        if unknown:
            self.fail(plugin.name, f"implements unknown hooks, ignored: {', '.join(sorted(unknown))}")

    def note(self, text: str) -> None:
        """One line for the user on stderr."""
        print(f"code-puppy: note: {text}", file=self._stderr or sys.stderr, flush=True)

    def fail(self, name: str, error: str, exc: BaseException | None = None) -> None:
        """Record a plugin's error; its first one is reported in one line (with --debug, after the traceback)."""
        for plugin in self.plugins:
            if plugin.name == name and plugin.status != "replaced":
                plugin.error = error
        _remember_error(name, error)
        if name in self._reported:
            return
        self._reported.add(name)
        stream = self._stderr or sys.stderr
        if self.debug and exc is not None:
            traceback.print_exception(exc, file=stream)
        print(f"code-puppy: plugin {name}: {error}", file=stream, flush=True)

    def view(self, session: Session) -> SessionView:
        return SessionView(session, self.project_dir, self.agent_command, self.tracked, self.permission_mode)

    def tool_call_hooks(self) -> Hooks[Any]:
        """`post_tool_call` (its feedback added to the result), `tool_call_failed` and, around `delegate_task`,
        `subagent_start`/`subagent_stop`, as a capability for the runs' sessions (`RunDeps.session`); place it inside
        the permission policy (it sees only the calls let through) and outside the output limits (it gets the result
        the model gets)."""

        async def before_tool_execute(
            ctx: RunContext[Any], /, *, call: ToolCallPart, tool_def: ToolDefinition, args: dict[str, Any]
        ) -> dict[str, Any]:
            if call.tool_name == DELEGATE and (deps := deps_of(ctx)) is not None:
                name, prompt = _delegated(args)
                await self._call_all(
                    "subagent_start",
                    agent_name=name,
                    prompt=prompt,
                    tool_call_id=call.tool_call_id,
                    session=self.view(deps.session),
                )
            return args

        async def after_tool_execute(
            ctx: RunContext[Any], /, *, call: ToolCallPart, tool_def: ToolDefinition, args: dict[str, Any], result: Any
        ) -> Any:
            if (deps := deps_of(ctx)) is None:
                return result
            if call.tool_name == DELEGATE:
                await self._subagent_stop(call, args, _text_of(result), deps.session)
            feedback = await self.post_tool_call(call.tool_name, args, result, deps.session, call.tool_call_id)
            return _with_feedback(result, feedback) if feedback else result

        async def tool_execute(
            ctx: RunContext[Any],
            /,
            *,
            call: ToolCallPart,
            tool_def: ToolDefinition,
            args: dict[str, Any],
            handler: Callable[[dict[str, Any]], Awaitable[Any]],
        ) -> Any:
            try:
                return await handler(args)
            except (SkipToolExecution, CallDeferred, ApprovalRequired, TurnStopped):
                raise  # denied, waiting for an answer, or stopped: not a failure of the call
            except Exception as error:  # ModelRetry too: a missing file, an edit anchor not found
                if (deps := deps_of(ctx)) is not None:
                    if call.tool_name == DELEGATE:
                        await self._subagent_stop(call, args, None, deps.session)
                    await self._call_all(
                        "tool_call_failed",
                        tool_name=call.tool_name,
                        args=copy.deepcopy(args),
                        error=one_line(error) or type(error).__name__,
                        tool_call_id=call.tool_call_id,
                        session=self.view(deps.session),
                    )
                raise

        return Hooks[Any](
            before_tool_execute=before_tool_execute,
            after_tool_execute=after_tool_execute,
            tool_execute=tool_execute,
        )

    async def _subagent_stop(
        self, call: ToolCallPart, args: dict[str, Any], result: str | None, session: Session
    ) -> None:
        name, _ = _delegated(args)
        await self._call_all(
            "subagent_stop", agent_name=name, result=result, tool_call_id=call.tool_call_id, session=self.view(session)
        )

    def _implementations(self, hook: str) -> list[pluggy.HookImpl]:
        """The hook's implementations in plugin order, `tryfirst` ones first and `trylast` ones last."""
        caller: pluggy.HookCaller = getattr(self._manager.hook, hook)
        impls = [impl for impl in caller.get_hookimpls() if not (impl.wrapper or impl.hookwrapper)]
        return sorted(impls, key=lambda impl: (not impl.tryfirst, impl.trylast, self._order[impl.plugin_name]))

    @staticmethod
    async def _call(impl: pluggy.HookImpl, arguments: dict[str, Any]) -> Any:
        outcome = impl.function(*(arguments[name] for name in impl.argnames))
        return await outcome if inspect.isawaitable(outcome) else outcome

    async def _call_all(self, hook: str, **arguments: Any) -> list[tuple[str, Any]]:
        """Every implementation's result, by plugin name; one that raises is reported and left out."""
        results: list[tuple[str, Any]] = []
        for impl in self._implementations(hook):
            try:
                results.append((impl.plugin_name, await self._call(impl, arguments)))
            except Exception as exc:
                self.fail(impl.plugin_name, f"{hook} raised {one_line(exc, typed=True)}", exc)
        return results

    @staticmethod
    def _text(hook: str, value: object) -> str | None:
        """A hook's returned prompt or reason: a string, or None; anything else is the plugin's error."""
        if value is None or isinstance(value, str):
            return value
        raise TypeError(f"{hook} returned {type(value).__name__}, not a str or None")

    async def startup(self, settings: Settings) -> None:
        """Call `startup`, then collect `register_capabilities` into `capabilities`."""
        await self._call_all("startup", settings=settings)
        for name, returned in await self._call_all("register_capabilities", settings=settings):
            items: list[object] = list(returned) if isinstance(returned, list | tuple) else [returned]  # pyright: ignore[reportUnknownArgumentType]
            for item in items:
                if isinstance(item, AbstractCapability):
                    self.capabilities.append(item)  # pyright: ignore[reportUnknownArgumentType]
                elif item is not None:
                    self.fail(name, f"register_capabilities returned {type(item).__name__}, not a capability")

    async def shutdown(self) -> None:
        await self._call_all("shutdown")

    async def register_commands(self, register: RegisterCommand) -> None:
        await self._call_all("register_commands", register=register)

    async def user_prompt_submit(self, prompt: str, session: Session) -> tuple[str, list[str]]:
        """The prompt as the plugins rewrote it, in order, and the context they returned for the model;
        `PromptBlocked` (naming the plugin) when one blocks it."""
        view = self.view(session)
        context: list[str] = []
        for impl in self._implementations("user_prompt_submit"):
            try:
                returned = await self._call(impl, {"prompt": prompt, "session": view})
                if isinstance(returned, Context):
                    context += [returned.text] if returned.text.strip() else []
                elif rewritten := self._text("user_prompt_submit", returned):
                    prompt = rewritten
            except PromptBlocked as blocked:
                blocked.plugin = impl.plugin_name
                raise
            except Exception as exc:
                self.fail(impl.plugin_name, f"user_prompt_submit raised {one_line(exc, typed=True)}", exc)
        return prompt, context

    async def session_start(self, session: Session) -> list[str]:
        """`session_start`, the first time `session` has a turn in this process: the context it returned."""
        if session.id in self.started:
            return []
        self.started[session.id] = session
        source = "resume" if session.messages else "startup"
        context: list[str] = []
        for name, value in await self._call_all("session_start", source=source, session=self.view(session)):
            text = value.text if isinstance(value, Context) else value
            try:
                context += [text] if self._text("session_start", text) else []
            except TypeError as exc:
                self.fail(name, str(exc), exc)
        return context

    async def session_end(self) -> None:
        """`session_end` for every session `session_start` was called for."""
        for session in self.started.values():
            await self._call_all("session_end", reason="exit", session=self.view(session))
        self.started.clear()

    async def permission_request(self, call: ToolCallPart, summary: str, session: Session) -> ToolDecision | None:
        """The first plugin's answer (`allow` or `deny`) to a question about to be asked, or None: ask the user."""
        for name, value in await self._call_all(
            "permission_request",
            tool_name=call.tool_name,
            args=call.args_as_dict(),
            summary=summary,
            tool_call_id=call.tool_call_id,
            session=self.view(session),
        ):
            if isinstance(value, ToolDecision) and value.permission in ("allow", "deny"):
                return replace(value, reason=f"Denied by plugin {name}: {value.reason}" if value.reason else "")
        return None

    async def pre_compact(self, trigger: str, instructions: str | None, session: Session) -> None:
        await self._call_all("pre_compact", trigger=trigger, instructions=instructions, session=self.view(session))

    async def agent_run_start(self, agent: Agent[Any, str], prompt: str, session: Session) -> None:
        await self._call_all("agent_run_start", agent=agent, prompt=prompt, session=self.view(session))

    async def agent_run_end(
        self,
        agent: Agent[Any, str],
        result: AgentRunResult[str] | None,
        error: BaseException | None,
        session: Session,
    ) -> None:
        await self._call_all("agent_run_end", agent=agent, result=result, error=error, session=self.view(session))

    async def pre_tool_call(
        self, tool_name: str, args: dict[str, Any], session: Session, tool_call_id: str = ""
    ) -> ToolDecision | None:
        """The plugins' decision on one call, or None when none has one: a denial's `reason` is what the model is told
        (`Blocked by plugin NAME: …`); `args` are the arguments as the last plugin changed them. A hook that raises
        denies (fail closed); a stop raises `TurnStopped`, naming the plugin."""
        arguments = {"tool_name": tool_name, "args": copy.deepcopy(args), "session": self.view(session)}
        arguments["tool_call_id"] = tool_call_id
        decided: ToolDecision | None = None
        for impl in self._implementations("pre_tool_call"):
            try:
                returned = await self._call(impl, arguments)
                if not isinstance(returned, ToolDecision):
                    returned = (
                        ToolDecision("deny", reason) if (reason := self._text("pre_tool_call", returned)) else None
                    )
            except TurnStopped as stopped:
                stopped.plugin = impl.plugin_name
                raise
            except Exception as exc:
                what = one_line(exc, typed=True)
                self.fail(impl.plugin_name, f"pre_tool_call raised {what}", exc)
                return ToolDecision(
                    "deny", f"Blocked by plugin {impl.plugin_name}: its pre_tool_call hook failed ({what})"
                )
            if returned is None:
                continue
            if returned.stop is not None:
                stopped = TurnStopped(returned.stop)
                stopped.plugin = impl.plugin_name
                raise stopped
            if returned.permission == "deny":
                return ToolDecision("deny", f"Blocked by plugin {impl.plugin_name}: {returned.reason or 'denied'}")
            if returned.args is not None:
                arguments["args"] = copy.deepcopy(returned.args)
            decided = returned if decided is None else _together(decided, returned)
        return decided

    async def post_tool_call(
        self, tool_name: str, args: dict[str, Any], result: Any, session: Session, tool_call_id: str = ""
    ) -> list[str]:
        """The plugins' feedback for the model, each line naming its plugin; `TurnStopped` from a hook is raised on."""
        arguments = {"tool_name": tool_name, "args": copy.deepcopy(args), "result": result}
        arguments |= {"tool_call_id": tool_call_id, "session": self.view(session)}
        feedback: list[str] = []
        for impl in self._implementations("post_tool_call"):
            try:
                if text := self._text("post_tool_call", await self._call(impl, arguments)):
                    feedback.append(f"[plugin {impl.plugin_name}] {text}")
            except TurnStopped as stopped:
                stopped.plugin = impl.plugin_name
                raise
            except Exception as exc:
                self.fail(impl.plugin_name, f"post_tool_call raised {one_line(exc, typed=True)}", exc)
        return feedback

    async def turn_end(self, result: AgentRunResult[str], session: Session) -> str | None:
        """The first non-empty follow-up prompt in plugin order; every plugin is asked."""
        prompts: list[str] = []
        for name, value in await self._call_all("turn_end", result=result, session=self.view(session)):
            try:
                if text := self._text("turn_end", value):
                    prompts.append(text)
            except TypeError as exc:
                self.fail(name, str(exc), exc)
        return prompts[0] if prompts else None


DELEGATE = "delegate_task"
"""The tool that runs a sub-agent: `subagent_start`/`subagent_stop` around it."""


def _delegated(args: dict[str, Any]) -> tuple[str, str]:
    """The agent a `delegate_task` call runs, and its prompt."""
    return str(args.get("agent_name") or ""), str(args.get("task") or "")


def _together(earlier: ToolDecision, later: ToolDecision) -> ToolDecision:
    """Two plugins' decisions on one call as one: a question wins over an allowance, later arguments over earlier."""
    first = earlier.permission == "ask" or later.permission is None
    permission, reason = (earlier.permission, earlier.reason) if first else (later.permission, later.reason)
    return ToolDecision(permission, reason, later.args if later.args is not None else earlier.args)


def _text_of(result: Any) -> str:
    return result if isinstance(result, str) else str(getattr(result, "return_value", result))


def _with_feedback(result: Any, feedback: list[str]) -> Any:
    """`result` with the plugins' feedback after it: appended to a text result, as a user part beside any other."""
    text = "\n\n".join(feedback)
    if isinstance(result, str):
        return f"{result}\n\n{text}"
    if isinstance(result, ToolReturn):
        returned = cast(ToolReturn[Any], result)
        content = returned.content
        items: list[Any] = list(cast(list[Any], content)) if isinstance(content, list) else [content] if content else []
        return replace(returned, content=[*items, text])
    return ToolReturn(return_value=result, content=text)


def remembered_errors() -> dict[str, str]:
    """Each plugin's last recorded error, with its time."""
    try:
        known = json.loads((data_dir() / ERRORS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(known, dict):
        return {}
    return {str(key): str(value) for key, value in cast(dict[Any, Any], known).items()}


def _remember_error(name: str, error: str) -> None:
    path = data_dir() / ERRORS_FILE
    known = remembered_errors() | {name: f"{time.strftime('%Y-%m-%d %H:%M')} {error}"}
    with contextlib.suppress(OSError):  # a record for `plugins list`, not worth failing a run over
        write_json(path, known)
