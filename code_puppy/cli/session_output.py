"""What `code-puppy sessions show|export|rename|archive|search|check|repair` and `code-puppy usage` print. Loaded
only when one of them runs (it imports pydantic-ai)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
)

from code_puppy.core.session_text import age, short_path, transcript
from code_puppy.errors import ConfigError
from code_puppy.history.groups import describe_groups
from code_puppy.sessions.catalog import SessionInfo
from code_puppy.sessions.checkpoints import CheckpointLog, checkpoint_lines
from code_puppy.sessions.costs import CostTotals
from code_puppy.sessions.journal import Journal
from code_puppy.sessions.repair import INDEX_PROBLEM, check, rebuild_index, repair
from code_puppy.sessions.session import find_session
from code_puppy.sessions.store import SqliteConversationStore
from code_puppy.terminal_text import printable


def rename_session(store: SqliteConversationStore, reference: str, name: str, out: TextIO) -> None:
    """`sessions rename ID NAME`; a name another session has is a `ConfigError`."""
    info = find_session(store, reference)
    try:
        store.sessions.rename(info.id, name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    print(f"session {info.id[:8]} is now called {name!r}", file=out)


def archive_session(store: SqliteConversationStore, reference: str, out: TextIO, *, archived: bool) -> None:
    """`sessions archive ID` / `sessions unarchive ID`."""
    info = find_session(store, reference)
    store.sessions.archive(info.id, archived=archived)
    if archived:
        print(
            f"archived session {info.id[:8]} ({info.label}); `code-puppy sessions unarchive` brings it back", file=out
        )
    else:
        print(f"session {info.id[:8]} ({info.label}) is listed again", file=out)


def search_sessions(
    store: SqliteConversationStore, query: str, out: TextIO, *, project_dir: Path | None, as_json: bool, color: bool
) -> int:
    """`sessions search QUERY`: the sessions matching every word of it, best first, with their matching lines; 0 with
    matches, 1 without, a `ConfigError` (exit 2) for an empty or non-UTF-8 query."""
    from code_puppy.sessions.search import MARK, SearchQueryError, catch_up, search

    if not query.strip():
        raise ConfigError("the search query is empty")
    shown = query if len(query) <= 60 else query[:60] + "…"
    try:
        query.encode()
    except UnicodeEncodeError:
        raise ConfigError(f"the search query {shown!r} is not valid UTF-8") from None
    try:
        try:
            catch_up(
                store.database,
                announce=lambda count: print(
                    f"indexing {count} session{'s' * (count != 1)} stored before search existed…", file=sys.stderr
                ),
            )
        except sqlite3.OperationalError as exc:  # busy for longer than the busy timeout: search what is indexed
            print(f"some older sessions are not indexed yet ({exc}): the results may miss them", file=sys.stderr)
        hits = search(store.database, query, project_dir=project_dir)
    except SearchQueryError as exc:
        raise ConfigError(f"search query {shown!r}: {exc}") from None
    except sqlite3.DatabaseError as exc:
        print(f"the search index is damaged ({exc}): `code-puppy sessions repair` rebuilds it", file=sys.stderr)
        return 1
    infos = {hit.session_id: store.sessions.find(hit.session_id)[0] for hit in hits}
    if as_json:
        plain = str.maketrans({MARK[0]: "", MARK[1]: ""})
        document = [
            {
                "session_id": hit.session_id,
                "name": infos[hit.session_id].name,
                "title": infos[hit.session_id].title,
                "project_dir": infos[hit.session_id].project_dir,
                "updated_at": infos[hit.session_id].updated_at.isoformat(),
                "matches": [
                    {"role": role, "line": line.translate(plain), "marked": _marked(line, "[", "]")}
                    for role, line in hit.lines
                ],
            }
            for hit in hits
        ]
        json.dump(document, out)
        out.write("\n")
    else:
        marks = ("\x1b[1;33m", "\x1b[0m") if color else ("[", "]")
        now = datetime.now(UTC)
        for hit in hits:
            info = infos[hit.session_id]
            print(
                printable(
                    f"{info.id[:8]}  {age(info.updated_at, now):>4}  {short_path(info.project_dir)}  {info.label}"
                ),
                file=out,
            )
            for role, line in hit.lines:
                print(
                    f"    {'›' if role == 'user' else '‹'} {_marked(printable(line, keep=''.join(MARK)), *marks)}",
                    file=out,
                )
    if not hits:
        print(
            "no session matches" + ("" if project_dir is None else f" in {project_dir} (--all searches every project)"),
            file=sys.stderr,
        )
    return 0 if hits else 1


def _marked(line: str, start: str, end: str) -> str:
    """`line` with the search's marks as `start` and `end`; a mark cut off by shortening is closed."""
    from code_puppy.sessions.search import MARK

    if line.count(MARK[0]) > line.count(MARK[1]):
        line += MARK[1]
    return line.replace(MARK[0], start).replace(MARK[1], end)


def usage_report(
    store: SqliteConversationStore, out: TextIO, *, since: datetime | None, project_dir: Path | None, as_json: bool
) -> None:
    """`code-puppy usage`: cost and tokens by local day and model, and the total; or the same as one JSON object."""
    rows = store.costs.by_day_and_model(since=since, project_dir=project_dir)
    total = sum((totals for _, _, totals in rows), CostTotals())
    rewrites = store.costs.history_rewrites(since=since, project_dir=project_dir) if rows else 0
    if as_json:
        document = {
            "days": [{"day": day, "model": model, **_cost_fields(totals)} for day, model, totals in rows],
            "total": _cost_fields(total) | {"history_rewrites": rewrites},
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
    if total.cache_read_tokens or total.cache_write_tokens or rewrites:
        cached = total.describe_cache() or "nothing cached"
        times = f"{rewrites} time{'s' if rewrites != 1 else ''}"
        print(f"prompt cache: {cached} · history rewritten {times} (each a cache write)", file=out)


def _usage_line(day: str, model: str, totals: CostTotals) -> str:
    """`CACHED` is the share of the input tokens read from the prompt cache."""
    share = "-" if totals.cache_share is None else f"{totals.cache_share:.0%}"
    tokens = f"{totals.input_tokens:>12,}{totals.output_tokens:>10,}{share:>10}"
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
        "cache_saved_usd": round(totals.saved_usd, 10),
    }


class _Printable:
    """Writes `printable` text to `out`."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def write(self, text: str) -> int:
        return self._out.write(printable(text))


def show_session(store: SqliteConversationStore, id_or_prefix: str, out: TextIO, *, groups: bool = False) -> None:
    """A readable transcript: prompts, answers, and each tool call with the first line of its result.

    With `groups`, the history groups a history processor will see on the next turn instead, with why each is
    protected and its estimated tokens, then which of them each configured processor would keep (a dry run).
    """
    shown = _Printable(out)
    info = find_session(store, id_or_prefix)
    conversation = asyncio.run(store.load(info.id))
    messages = conversation.messages if conversation is not None else []
    print(f"session {info.id} · {info.project_dir} · {info.model or '-'} · {info.message_count} messages", file=shown)
    if info.name or info.archived_at is not None:
        archived = "" if info.archived_at is None else f"archived {info.archived_at.astimezone():%Y-%m-%d %H:%M}"
        print(" · ".join(filter(None, (f"name: {info.name}" if info.name else "", archived))), file=shown)
    record = asyncio.run(store.read_record(info.id))
    if record is not None and record.forked_from is not None:
        source = store.sessions.find(record.forked_from)
        what = f" ({source[0].label})" if source and source[0].id == record.forked_from else " (deleted since)"
        print(f"forked from {record.forked_from}{what}", file=shown)
    if (imported := store.sessions.source(info.id)) is not None:
        tool, source_id = imported
        print(f"imported from {'Claude Code' if tool == 'claude-code' else 'Codex'} session {source_id}", file=shown)
    cost = store.costs.session_totals([info.id]).get(info.id)
    if cost is not None:
        copied = " (the turns it copied count in their source)" if record and record.forked_from else ""
        print(
            f"{cost.requests} requests · {cost.input_tokens:,} input / {cost.output_tokens:,} output tokens · "
            f"{cost.describe()}{copied}",
            file=shown,
        )
    if groups:
        print(f"cache epoch {info.cache_epoch} · history version {info.history_version}", file=shown)
    for line in describe_groups(messages) if groups else transcript(messages):
        print(line, file=shown)
    if groups:
        from code_puppy.history.preview import preview_processing
        from code_puppy.history.revision import Revision

        revision = Revision(info.cache_epoch, info.history_version)
        preview = preview_processing(
            messages, project_dir=Path(info.project_dir), model_name=info.model, revision=revision
        )
        for line in asyncio.run(preview):
            print(line, file=shown)
        return
    if found := list(reversed(CheckpointLog(store.database).of_session(info.id))):
        print("\ncheckpoints (newest first):", *checkpoint_lines(found), sep="\n", file=shown)
    for interrupted in Journal(store.database).read(info.id):
        print(
            "\n-- a turn that did not finish (journaled, not yet part of the history; "
            "it is recovered when the session is next continued, unless it is still running) --",
            file=shown,
        )
        for line in transcript(interrupted.messages):
            print(line, file=shown)


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
    data["archived_at"] = None if info.archived_at is None else info.archived_at.isoformat()
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
    if all(problem.startswith(INDEX_PROBLEM) for problem in problems):
        print("`code-puppy sessions repair` rebuilds the search index (the sessions are sound)", file=out)
    else:
        print("`code-puppy sessions repair` moves it aside and keeps what can still be read", file=out)
    return 1


def repair_store(out: TextIO) -> int:
    """`sessions repair`: rebuild a damaged sessions.db from what can still be read; a sound one is left alone."""
    path, problems = _examined()
    if not problems:
        print(f"{path}: ok, nothing to repair" if problems == [] else f"no sessions database at {path}", file=out)
        return 0
    if all(problem.startswith(INDEX_PROBLEM) for problem in problems) and rebuild_index(path):
        print(f"rebuilt the search index of {path}", file=out)
        return 0
    report = repair(path)
    print(f"moved the damaged database to {report.moved_to}", file=out)
    kept = f"kept {report.sessions} sessions and {report.messages} messages"
    if report.shortened_sessions:
        kept += f"; {report.shortened_sessions} of them end where a damaged page cut their history short"
    if report.lost_sessions:
        kept += f"; {report.lost_sessions} sessions could not be read at all and were left out"
    if report.unreadable_messages:
        count = report.unreadable_messages
        kept += (
            f"; {count} message{'' if count == 1 else 's'} that did not parse {'was' if count == 1 else 'were'} set "
            f"aside in {report.moved_to.name}"
        )
    print(f"rebuilt {path}: {kept}", file=out)
    return 0


def _examined() -> tuple[Path, list[str] | None]:
    """This user's sessions.db and what `integrity_check` finds wrong with it (None: there is none)."""
    from code_puppy.paths import sessions_db, storage_url

    if url := storage_url():
        from code_puppy.sessions.postgres import redacted

        raise ConfigError(
            f"the sessions store is on PostgreSQL ({redacted(url)}): `sessions check` and `repair` work on the SQLite "
            "file; `code-puppy storage check` reports on PostgreSQL"
        )
    path = sessions_db()
    if not path.is_file():
        return path, None
    try:
        return path, check(path)
    except sqlite3.DatabaseError as exc:
        return path, [str(exc)]
