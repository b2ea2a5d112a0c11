"""`CutOffCalls`: a tool call whose arguments were cut off never runs a tool that changes anything."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai import RunContext, ToolDefinition
from pydantic_ai.capabilities import AbstractCapability, RawToolArgs
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart

from code_puppy.tools import is_read_only


@dataclass
class CutOffCalls(AbstractCapability[Any]):
    """Repairs malformed tool-call JSON where nothing can be lost, and refuses calls that were cut off or that hold
    several calls' arguments.

    A call is cut off when the response that made it stopped on the output limit (finish reason `length`), or when
    its arguments end inside a string, object or array (a stream that ended mid-arguments). Closing such JSON would
    run the tool with whatever prefix arrived: `write_file` with half its content replaces the whole file. So a
    cut-off call to a tool that can change anything (an edit, a command, an MCP tool not marked read-only) fails
    with a result asking the model to send it again, smaller; a read-only tool's call is repaired and runs. Arguments
    that are several objects one after another (`{…}{…}`) fail too, whatever the tool: a repair keeps one and drops
    the rest, and the one kept need not be the one meant (an empty `content` after the real one empties the file).
    Other malformed JSON (a trailing comma, a code fence around it) is repaired with `json-repair`, as the harness's
    `RepairToolArguments` does.
    """

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    async def before_tool_validate(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: RawToolArgs
    ) -> RawToolArgs:
        raw = args if isinstance(args, str) else None
        valid = raw is None or _parses(raw)
        values, ends_inside = json_outline(raw) if raw is not None else (1, False)
        cut_by_limit = _stopped_on_length(ctx.messages, call.tool_call_id)
        if (cut_by_limit or ends_inside) and not is_read_only(tool_def):
            why = "it hit the output token limit" if cut_by_limit else "its arguments end mid-JSON"
            raise ToolFailed(
                f"Your `{call.tool_name}` call was cut off ({why}), so it was not run and nothing changed. "
                "Send it again, smaller: split a large file into several writes or make a smaller edit."
            )
        if valid or raw is None:
            return args
        if values > 1:
            raise ToolFailed(
                f"Your `{call.tool_name}` call's arguments are {values} JSON objects one after another, so it was not "
                "run and nothing changed. Send each call again on its own, its arguments as one JSON object."
            )
        import json_repair  # only once a model sends malformed JSON

        try:
            return json_repair.repair_json(raw, skip_json_loads=True, ensure_ascii=False)
        except (ValueError, RecursionError):
            return args


def json_outline(text: str) -> tuple[int, bool]:
    """How many objects and arrays JSON text opens at its top level, and whether it stops inside a string, object or
    array (what a reply cut off mid-arguments leaves)."""
    depth = values = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            if depth <= 0:
                values += 1
            depth += 1
        elif char in "}]":
            depth -= 1
    return values, in_string or depth > 0


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _stopped_on_length(messages: Sequence[ModelMessage], tool_call_id: str) -> bool:
    for message in reversed(messages):
        if isinstance(message, ModelResponse) and any(
            isinstance(part, ToolCallPart) and part.tool_call_id == tool_call_id for part in message.parts
        ):
            return message.finish_reason == "length"
    return False
