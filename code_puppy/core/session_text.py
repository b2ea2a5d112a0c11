"""Sessions as text, for the chat and the command line alike: the list of sessions, how long ago, a transcript."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from code_puppy.mentions import is_attachment, typed_text
from code_puppy.sessions.costs import CostTotals, format_cost
from code_puppy.sessions.store import SqliteConversationStore
from code_puppy.terminal_text import printable


def list_sessions(
    store: SqliteConversationStore,
    project_dir: Path | None,
    out: TextIO,
    *,
    archived: bool = False,
    failed: bool = False,
) -> None:
    """One line per session, newest first: id, age, turns, project, cost, and its name or title. Sessions whose every
    run failed before the model answered only with `failed` (TURNS `failed`); otherwise a last line counts them."""
    every = store.sessions.recent(project_dir, archived=archived)
    sessions = [info for info in every if failed or not info.failed]
    hidden = len(every) - len(sessions)
    one = hidden == 1
    note = (
        f"({hidden} session{'' if one else 's'} whose every run failed before the model answered "
        f"{'is' if one else 'are'} not listed: `code-puppy sessions list --all` lists {'it' if one else 'them'})"
    )
    if not sessions:
        where = f" in {project_dir}" if project_dir is not None else ""
        print(f"no {'archived ' if archived else ''}sessions{where}", *[note] * bool(hidden), sep="\n", file=out)
        return
    costs = store.costs.session_totals(info.id for info in sessions)
    now = datetime.now(UTC)
    print(f"{'ID':<10}{'AGE':>5}{'TURNS':>7}  {'PROJECT':<24}{'COST':>10}  NAME/TITLE", file=out)
    for info in sessions:
        turns = "failed" if info.failed else str(info.turns) if info.indexed else "-"
        cost = short_cost(costs.get(info.id))
        label = f"{info.name} · {info.title}" if info.name and info.title else info.label
        line = f"{info.id[:8]:<10}{age(info.updated_at, now):>5}{turns:>7}  {short_path(info.project_dir):<24}"
        print(printable(f"{line}{cost:>10}  {label}"), file=out)
    if hidden:
        print(note, file=out)


def age(moment: datetime, now: datetime) -> str:
    """How long ago `moment` was, in its largest unit: `40s`, `5m`, `3h`, `2d`, `7w`."""
    seconds = max(0, int((now - moment).total_seconds()))
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def short_path(path: str, width: int = 23) -> str:
    """`path` with the home directory as `~`, its end kept when it is longer than `width`."""
    home = str(Path.home())
    shown = "~" + path[len(home) :] if path == home or path.startswith(home + "/") else path
    return shown if len(shown) <= width else "…" + shown[-(width - 1) :]


def short_cost(totals: CostTotals | None) -> str:
    """A cost for a table column: `$0.0123`, `≥$0.0123` (some requests unpriced), `unknown` (none priced, or none
    recorded: sessions from before code-puppy counted costs)."""
    if totals is None or totals.cost_usd is None:
        return "unknown"
    shown = format_cost(totals.cost_usd)
    return shown if totals.complete else f"≥{shown}"


def transcript(messages: Sequence[ModelMessage]) -> list[str]:
    lines: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(message, ModelRequest) and isinstance(part, UserPromptPart):
                lines += ["", "› " + typed_text(part.content).replace("\n", "\n  ")]
                if not isinstance(part.content, str):
                    attached = [item for item in part.content if isinstance(item, TextContent) and is_attachment(item)]
                    lines += [f"  (attached: {(item.content.splitlines() or [''])[0][:120]})" for item in attached]
            elif isinstance(part, SystemPromptPart):
                lines.append(f"[system] {part.content[:200]}")
            elif isinstance(part, ToolReturnPart):
                first = (part.model_response_str().strip().splitlines() or [""])[0]
                outcome = "" if part.outcome == "success" else f"{part.outcome}: "
                lines.append(f"  ↳ {outcome}{first[:120]}")
            elif isinstance(message, ModelResponse) and isinstance(part, ToolCallPart):
                lines.append(f"⚙ {part.tool_name}({part.args_as_json_str()[:120]})")
            elif isinstance(part, TextPart) and part.content.strip():
                lines += ["", part.content.strip()]
            elif isinstance(part, ThinkingPart) and part.content.strip():
                lines.append(f"(thinking) {part.content.strip()[:200]}")
    return lines
