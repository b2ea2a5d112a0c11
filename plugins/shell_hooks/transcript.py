"""`transcript_path` for Claude Code's hooks: the session as a JSONL file in Claude Code's record shape (`type`
user/assistant, `message.content` blocks, `uuid`/`parentUuid`, `sessionId`, `timestamp`), kept up to date by
appending the messages added since the last event; written anew only once per process."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .claude import CLAUDE_NAME_OF, claude_input

_written: dict[str, tuple[int, str | None]] = {}
"""Per session id: how many of its messages the file holds, and the last record's uuid."""


def transcript_path(session: Any) -> str | None:
    """The session's transcript file, brought up to date; None when it cannot be written."""
    from code_puppy.paths import data_dir

    path = data_dir() / "transcripts" / f"{session.id}.jsonl"
    messages = list(session.messages)
    known = _written.get(session.id)
    done, parent = known if known is not None else (0, None)
    records: list[dict[str, Any]] = []
    base = {"isSidechain": False, "userType": "external", "cwd": str(session.project_dir), "sessionId": session.id}
    base["version"] = "code-puppy"
    if len(messages) < done:  # compacted or rewound: a boundary, then the shorter history (its summary first)
        records.append({"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted"})
        done = 0
    for message in messages[done:]:
        records += _records(message, Path(session.project_dir))
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with path.open("w" if known is None else "a", encoding="utf-8") as file:
            for record in records:
                record_id = str(uuid.uuid4())
                file.write(json.dumps(base | {"parentUuid": parent, "uuid": record_id} | record, default=str) + "\n")
                parent = record_id
    except OSError:
        return None
    _written[session.id] = (len(messages), parent)
    return str(path)


def _records(message: Any, project_dir: Path) -> list[dict[str, Any]]:
    from pydantic_ai.messages import (
        ModelRequest,
        RetryPromptPart,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    moment = getattr(message, "timestamp", None) or datetime.now(UTC)
    blocks: list[dict[str, Any]] = []
    if isinstance(message, ModelRequest):
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                items = [part.content] if isinstance(part.content, str) else part.content
                texts = [item if isinstance(item, str) else getattr(item, "content", None) for item in items]
                blocks += [{"type": "text", "text": text} for text in texts if isinstance(text, str)]
            elif isinstance(part, ToolReturnPart):
                blocks.append(
                    {"type": "tool_result", "tool_use_id": part.tool_call_id, "content": part.model_response_str()}
                )
            elif isinstance(part, RetryPromptPart) and part.tool_name is not None:
                result = {"type": "tool_result", "tool_use_id": part.tool_call_id, "is_error": True}
                blocks.append(result | {"content": part.model_response()})
        role = "user"
    else:
        for part in message.parts:
            if isinstance(part, TextPart):
                blocks.append({"type": "text", "text": part.content})
            elif isinstance(part, ThinkingPart):
                blocks.append({"type": "thinking", "thinking": part.content})
            elif isinstance(part, ToolCallPart):
                name = CLAUDE_NAME_OF.get(part.tool_name, part.tool_name)
                tool_input = claude_input(part.tool_name, part.args_as_dict(), project_dir)
                blocks.append({"type": "tool_use", "id": part.tool_call_id, "name": name, "input": tool_input})
        role = "assistant"
    if not blocks:
        return []
    content: dict[str, Any] = {"role": role, "content": blocks}
    if role == "assistant":
        content |= {"type": "message", "model": getattr(message, "model_name", None)}
    return [{"type": role, "message": content, "timestamp": moment.isoformat().replace("+00:00", "Z")}]
