"""`code-puppy sessions list|show|export|check|repair`: what the command line shows of stored sessions."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import TextIO

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from code_puppy.agents.history_groups import describe_groups

from .catalog import SessionInfo
from .checkpoints import CheckpointLog, checkpoint_lines
from .costs import CostTotals, format_cost
from .journal import Journal
from .repair import check, repair
from .session import find_session
from .store import SqliteConversationStore


def list_sessions(store: SqliteConversationStore, project_dir: Path | None, out: TextIO) -> None:
    """One line per session, newest first: id, updated, messages, model, cost, title."""
    sessions = store.sessions.recent(project_dir)
    if not sessions:
        where = f" in {project_dir}" if project_dir is not None else ""
        print(f"no sessions{where}", file=out)
        return
    costs = store.costs.session_totals(info.id for info in sessions)
    print(f"{'ID':<10}{'UPDATED':<18}{'MSGS':>5}  {'MODEL':<28}{'COST':>10}  TITLE", file=out)
    for info in sessions:
        updated = info.updated_at.astimezone().strftime("%Y-%m-%d %H:%M")
        model = (info.model or "-")[:27]
        cost = _short_cost(costs.get(info.id))
        title = info.title or "(untitled)"
        print(f"{info.id[:8]:<10}{updated:<18}{info.message_count:>5}  {model:<28}{cost:>10}  {title}", file=out)


def _short_cost(totals: CostTotals | None) -> str:
    """A cost for a table column: `$0.0123`, `≥$0.0123` (some requests unpriced), `unknown` (none priced, or none
    recorded: sessions from before code-puppy counted costs)."""
    if totals is None or totals.cost_usd is None:
        return "unknown"
    shown = format_cost(totals.cost_usd)
    return shown if totals.complete else f"≥{shown}"


def usage_report(
    store: SqliteConversationStore, out: TextIO, *, since: datetime | None, project_dir: Path | None, as_json: bool
) -> None:
    """`code-puppy usage`: cost and tokens by local day and model, and the total; or the same as one JSON object."""
    rows = store.costs.by_day_and_model(since=since, project_dir=project_dir)
    total = sum((totals for _, _, totals in rows), CostTotals())
    if as_json:
        document = {
            "days": [{"day": day, "model": model, **_cost_fields(totals)} for day, model, totals in rows],
            "total": _cost_fields(total),
        }
        json.dump(document, out)
        out.write("\n")
        return
    if not rows:
        print("no model requests recorded" + (" in that period" if since is not None else ""), file=out)
        return
    print(f"{'DAY':<12}{'MODEL':<28}{'REQS':>6}{'INPUT':>12}{'OUTPUT':>10}{'CACHED':>10}  COST", file=out)
    for day, model, totals in rows:
        print(_usage_line(day, model[:27], totals), file=out)
    print(_usage_line("total", "", total), file=out)


def _usage_line(day: str, model: str, totals: CostTotals) -> str:
    tokens = f"{totals.input_tokens:>12,}{totals.output_tokens:>10,}{totals.cache_read_tokens:>10,}"
    return f"{day:<12}{model:<28}{totals.requests:>6}{tokens}  {totals.describe()}"


def _cost_fields(totals: CostTotals) -> dict[str, object]:
    return {
        "requests": totals.requests,
        "input_tokens": totals.input_tokens,
        "output_tokens": totals.output_tokens,
        "cache_read_tokens": totals.cache_read_tokens,
        "cache_write_tokens": totals.cache_write_tokens,
        "cost_usd": totals.cost_usd,
        "cost_complete": totals.complete,
    }


def show_session(store: SqliteConversationStore, id_or_prefix: str, out: TextIO, *, groups: bool = False) -> None:
    """A readable transcript: prompts, answers, and each tool call with the first line of its result.

    With `groups`, the history groups a history processor will see on the next turn instead, with why each is
    protected and its estimated tokens, then which of them each configured processor would keep (a dry run).
    """
    info = find_session(store, id_or_prefix)
    conversation = asyncio.run(store.load(info.id))
    messages = conversation.messages if conversation is not None else []
    print(f"session {info.id} · {info.project_dir} · {info.model or '-'} · {info.message_count} messages", file=out)
    cost = store.costs.session_totals([info.id]).get(info.id)
    if cost is not None:
        print(
            f"{cost.requests} requests · {cost.input_tokens:,} input / {cost.output_tokens:,} output tokens · "
            f"{cost.describe()}",
            file=out,
        )
    if groups:
        print(f"cache epoch {info.cache_epoch} · history version {info.history_version}", file=out)
    for line in describe_groups(messages) if groups else transcript(messages):
        print(line, file=out)
    if groups:
        from code_puppy.agents.history_processors import Revision
        from code_puppy.history.preview import preview_processing

        revision = Revision(info.cache_epoch, info.history_version)
        preview = preview_processing(
            messages, project_dir=Path(info.project_dir), model_name=info.model, revision=revision
        )
        for line in asyncio.run(preview):
            print(line, file=out)
        return
    if found := list(reversed(CheckpointLog(store.database).of_session(info.id))):
        print("\ncheckpoints (newest first):", *checkpoint_lines(found), sep="\n", file=out)
    for interrupted in Journal(store.database).read(info.id):
        print(
            "\n-- a turn that did not finish (journaled, not yet part of the history; "
            "it is recovered when the session is next continued, unless it is still running) --",
            file=out,
        )
        for line in transcript(interrupted.messages):
            print(line, file=out)


def transcript(messages: Sequence[ModelMessage]) -> list[str]:
    lines: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(message, ModelRequest) and isinstance(part, UserPromptPart):
                content = part.content if isinstance(part.content, str) else " ".join(map(str, part.content))
                lines += ["", "› " + content.replace("\n", "\n  ")]
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


def export_session(store: SqliteConversationStore, id_or_prefix: str, out: TextIO) -> None:
    """JSON: the session's metadata and its messages in pydantic-ai's `ModelMessagesTypeAdapter` form."""
    info = find_session(store, id_or_prefix)
    conversation = asyncio.run(store.load(info.id))
    messages = conversation.messages if conversation is not None else []
    document = {
        "session": _metadata(info),
        "messages": ModelMessagesTypeAdapter.dump_python(messages, mode="json"),
    }
    json.dump(document, out, indent=2)
    out.write("\n")


def _metadata(info: SessionInfo) -> dict[str, object]:
    data = asdict(info)
    data["created_at"] = info.created_at.isoformat()
    data["updated_at"] = info.updated_at.isoformat()
    return data


def check_store(out: TextIO) -> int:
    """`sessions check`: 0 when every page of sessions.db reads back sound, 1 with SQLite's findings."""
    path, problems = _examined()
    if problems is None:
        print(f"no sessions database at {path} yet", file=out)
        return 0
    if not problems:
        print(f"{path}: ok", file=out)
        return 0
    print(f"{path} is damaged:", *(f"  {problem}" for problem in problems[:20]), sep="\n", file=out)
    print("`code-puppy sessions repair` moves it aside and keeps what can still be read", file=out)
    return 1


def repair_store(out: TextIO) -> int:
    """`sessions repair`: rebuild a damaged sessions.db from what can still be read; a sound one is left alone."""
    path, problems = _examined()
    if not problems:
        print(f"{path}: ok, nothing to repair" if problems == [] else f"no sessions database at {path}", file=out)
        return 0
    report = repair(path)
    print(f"moved the damaged database to {report.moved_to}", file=out)
    kept = f"kept {report.sessions} sessions and {report.messages} messages"
    if report.shortened_sessions:
        kept += f"; {report.shortened_sessions} of them end where a damaged page cut their history short"
    if report.lost_sessions:
        kept += f"; {report.lost_sessions} sessions could not be read at all and were left out"
    print(f"rebuilt {path}: {kept}", file=out)
    return 0


def _examined() -> tuple[Path, list[str] | None]:
    """This user's sessions.db and what `integrity_check` finds wrong with it (None: there is none)."""
    from code_puppy.paths import data_dir

    path = data_dir() / "sessions.db"
    if not path.is_file():
        return path, None
    try:
        return path, check(path)
    except sqlite3.DatabaseError as exc:
        return path, [str(exc)]
