"""What a `write_file` or `edit_file` call would change, before it runs: for the approval that shows it (the chat's
diff, the editor's ACP diff content)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_ai_harness.filesystem import Replacement

from code_puppy.workspace.project_files import BINARY_SAMPLE_BYTES


@dataclass(frozen=True)
class ProposedEdit:
    """A file as it is and as the call would leave it."""

    relative: str
    """The file's path relative to the project root, with `/`."""
    old: str | None
    """The text now; None when the file does not exist yet."""
    new: str


def proposed_edit(root: Path, tool_name: str, args: dict[str, Any], *, text: str | None = None) -> ProposedEdit | None:
    """The change a `write_file` or `edit_file` call would make, from its arguments and the file as it is: `text`
    when the editor the tools write through holds it, else the disk.

    None when there is nothing to show: another tool, a path outside the project, or an edit the tool will refuse
    (it changes nothing then, and its result tells the model why).
    """
    path = args.get("path")
    if tool_name not in ("write_file", "edit_file") or not isinstance(path, str):
        return None
    target = (root / path).resolve()
    try:
        relative = target.relative_to(root).as_posix()
        data = text.encode() if text is not None else target.read_bytes() if target.is_file() else None
    except (ValueError, OSError):
        return None
    if tool_name == "write_file":
        old = data.decode(errors="replace") if data is not None else None
        return ProposedEdit(relative, old, str(args.get("content", "")))
    if data is None or b"\x00" in data[:BINARY_SAMPLE_BYTES]:
        return None
    try:
        old = data.decode()  # bytes as they are: an edit matches `\r\n` as written, as the tool does
    except UnicodeDecodeError:
        return None
    new = _edited(old, args)
    return None if new is None else ProposedEdit(relative, old, new)


_REPLACEMENTS: TypeAdapter[list[Replacement] | None] = TypeAdapter(list[Replacement] | None)


def _edited(text: str, args: dict[str, Any]) -> str | None:
    """`text` as the harness's `edit_file` would leave it given `args`, or None when the tool would refuse them.

    The approval is asked before the tool runs, and the harness computes an edit only inside the tool (its public
    `FileSystemToolset.edit_file` takes one pair and writes the file), so its rules are followed here: one
    `old_text`/`new_text` pair or a non-empty `replacements` list, not both; replacements applied in order, each
    `old_text` non-empty and found exactly once in the text the previous ones left.
    """
    old_text, new_text = args.get("old_text"), args.get("new_text")
    try:
        replacements = _REPLACEMENTS.validate_python(args.get("replacements"))
    except ValidationError:
        return None  # pydantic-ai rejects the arguments before the tool runs
    if replacements is None:
        if not isinstance(old_text, str) or not isinstance(new_text, str):
            return None
        replacements = [Replacement(old_text=old_text, new_text=new_text)]
    elif old_text is not None or new_text is not None or not replacements:
        return None
    for replacement in replacements:
        if not replacement.old_text or text.count(replacement.old_text) != 1:
            return None
        text = text.replace(replacement.old_text, replacement.new_text, 1)
    return text
