"""`@path` mentions: the files and folders a prompt names, attached after it (the chat's input, file commands in
the chat and headless)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from pydantic_ai.messages import TextContent, UserContent

MAX_ATTACHED_CHARS = 100_000
"""The most characters of one `@file` put into a prompt."""
_AT_TOKEN = re.compile(r"(?:^|(?<=\s))@([^\s@]+)")


def attachment(text: str, kind: str) -> TextContent:
    """`text` the application adds to a prompt for the model (a file, a `!cmd`'s output, a note), not what the user
    typed: a `TextContent` whose metadata says so, which the search index and titles leave out."""
    from pydantic_ai.messages import TextContent

    return TextContent(text, metadata={"attached": kind})


def is_attachment(item: Any) -> bool:
    """Whether a prompt's content item (a `TextContent`, or its stored JSON form) is an `attachment`."""
    metadata: Any = (
        cast(dict[str, Any], item).get("metadata") if isinstance(item, dict) else getattr(item, "metadata", None)
    )
    return isinstance(metadata, dict) and "attached" in metadata


def typed_text(content: str | Sequence[UserContent]) -> str:
    """What the user typed in a prompt's content: its strings and its text items that are not attachments."""
    from pydantic_ai.messages import TextContent

    if isinstance(content, str):
        return content
    return "\n".join(
        item if isinstance(item, str) else item.content
        for item in content
        if isinstance(item, str) or (isinstance(item, TextContent) and not is_attachment(item))
    )


def mention_attachments(text: str, root: Path) -> tuple[list[TextContent], list[str], list[str]]:
    """The `attachment`s of the files and folders `text` names with `@path`; the attached paths; and the `@path`s in
    the project that name nothing there (they stay in the prompt as text).

    Files are `<file path="…">` blocks (cut to `MAX_ATTACHED_CHARS`), directories their listing. Paths outside the
    project are left alone.
    """
    attachments: list[TextContent] = []
    attached: list[str] = []
    missing: list[str] = []
    for token in dict.fromkeys(match.group(1).rstrip(".,;:!?)") for match in _AT_TOKEN.finditer(text)):
        target = (root / token).resolve()
        if target != root and root not in target.parents:
            continue
        if target.is_file():
            content = target.read_text(encoding="utf-8", errors="replace")
            if len(content) > MAX_ATTACHED_CHARS:
                content = content[:MAX_ATTACHED_CHARS] + f"\n… (cut at {MAX_ATTACHED_CHARS} characters)"
            attachments.append(attachment(f'<file path="{token}">\n{content.rstrip()}\n</file>', "file"))
        elif target.is_dir():
            names = sorted(entry.name + ("/" if entry.is_dir() else "") for entry in target.iterdir())
            listing = "\n".join(names[:500])
            attachments.append(attachment(f'<directory path="{token}">\n{listing}\n</directory>', "directory"))
        else:
            missing.append(token)
            continue
        attached.append(token)
    return attachments, attached, missing


def expand_mentions(text: str, root: Path) -> tuple[str, list[str]]:
    """`text` with its `mention_attachments` appended as text, where a prompt must be one string (steering); and
    the attached paths."""
    attachments, attached, _ = mention_attachments(text, root)
    return "\n\n".join([text, *(item.content for item in attachments)]), attached
