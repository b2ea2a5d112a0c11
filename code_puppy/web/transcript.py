"""A stored conversation as HTML, rendered on the server: the user's and the model's text as markdown (raw HTML in it
escaped, never passed through), each tool call folded with its arguments and its result, an edit as a diff, steers
and attached notes marked. One page of messages at a time, so a session of any length opens at once."""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from html import escape
from typing import Any, cast

from markdown_it import MarkdownIt
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from code_puppy.core.events import tool_call_line
from code_puppy.mentions import is_attachment, typed_text

PAGE = 200
"""Messages on one page of a transcript (the newest page first)."""

_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")


def markdown(text: str) -> str:
    """`text` as HTML: markdown rendered, raw HTML escaped, `javascript:` links refused (markdown-it's own check)."""
    return _MARKDOWN.render(text)


def diff_html(old: str | None, new: str, path: str) -> str:
    """A unified diff of a file's text, each line coloured by what happened to it."""
    lines = difflib.unified_diff(
        (old or "").splitlines(),
        new.splitlines(),
        "/dev/null" if old is None else f"a/{path}",
        f"b/{path}",
        lineterm="",
    )
    rows: list[str] = []
    for line in lines:
        kind = "hunk" if line[:3] in ("---", "+++", "@@ ") else {"+": "add", "-": "del"}.get(line[:1], "")
        rows.append(f'<span class="{kind}">{escape(line)}</span>')
    return f'<pre class="diff">{"".join(rows)}</pre>'


def edit_diff(call: ToolCallPart) -> str | None:
    """The diff an edit call made, from its arguments alone (the file before it is not kept): `edit_file`'s
    replacements, `write_file`'s whole content."""
    args = call.args_as_dict()
    path = str(args.get("path", "?"))
    if call.tool_name == "write_file" and isinstance(args.get("content"), str):
        return diff_html(None, args["content"], path)
    replacements: Any = args.get("replacements") or ([args] if "old_text" in args else None)
    if call.tool_name != "edit_file" or not isinstance(replacements, list):
        return None
    items = [cast(dict[str, Any], item) for item in cast(list[Any], replacements) if isinstance(item, dict)]
    return "".join(diff_html(str(item.get("old_text", "")), str(item.get("new_text", "")), path) for item in items)


def page_bounds(total: int, before: int | None) -> tuple[int, int]:
    """The messages [start, end) of the page that ends before message `before` (the newest page by default)."""
    end = total if before is None else max(0, min(before, total))
    return max(0, end - PAGE), end


def render(messages: Sequence[ModelMessage], start: int, end: int) -> str:
    """Messages [start, end) as HTML; a tool call's result, found anywhere in the conversation, folded under it."""
    results = {
        part.tool_call_id: part
        for message in messages[start : min(len(messages), end + 1)]
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }
    html: list[str] = []
    last_response_run: str | None = None
    for message in messages[start:end]:
        if isinstance(message, ModelResponse):
            html += [_response_part(part, results) for part in message.parts]
            last_response_run = message.run_id
            continue
        steered = message.run_id is not None and message.run_id == last_response_run
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                html.append(_prompt(part, steered=steered))
    return "\n".join(filter(None, html))


def _prompt(part: UserPromptPart, *, steered: bool) -> str:
    typed = typed_text(part.content)
    notes = (
        []
        if isinstance(part.content, str)
        else [item.content for item in part.content if isinstance(item, TextContent) and is_attachment(item)]
    )
    label = "steer" if steered else "you"
    folded = "".join(
        f'<details class="note"><summary>note: {escape((text.splitlines() or [""])[0][:100])}</summary>'
        f"<pre>{escape(text)}</pre></details>"
        for text in notes
    )
    return f'<div class="msg {label}"><div class="who">{label}</div>{markdown(typed)}{folded}</div>'


def _response_part(part: ModelResponsePart, results: dict[str, ToolReturnPart]) -> str:
    if isinstance(part, TextPart) and part.content.strip():
        return f'<div class="msg model"><div class="who">model</div>{markdown(part.content)}</div>'
    if isinstance(part, ThinkingPart) and part.content.strip():
        return f'<details class="thinking"><summary>thinking</summary>{markdown(part.content)}</details>'
    if isinstance(part, ToolCallPart):
        return _tool_call(part, results.get(part.tool_call_id))
    return ""


def _tool_call(call: ToolCallPart, result: ToolReturnPart | None) -> str:
    args = json.dumps(call.args_as_dict(), indent=2, ensure_ascii=False)
    diff = edit_diff(call)
    line = tool_call_line(call.tool_name, call.args_as_dict())
    if result is None:
        outcome, text = "pending", "(no result stored)"
    else:
        outcome, text = result.outcome, result.model_response_str()
    first = (text.strip().splitlines() or [""])[0][:120]
    return (
        f'<details class="tool {escape(outcome)}"><summary>⚙ {escape(line)}'
        f' <span class="result">↳ {escape(first)}</span></summary>'
        f'{diff or ""}<div class="label">arguments</div><pre>{escape(args)}</pre>'
        f'<div class="label">result ({escape(outcome)})</div><pre>{escape(text)}</pre></details>'
    )
