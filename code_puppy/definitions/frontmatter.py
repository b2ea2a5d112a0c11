"""The frontmatter of agent, command and skill files: YAML, with a lenient reader for what YAML rejects (issue 25).

Real Claude Code files are mostly YAML (block scalars `>-` and `|` in descriptions, quoted strings with escapes, flow
lists), and many are not: an unquoted `: ` inside a description (`Use when: …`) is a YAML error that Claude Code
reads past. So a block is read with PyYAML's safe loader first (a dependency of the harness skills already, declared
in pyproject), and with a small line reader when YAML rejects it. Both give the same shape: text and lists of text.
"""

from __future__ import annotations

import re
from typing import cast

_KEY = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.-]*)\s*:(.*)$")


class FrontmatterError(ValueError):
    """Frontmatter that cannot be read; the message says where."""


def split_frontmatter(text: str, *, required: bool = False) -> tuple[dict[str, str | list[str]], str]:
    """The frontmatter's keys and the body after it.

    The frontmatter is read as YAML (block scalars, quoting and flow lists as YAML means them); one YAML rejects (an
    unquoted `: ` in a description, common in Claude Code files) is read by a lenient line reader instead. Scalars
    come back as text, lists as lists of text; a key without a value is left out (as if unset), and a nested
    mapping (`hooks:`) is not read here.

    Raises:
        FrontmatterError: An unclosed block, a line that is not `key: value`, or (when `required`) none at all.
    """
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        if required:
            raise FrontmatterError("no frontmatter (a `---` block with at least `description:`)")
        return {}, text.strip()
    closing = next((index for index in range(1, len(lines)) if lines[index].strip() == "---"), None)
    if closing is None:
        raise FrontmatterError("the frontmatter's `---` block is not closed")
    fields = _yaml_fields("\n".join(lines[1:closing]))
    if fields is None:
        fields = _lenient_fields(lines[1:closing])
    return fields, "\n".join(lines[closing + 1 :]).strip()


def _yaml_fields(block: str) -> dict[str, str | list[str]] | None:
    """The frontmatter as YAML reads it, or None when YAML rejects it or it is not a mapping."""
    import yaml  # ~20 ms, paid only when a definition file is read

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data: object = yaml.load(block, Loader=loader)
    except yaml.YAMLError:
        return None
    if data is None:
        return {}
    if not isinstance(data, dict):
        return None
    fields: dict[str, str | list[str]] = {}
    for key, value in cast(dict[object, object], data).items():
        if value is None or isinstance(value, dict):
            continue
        if isinstance(value, list):
            fields[str(key)] = _rejoined([_scalar(item) for item in cast(list[object], value) if item is not None])
        else:
            fields[str(key)] = _scalar(value)
    return fields


def _rejoined(items: list[str]) -> list[str]:
    """Items YAML split inside parentheses (`[Read, Bash(git add:*, git status:*)]`) joined back into one."""
    joined: list[str] = []
    for item in items:
        if joined and joined[-1].count("(") > joined[-1].count(")"):
            joined[-1] += f", {item}"
        else:
            joined.append(item)
    return joined


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value.strip() if isinstance(value, str) else str(value)


_BLOCK_SCALAR = re.compile(r"^([|>])[-+]?[1-9]?$")


def _lenient_fields(lines: list[str]) -> dict[str, str | list[str]]:
    """The frontmatter read line by line: `key: value` with anything after the first colon as the value (quotes
    removed), block and inline lists, block scalars (`|`, `>`, with `-`/`+`), indented continuation lines.

    Raises:
        FrontmatterError: A line that is not `key: value` nor a continuation.
    """
    fields: dict[str, str | list[str]] = {}
    blocks: dict[str, tuple[str, list[str]]] = {}
    """Block scalars: their style and raw lines."""
    explicit_empty: set[str] = set()
    current: str | None = None
    for number, raw in enumerate(lines, start=2):
        stripped = raw.strip()
        if current in blocks and (not stripped or raw[0] in " \t"):
            blocks[current][1].append(raw)
            continue
        if not stripped or raw.lstrip().startswith("#"):
            continue
        value = fields[current] if current is not None else None
        if current is not None and isinstance(value, str) and value.startswith("[") and not value.endswith("]"):
            # A flow list over several lines: its lines, `]` too, may start anywhere.
            joined = f"{value} {stripped}"
            fields[current] = flow_items(joined) if joined.endswith("]") else joined
            continue
        if current is not None and raw[0] in " \t":
            if stripped.startswith("- ") and isinstance(value, list):
                value.append(_unquote(stripped[2:].strip()))
            elif isinstance(value, str):
                fields[current] = f"{value} {stripped}".strip()
            elif not value:
                fields[current] = stripped
            else:
                raise FrontmatterError(f"line {number}: cannot read `{stripped[:40]}`")
            continue
        match = _KEY.match(raw)
        if match is None:
            raise FrontmatterError(f"line {number}: expected `key: value`, found `{stripped[:40]}`")
        key, value = match[1], match[2].strip()
        current = key
        if block := _BLOCK_SCALAR.match(value):
            blocks[key] = (block[1], [])
            fields[key] = ""
        elif not value:
            fields[key] = []
        elif value.startswith("[") and value.endswith("]"):
            fields[key] = flow_items(value)
            explicit_empty.add(key)
        elif value.startswith("["):
            fields[key] = value
            explicit_empty.add(key)
        else:
            fields[key] = _unquote(value)
    for key, (style, raw_lines) in blocks.items():
        fields[key] = _block_text(style, raw_lines)
    return {key: value for key, value in fields.items() if value != [] or key in explicit_empty}


def _block_text(style: str, raw_lines: list[str]) -> str:
    """A block scalar's text: `|` keeps the lines, `>` folds them into one (a blank line stays a line break)."""
    indent = min((len(line) - len(line.lstrip()) for line in raw_lines if line.strip()), default=0)
    lines = [line[indent:].rstrip() for line in raw_lines]
    if style == "|":
        return "\n".join(lines).strip()
    text = ""
    for line in lines:
        if not line:
            text += "\n"
        elif text and not text.endswith("\n"):
            text += " " + line
        else:
            text += line
    return text.strip()


def split_items(raw: str) -> list[str]:
    """`Read, Grep, Bash(git diff:*, git log:*)`: commas inside parentheses or quotes belong to the item."""
    items: list[str] = []
    depth = 0
    quote = ""
    current = ""
    for character in raw:
        if quote:
            quote = "" if character == quote else quote
        elif character in "\"'" and not current.strip():  # an item's opening quote; `don't` is no quote
            quote = character
        elif character == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        else:
            depth += (character == "(") - (character == ")")
        current += character
    return [item.strip() for item in [*items, current] if item.strip()]


def flow_items(value: str) -> list[str]:
    """A flow list, `["Read", "Bash(git add:*, git status:*)"]`, as its items."""
    return [_unquote(item) for item in split_items(value.strip()[1:-1])]


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1].replace("\\n", "\n") if value[0] == '"' else value[1:-1]
    return value
