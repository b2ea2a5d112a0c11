"""The runs the dashboard starts: each a `Conversation` of its own `Project`, run on the shared run path in this
process. What a run does becomes events (plain JSON objects) that every open page receives over server-sent events;
its questions (approvals) wait for the first page that answers; steer, queue and cancel reach it as the chat's do.

A page that goes away takes nothing with it: the run belongs to the server, not to the request that started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.messages import (
    AgentStreamEvent,
    EnqueuedMessagesEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

from code_puppy.core.approvals import Question, Verdict, answer_approvals
from code_puppy.core.conversation import Conversation
from code_puppy.core.events import RunOutcome, ending, short_result, tool_call_line
from code_puppy.core.project import Project
from code_puppy.errors import ConfigError, one_line
from code_puppy.options import PermissionMode, RunOptions
from code_puppy.run.history_persistence import recover_interrupted_turn
from code_puppy.run.steering import steered_text
from code_puppy.sessions.costs import RequestCost
from code_puppy.sessions.session import Session, find_session
from code_puppy.terminal_text import printable
from code_puppy.web.transcript import diff_html
from code_puppy.workspace.proposed_edits import proposed_edit

Event = dict[str, Any]


class Busy(Exception):
    """The session runs a turn already (here or in a terminal)."""


@dataclass
class WebConversation(Conversation):
    """A session the dashboard runs turns of, and what its pages are told."""

    notes: list[str] = field(default_factory=list[str])
    """What the project's set-up said (an untrusted project's ignored config, checkpoints off), shown on its page."""
    running: asyncio.Task[None] | None = None
    queued: list[str] = field(default_factory=list[str])
    """Text queued as the next turn (the Queue button), run when the running one ends."""
    events: list[Event] = field(default_factory=list[Event])
    """The running (or last) turn's events, replayed to a page that opens while it runs."""
    listeners: set[asyncio.Queue[Event]] = field(default_factory=set[asyncio.Queue[Event]])
    questions: dict[str, asyncio.Future[Verdict]] = field(default_factory=dict[str, "asyncio.Future[Verdict]"])
    """The approvals waiting for an answer, by id; the first answer settles one."""
    answered: dict[str, str] = field(default_factory=dict[str, str])
    """The verdict each settled question got, to tell a second page which answer won."""

    def publish(self, event: Event) -> None:
        self.events.append(event)
        for listener in self.listeners:
            listener.put_nowait(event)

    async def ask(self, question: Question) -> Verdict:
        """Show one approval card on every page of the session and wait for the first answer."""
        question_id = f"q{next(_ids)}"
        call = question.call
        args = call.args_as_dict()
        edit = proposed_edit(self.project.root, call.tool_name, args)
        future: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        self.questions[question_id] = future
        self.publish(
            {
                "type": "approval",
                "id": question_id,
                "title": printable(f"{call.tool_name} wants to {question.summary}", spelled=True),
                "command": printable(str(args.get("command", "")), spelled=True) if "command" in args else None,
                "diff": diff_html(edit.old, edit.new, edit.relative) if edit is not None else None,
                "always": question.always,
            }
        )
        try:
            return await future
        finally:
            self.questions.pop(question_id, None)

    def answer(self, question_id: str, verdict: Verdict) -> str | None:
        """Settle question `question_id`; None when this answer won, else the one line saying what happened."""
        future = self.questions.get(question_id)
        if future is None or future.done():
            earlier = self.answered.get(question_id)
            return f"already answered: {earlier}" if earlier else "no such question is waiting (the turn moved on)"
        future.set_result(verdict)
        self.answered[question_id] = verdict
        self.publish({"type": "answered", "id": question_id, "verdict": verdict})
        return None


_ids = itertools.count(1)


class WebSink:
    """The run path's `EventSink` for one dashboard turn: each event published to the session's pages."""

    def __init__(self, conversation: WebConversation) -> None:
        self._conversation = conversation
        self._names: dict[str, str] = {}

    def start(self, session_id: str) -> None:
        pass

    def run_started(self, index: int) -> None:
        self._conversation.publish({"type": "run", "index": index})

    def event(self, event: AgentStreamEvent) -> None:
        publish = self._conversation.publish
        if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart) and event.part.content:
            publish({"type": "text", "text": event.part.content})
        elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
            publish({"type": "text", "text": event.delta.content_delta})
        elif isinstance(event, FunctionToolCallEvent):
            self._names[event.part.tool_call_id] = event.part.tool_name
            publish({"type": "tool_call", "line": tool_call_line(event.part.tool_name, event.part.args_as_dict())})
        elif isinstance(event, FunctionToolResultEvent):
            name = self._names.get(event.tool_call_id, "")
            publish({"type": "tool_result", "line": short_result(name, event)})
        elif isinstance(event, EnqueuedMessagesEvent):
            publish({"type": "steer", "text": steered_text(event)})

    def request(self, cost: RequestCost) -> None:
        pass

    def warning(self, text: str) -> None:
        self._conversation.publish({"type": "warning", "text": text})

    def finish(self, outcome: RunOutcome) -> None:
        pass


class LiveRuns:
    """The conversations this server runs, by session id."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.conversations: dict[str, WebConversation] = {}

    def running(self) -> set[str]:
        return {sid for sid, conversation in self.conversations.items() if conversation.running is not None}

    async def start(
        self, session_id: str | None, prompt: str, *, model: str | None, mode: PermissionMode | None
    ) -> WebConversation:
        """Run `prompt` as the next turn of session `session_id` (None: a new session of the server's project).

        Raises:
            Busy: The session runs a turn already here.
            ConfigError: The model, the mode, the config or the session cannot be used, in one line.
        """
        conversation = self.conversations.get(session_id) if session_id is not None else None
        if conversation is None:
            conversation = await self._open(session_id, model=model, mode=mode)
        elif conversation.running is not None:
            raise Busy(f"session {conversation.session.id[:8]} is running a turn: steer it, or queue the next one")
        else:
            if model:
                conversation.switch_model(model)
            if mode:
                conversation.project.switch_mode(mode)
        conversation.events = []
        conversation.publish({"type": "prompt", "text": prompt})
        conversation.running = asyncio.create_task(self._turn(conversation, prompt))
        return conversation

    async def _open(self, session_id: str | None, *, model: str | None, mode: PermissionMode | None) -> WebConversation:
        root = self.options.project_root
        info = None
        if session_id is not None:
            with contextlib.closing(_store()) as store:
                info = find_session(store, session_id)
            root = Path(info.project_dir)
            if not root.is_dir():
                raise ConfigError(f"session {info.id[:8]}'s project {root} is not there any more")
        said = io.StringIO()
        # The notes a project's set-up prints for the terminal (an untrusted project's ignored config, plugins not
        # run) are the page's to show.
        with contextlib.redirect_stderr(said):
            project = Project(replace(self.options, project_root=root, model=model or None, permission_mode=mode))
        try:
            await project.start()
            if info is None:
                session = await Session.start(project.store, root, model=project.model_name)
            else:
                session = await Session.resume(project.store, info, model=project.model_name)
                await recover_interrupted_turn(session)
        except BaseException:
            await project.close()
            raise
        notes = [line.removeprefix("code-puppy: ") for line in said.getvalue().splitlines() if line.strip()]
        notes += [project.checkpoint_note] if project.checkpoint_note else []
        conversation = WebConversation(project, session, project.model_name, notes=notes)
        self.conversations[session.id] = conversation
        return conversation

    async def _turn(self, conversation: WebConversation, prompt: str) -> None:
        async def ask(ctx: RunContext[Any], requests: DeferredToolRequests, token: str) -> DeferredToolResults:
            return await answer_approvals(conversation.project.policy, requests, conversation.ask)

        async def queued(result: Any) -> str | None:
            if not conversation.queued:
                return None
            text = conversation.queued.pop(0)
            conversation.publish({"type": "prompt", "text": text})
            return text

        status, message = "interrupted", "interrupted"
        try:
            async with conversation.steerable(cancel=lambda: self.cancel(conversation.session.id)):
                outcome = await conversation.turn(prompt, WebSink(conversation), ask=ask, follow_up=queued)
            status, message = ending(outcome)
        except Exception as exc:  # the run path reports its failures in the outcome; this is the last resort
            status, message = "error", f"run failed: {one_line(exc, typed=True)}"
        finally:
            conversation.running = None
            conversation.queued.clear()
            conversation.publish({"type": "end", "status": status, "message": message})

    def cancel(self, session_id: str) -> bool:
        """As Ctrl-C: the turn ends, what it finished is kept; text queued for it is dropped. False: none runs."""
        conversation = self.conversations.get(session_id)
        if conversation is None or conversation.running is None:
            return False
        conversation.queued.clear()
        for future in conversation.questions.values():
            if not future.done():
                future.set_result("cancel")
        conversation.running.cancel()
        return True

    async def close(self) -> None:
        """Cancel every running turn (each is saved as Ctrl-C saves it), then close the projects."""
        for conversation in list(self.conversations.values()):
            if conversation.running is not None:
                conversation.running.cancel()
                await asyncio.wait([conversation.running])
            with contextlib.suppress(Exception):
                await conversation.project.close()
        self.conversations.clear()


def _store() -> Any:
    from code_puppy.sessions.store import open_store

    return open_store(readonly=True)
