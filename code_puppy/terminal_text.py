"""Text from elsewhere (a model, a transcript, an imported title) made safe to show: a terminal acts on control
characters instead of showing them, so one escape sequence or carriage return could repaint what the user reads."""

from __future__ import annotations

import re

CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f]")
"""Characters a terminal may act on rather than show: escape sequences begin with one."""


def printable(text: str, keep: str = "") -> str:
    """`text` with each control character but newlines, tabs and `keep` shown as `�`."""
    kept = "\n\t" + keep
    return CONTROL_CHARACTERS.sub(lambda found: found[0] if found[0] in kept else "�", text)
