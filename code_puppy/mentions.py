"""`@path` mentions: the files and folders a prompt names, attached after it (the chat's input, file commands in
the chat and headless)."""

from __future__ import annotations

import re
from pathlib import Path

MAX_ATTACHED_CHARS = 100_000
"""The most characters of one `@file` put into a prompt."""
_AT_TOKEN = re.compile(r"(?:^|(?<=\s))@([^\s@]+)")


def expand_mentions(text: str, root: Path) -> tuple[str, list[str]]:
    """`text` with each `@path` naming a file in the project attached after it; and the attached paths.

    The text itself is kept as typed; files are appended as `<file path="…">` blocks (cut to
    `MAX_ATTACHED_CHARS`), directories as their listing. Paths outside the project are left alone.
    """
    attachments: list[str] = []
    attached: list[str] = []
    for token in dict.fromkeys(match.group(1).rstrip(".,;:!?)") for match in _AT_TOKEN.finditer(text)):
        target = (root / token).resolve()
        if target != root and root not in target.parents:
            continue
        if target.is_file():
            content = target.read_text(encoding="utf-8", errors="replace")
            if len(content) > MAX_ATTACHED_CHARS:
                content = content[:MAX_ATTACHED_CHARS] + f"\n… (cut at {MAX_ATTACHED_CHARS} characters)"
            attachments.append(f'<file path="{token}">\n{content.rstrip()}\n</file>')
        elif target.is_dir():
            names = sorted(entry.name + ("/" if entry.is_dir() else "") for entry in target.iterdir())
            attachments.append(f'<directory path="{token}">\n' + "\n".join(names[:500]) + "\n</directory>")
        else:
            continue
        attached.append(token)
    if not attachments:
        return text, []
    return text + "\n\n" + "\n\n".join(attachments), attached
