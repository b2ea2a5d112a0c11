"""What the editor is shown: the run's stream events and a stored conversation as ACP `session/update`s."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from acp import (
    audio_block,
    image_block,
    plan_entry,
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
    update_user_message,
    update_user_message_text,
)
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    ContentToolCallContent,
    FileEditToolCallContent,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolKind,
    UserMessageChunk,
)
from pydantic_ai.messages import (
    AgentStreamEvent,
    BinaryContent,
    EnqueuedMessagesEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from code_puppy.acp.files import ClientFiles
from code_puppy.core.events import RunOutcome, tool_call_line
from code_puppy.core.plan import PlanView
from code_puppy.run.steering import steered_text
from code_puppy.sessions.costs import RequestCost
from code_puppy.tools import EDIT_TOOL_NAMES, SHELL_TOOL_NAMES
from code_puppy.workspace.proposed_edits import ProposedEdit, proposed_edit

Update = UserMessageChunk | AgentMessageChunk | AgentThoughtChunk | ToolCallStart | ToolCallProgress | AgentPlanUpdate
Send = Callable[[Update], Awaitable[None]]

_KINDS: dict[str, ToolKind] = {
    "read_file": "read",
    "file_info": "read",
    "list_directory": "read",
    "list_files": "read",
    "grep": "search",
    "search_files": "search",
    "find_files": "search",
    "delegate_task": "think",
    **dict.fromkeys(EDIT_TOOL_NAMES, "edit"),
    **dict.fromkeys(SHELL_TOOL_NAMES, "execute"),
    "check_command": "execute",
    "stop_command": "execute",
}


def tool_kind(name: str) -> ToolKind:
    """The ACP kind of a tool, which editors pick an icon by; MCP and plugin tools are `other`."""
    return _KINDS.get(name, "other")


def locations(root: Path, args: dict[str, Any]) -> list[ToolCallLocation] | None:
    """Where a call reads or writes: its `path` as an absolute path, with the line it starts at when it names one."""
    path = args.get("path")
    if not isinstance(path, str):
        return None
    line = next((args[key] for key in ("line", "offset", "start_line") if isinstance(args.get(key), int)), None)
    return [ToolCallLocation(path=str((root / path).resolve()), line=line if line is None or line >= 0 else None)]


def diff_content(root: Path, edit: ProposedEdit) -> FileEditToolCallContent:
    return tool_diff_content(str(root / edit.relative), edit.new, edit.old)


def tool_call_started(root: Path, part: ToolCallPart, status: Any = "pending") -> ToolCallStart:
    args = part.args_as_dict()
    return start_tool_call(
        part.tool_call_id,
        tool_call_line(part.tool_name, args),
        kind=tool_kind(part.tool_name),
        status=status,
        locations=locations(root, args),
        raw_input=args,
    )


def tool_call_ended(part: ToolReturnPart, diff: FileEditToolCallContent | None = None) -> ToolCallProgress:
    """The end of a call: completed, or failed (an error, a denial, a retry asked of the model), with its diff or a
    short text."""
    failed = part.outcome != "success"
    text = part.model_response_str()
    first = text.strip().splitlines()[0] if text.strip() else ""
    if failed:
        first = f"{part.outcome}: {first}"
    short = first[:197] + "…" if len(first) > 200 else first
    content: list[FileEditToolCallContent | ContentToolCallContent] = (
        [diff] if diff is not None and not failed else [tool_content(text_block(short))]
    )
    return update_tool_call(part.tool_call_id, status="failed" if failed else "completed", content=content)


_PLAN_STATUS: dict[str, Literal["pending", "in_progress", "completed"]] = {
    "pending": "pending",
    "in_progress": "in_progress",
    "completed": "completed",
}


class UpdateSink:
    """The run path's `EventSink` for one prompt turn: each event becomes updates, sent in order by one task.

    `flush` waits until every update is out, so the prompt's answer comes after them.
    """

    def __init__(self, root: Path, send: Send, files: ClientFiles | None = None) -> None:
        self._root = root
        self._send = send
        self._files = files if files is not None and files.holds_edits else None
        """The editor whose buffers the edits are made to: the diffs shown are of those."""
        self._queue: asyncio.Queue[Update] = asyncio.Queue()
        self._pump: asyncio.Task[None] | None = None
        self._edits: dict[str, ProposedEdit] = {}
        self._targets: dict[str, Path] = {}
        self._plan = PlanView()
        """The model's task list, sent whole as a `plan` update after each tool call that changed it."""

    def put(self, update: Update) -> None:
        if self._pump is None:
            self._pump = asyncio.create_task(self._run())
        self._queue.put_nowait(update)

    async def _run(self) -> None:
        while True:
            update = await self._queue.get()
            try:
                await self._send(update)
            except Exception:  # the client went away: the turn goes on and is saved
                pass
            finally:
                self._queue.task_done()

    async def flush(self) -> None:
        if self._pump is not None:
            await self._queue.join()
            self._pump.cancel()
            self._pump = None

    def start(self, session_id: str) -> None:
        pass

    def run_started(self, index: int) -> None:
        pass

    def event(self, event: AgentStreamEvent) -> None:
        if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart) and event.part.content:
            self.put(update_agent_message_text(event.part.content))
        elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
            self.put(update_agent_message_text(event.delta.content_delta))
        elif isinstance(event, PartStartEvent) and isinstance(event.part, ThinkingPart) and event.part.content:
            self.put(update_agent_thought_text(event.part.content))
        elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, ThinkingPartDelta):
            if event.delta.content_delta:
                self.put(update_agent_thought_text(event.delta.content_delta))
        elif isinstance(event, FunctionToolCallEvent):
            part = event.part
            args = part.args_as_dict()
            edit = proposed_edit(self._root, part.tool_name, args)
            if edit is not None:
                self._edits[part.tool_call_id] = edit
            if self._files is not None and part.tool_name in EDIT_TOOL_NAMES and isinstance(args.get("path"), str):
                self._targets[part.tool_call_id] = (self._root / args["path"]).resolve()
            self.put(tool_call_started(self._root, part))
        elif isinstance(event, FunctionToolResultEvent):
            call_id = event.part.tool_call_id
            edit = self._edits.pop(call_id, None)
            diff = diff_content(self._root, edit) if edit is not None else None
            target = self._targets.pop(call_id, None)
            if self._files is not None and target is not None and (change := self._files.take_change(target)):
                old, new = change
                diff = tool_diff_content(str(target), new, old)
            self.put(tool_call_ended(event.part, diff))
        elif isinstance(event, EnqueuedMessagesEvent):
            self.put(update_user_message_text(steered_text(event)))
        if self._plan.update(event) or not self._plan.settled(event):
            return
        # ACP has no "blocked": such a step is still to do.
        steps = self._plan.as_json()
        self.put(
            update_plan(
                plan_entry(step["content"], status=_PLAN_STATUS.get(step["status"], "pending")) for step in steps
            )
        )

    def say(self, text: str) -> None:
        """Text for the user that is not the model's (a follow-up that runs, a notice), as a user message chunk."""
        self.put(update_user_message_text(text))

    def request(self, cost: RequestCost) -> None:
        pass

    def warning(self, text: str) -> None:
        self.put(update_agent_thought_text(f"code-puppy: {text}\n"))

    def finish(self, outcome: RunOutcome) -> None:
        pass


def replay(root: Path, messages: Sequence[ModelMessage]) -> Iterator[Update]:
    """A stored conversation as the updates that would have shown it: prompts, answers, thinking, and each tool call
    with its final status."""
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    text = part.content if isinstance(part.content, str) else _text_of(part.content)
                    if text:
                        yield update_user_message_text(text)
                    if not isinstance(part.content, str):
                        yield from _attachments(part.content)
                elif isinstance(part, ToolReturnPart):
                    yield tool_call_ended(part)
        elif isinstance(message, ModelResponse):  # pyright: ignore[reportUnnecessaryIsInstance]
            for part in message.parts:
                if isinstance(part, TextPart) and part.content:
                    yield update_agent_message_text(part.content)
                elif isinstance(part, ThinkingPart) and part.content:
                    yield update_agent_thought_text(part.content)
                elif isinstance(part, ToolCallPart):
                    yield tool_call_started(root, part)


def _text_of(content: Sequence[Any]) -> str:
    return "\n".join(item for item in content if isinstance(item, str))


def _attachments(content: Sequence[Any]) -> Iterator[UserMessageChunk]:
    """The images and audio a prompt sent, as the blocks the client sent them in."""
    for item in content:
        if isinstance(item, BinaryContent) and item.is_image:
            yield update_user_message(image_block(item.base64, item.media_type))
        elif isinstance(item, BinaryContent) and item.is_audio:
            yield update_user_message(audio_block(item.base64, item.media_type))
