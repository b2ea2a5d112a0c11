"""The chat's bottom toolbar in one terminal line: what runs (model, session, context, cost, permission mode), then the
keys. In a narrow terminal the least needed parts are shortened or left out first; the model and the mode stay."""

from __future__ import annotations

from collections.abc import Callable

_SQUEEZES: tuple[tuple[str, Callable[[str], str] | None], ...] = (
    ("newline", None),
    ("queue", None),
    ("session", lambda text: text.removeprefix("session ")),
    ("cost", lambda text: text.replace("at least ", "≥").replace("cost unknown", "cost ?")),
    ("context", lambda text: f"ctx {text.split()[-1]}"),  # `ctx 12.3k/128k 9%` → `ctx 9%`
    ("cmd", None),
    ("file", None),
    ("session", None),
    ("steer", None),
    ("help", None),
    ("context", None),
    ("cost", None),
    ("cancel", None),
)
"""What gives way, in order, while the line is too wide: a part shortened (by the function) or left out (None)."""


def toolbar_line(status: dict[str, str], keys: dict[str, str], width: int) -> str:
    """` model · session … · mode   keys`, at most `width - 1` columns wide (the last column left free, so no terminal
    wraps it). `status` holds `model` and `mode` and any of `session`, `context`, `cost`; `keys` any of `help`,
    `file`, `cmd`, `newline` (idle) or `steer`, `queue`, `cancel` (busy)."""
    status, keys = dict(status), dict(keys)

    def line() -> str:
        return f" {' · '.join(status.values())}   {' · '.join(keys.values())}".rstrip()

    for name, shorter in _SQUEEZES:
        if len(line()) < width:
            return line()
        for parts in (status, keys):
            if name in parts:
                if shorter is None:
                    del parts[name]
                else:
                    parts[name] = shorter(parts[name])
    if (over := len(line()) - width + 1) > 0 and "model" in status:  # a model name too long for the terminal
        model = status["model"]
        status["model"] = model[: max(1, len(model) - over - 1)] + "…"
    return line()[: width - 1]
