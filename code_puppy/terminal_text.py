"""Text from elsewhere (a model, a transcript, an imported title) made safe to show: a terminal acts on control
characters instead of showing them, so one escape sequence or carriage return could repaint what the user reads."""

from __future__ import annotations

import re

CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f]")
"""Characters a terminal may act on rather than show: escape sequences begin with one."""

_NOT_PLAIN = re.compile("\r\n|[^ -~]")
"""Whatever is not printable ASCII: the characters that may not show as themselves (a CRLF line end taken whole)."""


def printable(text: str, keep: str = "", *, spelled: bool = False) -> str:
    """`text` with each control character but newlines, tabs and `keep` shown as `�`.

    `spelled` shows exactly what is there instead, for a question the user answers: each character that would not
    show as itself (C0 and C1 controls, the bidi controls and zero-width characters that reorder or hide text, any
    other format character or unusual space) is written as its escape (`\\x1b`, `\\r`, `\\u202e`). A CRLF line end
    stays as it is: it moves to the next line, like a newline.
    """
    kept = "\n\t" + keep
    if not spelled:
        return CONTROL_CHARACTERS.sub(lambda found: found[0] if found[0] in kept else "�", text)

    def spell(found: re.Match[str]) -> str:
        character = found[0]
        if character == "\r\n" or character in kept or character.isprintable():
            return character
        return repr(character)[1:-1]

    return _NOT_PLAIN.sub(spell, text)
