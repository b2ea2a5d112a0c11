"""Readers of other agents' session files: Claude Code transcripts and Codex CLI rollouts, as pydantic-ai messages.

Both formats are JSON Lines. A reader walks the records in order and hands each side of the conversation to a
`_Builder`: each model answer becomes one `ModelResponse` (Claude Code writes one record per block of an answer, with
the answer's `message.id`), and the results of its calls one `ModelRequest` after it, in the order of the calls,
whatever order the records come in, with what the user sent next. Record types a reader does not map are counted,
never fatal; a line that is not a JSON object, or a record of a known type with the wrong shape, becomes a
`FILE:LINE: …` problem and is skipped.

Claude Code (`~/.claude/projects/<project>/<session>.jsonl`; checked against real files of versions 1.0.17 to 2.1.7
and public descriptions up to 2.1.37): each record has `type`, `timestamp`, `cwd`, `sessionId`; `user` and
`assistant` records carry an Anthropic Messages API `message` whose `content` is a string or blocks (`text`,
`tool_use`, `tool_result`, `thinking`, `image`). Records of sub-agents (`isSidechain`) and meta records (`isMeta`,
except the prompt a slash command expanded to) are skipped and counted; a slash command's record is the command as
typed, and one that ran locally (`/clear`) is left out with what it printed.

Codex CLI (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`; checked against real files of 0.125 and 0.128 and public
descriptions from 0.4x): each line is `{"timestamp", "type", "payload"}`; `session_meta` gives the session `id` and
`cwd`, `turn_context` the model, and `response_item` payloads are OpenAI Responses API items (`message`,
`function_call`, `custom_tool_call`, `local_shell_call` and their `…_output`s, `reasoning`). `event_msg` lines repeat
what the items hold, for the TUI, and are skipped and counted, except a `user_message` that no `message` item of the
turn holds (newer Codex writes prompts only as events).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

__all__ = ("Transcript", "read_transcript")

Format = Literal["claude-code", "codex"]
NO_RESULT = "(no result of this call was recorded in the imported transcript)"
"""The result given to a tool call the transcript never answered (an interrupted turn), so the history is valid."""
_CLAUDE_TYPES = frozenset({"user", "assistant", "summary", "system", "file-history-snapshot", "queue-operation"})
_CODEX_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
_CODEX_CONTEXT = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions")
"""User messages Codex writes itself, with the environment and instructions, not what the user typed."""


class BadRecord(Exception):
    """A record of a known type whose shape is not the one expected; the message says what is wrong."""


@dataclass
class Transcript:
    """What a session file holds, read into pydantic-ai messages."""

    path: Path
    format: Format | None = None
    """None when the file is neither format."""
    session_key: str | None = None
    """The session's id in the other tool (Claude Code's `sessionId`, Codex's `session_meta.id`)."""
    cwd: str | None = None
    """The working directory the session ran in."""
    messages: list[ModelMessage] = field(default_factory=list[ModelMessage])
    skipped: Counter[str] = field(default_factory=Counter[str])
    """Records (and blocks) left out, by type."""
    problems: list[str] = field(default_factory=list[str])
    """Malformed lines, as `FILE:LINE: what`."""
    subagent_of: str | None = None
    """For a Claude Code sub-agent's transcript (only sidechain records), the session that started the sub-agent (""
    when the records do not name it)."""


@dataclass
class _Builder:
    """Collects the records of each side into messages: one `ModelResponse` per model answer, then one `ModelRequest`
    with the results of its calls, in the order of the calls, whatever order the file wrote them in, and what the
    user sent next. A call the file never answers gets `NO_RESULT`, in that request, so the history can be sent."""

    messages: list[ModelMessage] = field(default_factory=list[ModelMessage])
    response: list[ModelResponsePart] = field(default_factory=list[ModelResponsePart])
    response_time: datetime | None = None
    model_name: str | None = None
    message_id: str | None = None
    """The id the model gave its answer, when the file has it: records of one answer share it (Claude Code)."""
    calls: dict[str, tuple[str, datetime | None]] = field(default_factory=dict[str, tuple[str, datetime | None]])
    """The calls of the current answer, in order: id to tool name (results name only the id) and time."""
    results: dict[str, ToolReturnPart] = field(default_factory=dict[str, ToolReturnPart])
    """The results of those calls read so far."""
    request: list[ModelRequestPart] = field(default_factory=list[ModelRequestPart])
    """What the user sent after the current answer (or before the first one)."""
    request_time: datetime | None = None

    def user(self, part: ModelRequestPart, moment: datetime | None) -> None:
        self.request_time = self.request_time or moment
        self.request.append(part)

    def assistant(
        self,
        part: ModelResponsePart,
        moment: datetime | None,
        model_name: str | None = None,
        message_id: str | None = None,
    ) -> None:
        # The next part of the same answer (Claude Code writes one record per block, and may write the result of a
        # call before the answer's next call), or a new answer, which closes the current one and what followed it.
        same_answer = message_id is not None and message_id == self.message_id
        other_answer = None not in (message_id, self.message_id) and not same_answer
        if not self.response or self.request or other_answer or (self.results and not same_answer):
            self._end_turn()
            self.response_time, self.message_id = moment, message_id
        self.model_name = model_name or self.model_name
        if isinstance(part, ToolCallPart):
            self.calls[part.tool_call_id] = (part.tool_name, moment)
        self.response.append(part)

    def tool_result(self, call_id: str, content: str, moment: datetime | None, *, failed: bool = False) -> bool:
        """Add the result of call `call_id`; False when the current answer made no such call, or it was answered (the
        result is left out: a history answers each call once, right after the answer that made it)."""
        if call_id not in self.calls or call_id in self.results:
            return False
        name, _ = self.calls[call_id]
        self.results[call_id] = ToolReturnPart(
            name, content, call_id, timestamp=moment or datetime.now(UTC), outcome="failed" if failed else "success"
        )
        self.request_time = self.request_time or moment
        return True

    def finish(self) -> list[ModelMessage]:
        self._end_turn()
        return self.messages

    def _end_turn(self) -> None:
        if self.response:
            moment = self.response_time or datetime.now(UTC)
            self.messages.append(ModelResponse(parts=self.response, timestamp=moment, model_name=self.model_name))
        answers: list[ModelRequestPart] = [
            self.results.get(call_id) or ToolReturnPart(name, NO_RESULT, call_id, timestamp=moment or datetime.now(UTC))
            for call_id, (name, moment) in self.calls.items()
        ]
        if answers or self.request:
            self.messages.append(ModelRequest(parts=[*answers, *self.request], timestamp=self.request_time))
        self.response, self.response_time, self.message_id, self.calls, self.results = [], None, None, {}, {}
        self.request, self.request_time = [], None


class NotARegularFile(OSError):
    """A path that is no regular file (a FIFO, a device, a folder named `*.jsonl`): reading it could wait for a writer
    forever, or never end."""


def read_transcript(path: Path) -> Transcript:
    """Read `path` as a Claude Code transcript or a Codex rollout, whichever its records are.

    Raises:
        NotARegularFile: It is not a regular file; nothing was read.
        OSError: The file cannot be read.
    """
    transcript = Transcript(path=path)
    records = list(_records(path, transcript))
    types = {record.get("type") for _, record in records}
    if types & _CODEX_TYPES:
        transcript.format = "codex"
        transcript.messages = _read_codex(records, transcript)
    elif types & _CLAUDE_TYPES:
        transcript.format = "claude-code"
        transcript.messages = _read_claude(records, transcript)
    return transcript


def _records(path: Path, transcript: Transcript) -> Iterator[tuple[int, dict[str, Any]]]:
    # Non-blocking, so a FIFO opens at once instead of waiting for a writer; the type is checked on what was opened.
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise NotARegularFile(f"{path}: not a regular file")
    with open(descriptor, "rb") as file:
        for number, raw in enumerate(file, start=1):
            line = raw.decode("utf-8", errors="replace").strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError) as exc:  # RecursionError: nesting too deep
                transcript.problems.append(f"{path}:{number}: not valid JSON ({exc}); line skipped")
                continue
            if not isinstance(record, dict):
                transcript.problems.append(f"{path}:{number}: not a JSON object; line skipped")
                continue
            yield number, cast(dict[str, Any], record)


def _time(record: dict[str, Any]) -> datetime | None:
    value = record.get("timestamp")
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _text(content: Any) -> str:
    """A tool result or message content as text: a string, or the text of its blocks (other blocks named)."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        mapping = cast(dict[str, Any], content)
        return _text(mapping.get("content", mapping.get("text", "")))
    if isinstance(content, list):
        pieces: list[str] = []
        for block in cast(list[Any], content):
            if isinstance(block, dict) and isinstance(text := cast(dict[str, Any], block).get("text"), str):
                pieces.append(text)
            elif isinstance(block, dict):
                pieces.append(f"[{cast(dict[str, Any], block).get('type', 'block')} omitted]")
            elif isinstance(block, str):
                pieces.append(block)
        return "\n".join(pieces)
    return "" if content is None else json.dumps(content)


def _read_claude(records: list[tuple[int, dict[str, Any]]], transcript: Transcript) -> list[ModelMessage]:
    builder = _Builder()
    command: list[UserPromptPart] = []
    """A slash command the user typed, held until the next record says whether it sent a prompt."""
    for number, record in records:
        kind = record.get("type")
        if command and not (kind == "user" and record.get("isMeta")):
            transcript.skipped["local command"] += 1  # nothing followed: a command that runs here (/clear, /model)
            command = []
        if kind in ("user", "assistant") and record.get("isSidechain"):
            transcript.subagent_of = transcript.subagent_of or _string(record.get("sessionId")) or ""
        if kind not in ("user", "assistant") or record.get("isSidechain") or (record.get("isMeta") and not command):
            label = "sidechain" if record.get("isSidechain") else "meta" if record.get("isMeta") else kind
            transcript.skipped[_label(label)] += 1
            continue
        transcript.session_key = transcript.session_key or _string(record.get("sessionId"))
        transcript.cwd = transcript.cwd or _string(record.get("cwd"))
        try:
            if command:  # the prompt the command expanded to, which Claude Code records as meta
                for part in command:
                    builder.user(part, part.timestamp)
                command = []
            command = _claude_record(builder, record, transcript)
        except BadRecord as exc:
            transcript.problems.append(f"{transcript.path}:{number}: {exc}; line skipped")
    if command:
        transcript.skipped["local command"] += 1
    if builder.messages or builder.response or builder.request:
        transcript.subagent_of = None
    return builder.finish()


_COMMAND = re.compile(r"<command-name>\s*/?([^<]*?)\s*</command-name>")
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.S)
_COMMAND_CONTENTS = re.compile(r"<command-contents>(.*?)</command-contents>", re.S)
_LOCAL_OUTPUT = ("<local-command-stdout>", "<local-command-stderr>", "<local-command-caveat>")
"""What Claude Code writes for a slash command: the command as typed, then the prompt it expands to (a meta record,
or, before 1.0.9x, the command's `<command-contents>`) or what a command that runs locally printed."""


def _command(text: str, moment: datetime) -> list[UserPromptPart] | None:
    """The prompt a slash command record stands for: `/name args` as typed, then its contents when the record has them;
    None when `text` is no command record."""
    if not text.lstrip().startswith("<command-") or not (found := _COMMAND.search(text)):
        return None
    name = found.group(1)
    args = _COMMAND_ARGS.search(text)
    parts = [UserPromptPart(f"/{name} {args.group(1).strip() if args else ''}".strip(), timestamp=moment)]
    if contents := _COMMAND_CONTENTS.search(text):
        try:
            expansion = _text(json.loads(contents.group(1)))
        except (ValueError, RecursionError):
            expansion = contents.group(1)
        parts.append(UserPromptPart(expansion, timestamp=moment))
    return parts


def _user_text(
    builder: _Builder, text: str, moment: datetime | None, transcript: Transcript, *, meta: bool
) -> list[UserPromptPart]:
    """Add what the user typed; a slash command whose prompt may follow in the next record is returned instead."""
    now = moment or datetime.now(UTC)
    if text.lstrip().startswith(_LOCAL_OUTPUT):
        transcript.skipped["local command output"] += 1
    elif (command := _command(text, now)) is None or meta:
        builder.user(UserPromptPart(text, timestamp=now), moment)
    elif len(command) == 1:
        return command
    else:
        for part in command:
            builder.user(part, moment)
    return []


def _label(kind: Any) -> str:
    return "record without a type" if kind is None else str(kind)


def _claude_record(builder: _Builder, record: dict[str, Any], transcript: Transcript) -> list[UserPromptPart]:
    """Add one record's blocks; a slash command whose prompt may follow in the next record is returned instead."""
    message = record.get("message")
    if not isinstance(message, dict):
        raise BadRecord(f"a {record['type']} record without a message object")
    message = cast(dict[str, Any], message)
    moment = _time(record)
    model, answer = _string(message.get("model")), _string(message.get("id"))
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise BadRecord("message content is neither text nor a list of blocks")
    blocks = cast(list[Any], content)
    for block in blocks:
        if not isinstance(block, dict):
            raise BadRecord("a content block is not an object")
        block = cast(dict[str, Any], block)
        kind = block.get("type")
        if record["type"] == "user" and kind == "text" and isinstance(text := block.get("text"), str):
            if command := _user_text(builder, text, moment, transcript, meta=bool(record.get("isMeta"))):
                return command
        elif record["type"] == "user" and kind == "tool_result":
            found = builder.tool_result(
                str(block.get("tool_use_id")), _text(block.get("content")), moment, failed=bool(block.get("is_error"))
            )
            if not found:
                transcript.skipped["tool_result without an open tool_use"] += 1
        elif record["type"] == "assistant" and kind == "text" and isinstance(text := block.get("text"), str):
            builder.assistant(TextPart(text), moment, model, answer)
        elif record["type"] == "assistant" and kind == "tool_use":
            name, call_id, args = block.get("name"), block.get("id"), block.get("input")
            if not isinstance(name, str) or not isinstance(call_id, str):
                raise BadRecord("a tool_use block without a name and an id")
            arguments = cast(dict[str, Any], args) if isinstance(args, dict) else {}
            builder.assistant(ToolCallPart(name, arguments, call_id), moment, model, answer)
        else:
            transcript.skipped[f"{kind} block"] += 1
    return []


def _read_codex(records: list[tuple[int, dict[str, Any]]], transcript: Transcript) -> list[ModelMessage]:
    builder = _Builder()
    model: str | None = None
    echoes: Counter[tuple[str, str]] = Counter()
    """Prompts of this turn read from one record kind and not yet from the other: older Codex writes each prompt as a
    `message` item and a `user_message` event, newer ones only the event."""
    for number, record in records:
        kind = record.get("type")
        payload = record.get("payload")
        if kind in ("session_meta", "turn_context", "response_item", "event_msg") and not isinstance(payload, dict):
            transcript.problems.append(f"{transcript.path}:{number}: a {kind} record without a payload object")
            continue
        payload = cast(dict[str, Any], payload)
        moment = _time(record)
        if kind == "session_meta":
            transcript.session_key = transcript.session_key or _string(payload.get("id"))
            transcript.cwd = transcript.cwd or _string(payload.get("cwd"))
        elif kind == "turn_context":
            model = _string(payload.get("model")) or model
        elif kind == "event_msg" and payload.get("type") == "user_message" and _prompt(payload.get("message")):
            if not _codex_prompt(builder, str(payload["message"]), moment, "event", echoes):
                transcript.skipped["event_msg"] += 1
        elif kind == "response_item" and payload.get("type") == "message" and payload.get("role") == "user":
            text = _text(payload.get("content"))
            if not _prompt(text) or not _codex_prompt(builder, text, moment, "item", echoes):
                transcript.skipped["message item"] += 1
        elif kind == "response_item":
            echoes.clear()
            try:
                if not _codex_item(builder, payload, moment, model):
                    transcript.skipped[f"{_label(payload.get('type'))} item"] += 1
            except BadRecord as exc:
                transcript.problems.append(f"{transcript.path}:{number}: {exc}; line skipped")
        else:
            transcript.skipped[_label(kind)] += 1
    return builder.finish()


def _prompt(text: Any) -> bool:
    """Whether `text` is a prompt the user typed, not one of the messages Codex writes itself."""
    return isinstance(text, str) and bool(text.strip()) and not text.lstrip().startswith(_CODEX_CONTEXT)


def _codex_prompt(
    builder: _Builder, text: str, moment: datetime | None, source: str, echoes: Counter[tuple[str, str]]
) -> bool:
    """Add a prompt; False when it is the other record of one already added (it is left out)."""
    other = "item" if source == "event" else "event"
    if echoes[(other, text)]:
        echoes[(other, text)] -= 1
        return False
    echoes[(source, text)] += 1
    builder.user(UserPromptPart(text, timestamp=moment or datetime.now(UTC)), moment)
    return True


def _codex_item(builder: _Builder, item: dict[str, Any], moment: datetime | None, model: str | None) -> bool:
    """Map one Responses API item; False when it is one not mapped (reasoning, context messages, ...)."""
    kind = item.get("type")
    if kind == "message":
        text = _text(item.get("content"))
        if item.get("role") == "assistant" and text:
            builder.assistant(TextPart(text), moment, model)
        else:
            return False
    elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
        call_id = item.get("call_id") or item.get("id")
        if not isinstance(call_id, str):
            raise BadRecord(f"a {kind} item without a call_id")
        if kind == "function_call":
            name, args = item.get("name"), item.get("arguments")
        elif kind == "custom_tool_call":
            name, args = item.get("name"), {"input": item.get("input")}
        else:
            name, args = "local_shell", item.get("action")
        if not isinstance(name, str) or not isinstance(args, str | dict):
            raise BadRecord(f"a {kind} item without a name and arguments")
        builder.assistant(ToolCallPart(name, cast(str | dict[str, Any], args), call_id), moment, model)
    elif kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
        call_id = item.get("call_id")
        if not isinstance(call_id, str):
            raise BadRecord(f"a {kind} item without a call_id")
        output = item.get("output")
        failed = isinstance(output, dict) and cast(dict[str, Any], output).get("success") is False
        return builder.tool_result(call_id, _text(output), moment, failed=failed)
    else:
        return False
    return True


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
