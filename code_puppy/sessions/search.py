"""Full-text search over sessions: `search_text`, the text of user prompts and model answers, and its index: SQLite's
FTS5 table `search`, or on PostgreSQL a `tsvector` column of `search_text` with a GIN index.

A save indexes the messages it appends in its own transaction (`index_new`), so the index never lags a saved
session. Sessions stored before the index existed (`indexed = 0`) are read into it lazily by `catch_up`, in short
`BEGIN IMMEDIATE` transactions (a batch of sessions each, about `BATCH_SECONDS` long) so that the runs saving turns
meanwhile wait little, and by one process at a time (`Database.exclusive`). The chat
and headless runs start it in a background thread (`start_indexer`), which does nothing when another process holds
the lock and stops at the first SQLite error (what is left waits for later); `code-puppy sessions search` waits for the
lock and runs it before it searches. Tool calls, their output and attachments (`!cmd` output, `@file` contents) are
never indexed.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from code_puppy.mentions import is_attachment

from .schema import Connection, Database, Location

__all__ = (
    "MARK",
    "SearchHit",
    "SearchQueryError",
    "catch_up",
    "continuation",
    "fts_query",
    "index_saved",
    "recount_turns",
    "search",
    "start_indexer",
    "text_parts",
)

BATCH_SECONDS = 0.03
"""About how long one transaction of `catch_up` holds the write lock."""

MARK = ("\x02", "\x03")
"""What `search` puts around each matched term in a hit's line."""


class SearchQueryError(ValueError):
    """A query FTS5 cannot run; the message says why."""


_QUERY_WORD = re.compile(r'"([^"]*)"?|(\S+)')


def fts_query(query: str) -> str:
    """`query` as plain words for FTS5: each word, or "double-quoted phrase", becomes an FTS5 string that must match
    (so `code-puppy`, `main.py` or `NEAR(a` are text, never syntax); a word's trailing `*` keeps prefix matching."""
    terms: list[str] = []
    for match in _QUERY_WORD.finditer(query):
        phrase, word = match.group(1), match.group(2)
        text = phrase if phrase is not None else word.rstrip("*")
        prefix = "*" if word is not None and word.endswith("*") and text else ""
        terms.append('"' + text.replace('"', '""') + '"' + prefix)
    return " ".join(terms)


def text_parts(message_json: str) -> list[tuple[str, str]]:
    """The searchable text of a stored message, as (role, text): its user prompts, or its answer's text parts."""
    message: dict[str, Any] = json.loads(message_json)
    found: list[tuple[str, str]] = []
    for part in message.get("parts", ()):
        kind = part.get("part_kind")
        if message.get("kind") == "request" and kind == "user-prompt":
            content = part.get("content")
            items: list[Any] = [content] if isinstance(content, str) else list(content or ())
            # `!cmd` output, `@file` contents and notes are attachments: never indexed (they may hold secrets).
            texts = [item if isinstance(item, str) else item.get("content") for item in items if _is_typed(item)]
            if text := "\n".join(t for t in texts if isinstance(t, str)).strip():
                found.append(("user", text))
        elif message.get("kind") == "response" and kind == "text" and (text := str(part.get("content", "")).strip()):
            found.append(("model", text))
    return found


def _is_typed(item: Any) -> bool:
    return isinstance(item, str) or (
        isinstance(item, dict) and cast(dict[str, Any], item).get("kind") == "text-content" and not is_attachment(item)
    )


def answered_prompts(message_jsons: Iterable[str], *, asked: bool = False) -> int:
    """The user prompts among these stored messages that a model response followed: the turns that reached the model
    (a run that failed before any response leaves its prompt unanswered). `asked`: a user prompt before these
    messages is still unanswered (a save that stored it hangs the response that answers it on it)."""
    answered = 0
    for message_json in message_jsons:
        message: dict[str, Any] = json.loads(message_json)
        if message.get("kind") == "response":
            answered, asked = answered + asked, False
        elif _asks(message):
            asked = True
    return answered


def _asks(message: dict[str, Any]) -> bool:
    return any(part.get("part_kind") == "user-prompt" for part in message.get("parts", ()))


def _unanswered(newest_first: Iterable[str]) -> bool:
    """Whether a history (read from its end) ends with a user prompt no response has followed yet."""
    for message_json in newest_first:
        message: dict[str, Any] = json.loads(message_json)
        if message.get("kind") == "response":
            return False
        if _asks(message):
            return True
    return False


def continuation(db: Connection, old_head: str | None, new_head: str | None) -> tuple[list[str], bool]:
    """What a save adds to a stored history, oldest first, and whether a user prompt before it is still unanswered.

    Usually the new messages hang on the stored head. A save may also rewrite what went before (`/compact`'s summary
    and the kept messages' copies; a continued failed run's prompt merged into the next one's request): then the
    messages after the last copy of a stored message are what it adds."""
    newest_first: list[str] = []
    entry = new_head
    while entry is not None and entry != old_head:
        entry, message = db.execute("SELECT parent_id, message FROM entries WHERE id = ?", (entry,)).fetchone()
        newest_first.append(message)
    if entry is None and old_head is not None:  # the stored head is not under the new one: a rewrite
        stored = set(_history_newest_first(db, old_head))
        cut = next((i for i, message in enumerate(newest_first) if message in stored), len(newest_first))
        return newest_first[:cut][::-1], _unanswered(newest_first[cut:])
    return newest_first[::-1], _unanswered(_history_newest_first(db, old_head))


def _history_newest_first(db: Connection, head: str | None) -> Generator[str]:
    """The messages from `head` back to the first, read one at a time (a search from the end mostly reads one)."""
    while head is not None:
        head, message = db.execute("SELECT parent_id, message FROM entries WHERE id = ?", (head,)).fetchone()
        yield message


def index_new(db: Connection, session_id: str, message_jsons: Iterable[str], *, asked: bool = False) -> None:
    """Index the messages a save appends to `session_id`, and count its new answered turns (`asked`: see
    `answered_prompts`); inside its transaction."""
    messages = list(message_jsons)
    rows = [(text, session_id, role) for message in messages for role, text in text_parts(message)]
    db.executemany("INSERT INTO search_text (text, session_id, role) VALUES (?, ?, ?)", rows)
    if turns := answered_prompts(messages, asked=asked):
        db.execute("UPDATE sessions SET turns = turns + ? WHERE id = ?", (turns, session_id))


def index_saved(
    db: Connection,
    session_id: str,
    message_jsons: Sequence[str],
    *,
    forked_from: str | None,
    asked: bool = False,
) -> None:
    """Index what a save appends (a new fork first gets its source's index), inside the save's transaction.

    A damaged index never fails the save: its part is rolled back and the session left not indexed, for `catch_up`
    to redo once `code-puppy sessions repair` has rebuilt the index.
    """
    db.execute("SAVEPOINT indexing")
    try:
        if forked_from is not None:
            copy_index(db, forked_from, session_id)
        index_new(db, session_id, message_jsons, asked=asked)
    except sqlite3.Error:
        db.execute("ROLLBACK TO indexing")
        db.execute("UPDATE sessions SET indexed = 0 WHERE id = ?", (session_id,))
    db.execute("RELEASE indexing")


def copy_index(db: Connection, source_id: str, fork_id: str) -> None:
    """A fork starts with its source's index, turns and `indexed` mark; inside the transaction that writes the fork."""
    db.execute(
        "INSERT INTO search_text (text, session_id, role) SELECT text, ?, role FROM search_text WHERE session_id = ?",
        (fork_id, source_id),
    )
    db.execute(
        """
        UPDATE sessions SET (turns, indexed) = (SELECT turns, indexed FROM sessions WHERE id = :source)
        WHERE id = :fork AND EXISTS (SELECT 1 FROM sessions WHERE id = :source)
        """,
        {"source": source_id, "fork": fork_id},
    )


def catch_up(
    database: Database,
    *,
    wait: bool = True,
    stop: threading.Event | None = None,
    announce: Callable[[int], None] | None = None,
) -> int:
    """Index the sessions not indexed yet, newest first, in short transactions; how many this call indexed.

    Only one process at a time indexes: without `wait`, another's indexing makes this do nothing; with it, this waits
    for the other to finish, then indexes what is left. `announce` hears how many sessions wait, when some do.
    """
    if not (waiting := _not_indexed(database)):
        return 0
    if announce is not None:
        announce(len(waiting))
    with database.exclusive(wait=wait) as alone:
        if not alone:
            return 0
        waiting = _not_indexed(database)  # another process may have indexed some meanwhile
        done = 0
        while waiting and not (stop is not None and stop.is_set()):
            with database.write() as db:
                began = time.perf_counter()
                while waiting and time.perf_counter() - began < BATCH_SECONDS:
                    done += _index_stored(db, waiting.pop())
    return done


def _not_indexed(database: Database) -> list[str]:
    """The sessions not indexed yet, oldest first (`catch_up` pops the newest)."""
    with database.read() as db:
        return [row[0] for row in db.execute("SELECT id FROM sessions WHERE indexed = 0 ORDER BY updated_at")]


def _index_stored(db: Connection, session_id: str) -> int:
    """Index one stored session's whole history, inside a write transaction; 1 if it needed it, else 0."""
    if db.execute("SELECT indexed FROM sessions WHERE id = ?", (session_id,)).fetchone() != (0,):
        return 0
    messages = _stored_history(db, session_id)
    # Rows a save made since the migration are part of the history read here: start from none.
    db.execute("DELETE FROM search_text WHERE session_id = ?", (session_id,))
    db.execute("UPDATE sessions SET turns = 0, indexed = 1 WHERE id = ?", (session_id,))
    index_new(db, session_id, messages)
    return 1


def recount_turns(db: Connection, session_id: str) -> None:
    """Count the answered turns of a history rewound to one of its earlier messages (or to none), inside the save's
    transaction: the turns rewound away are no longer the session's. Their text stays found by search, as the old
    branch stays stored."""
    turns = answered_prompts(_stored_history(db, session_id))
    db.execute("UPDATE sessions SET turns = ? WHERE id = ?", (turns, session_id))


def _stored_history(db: Connection, session_id: str) -> list[str]:
    """The stored messages of a session's current history, oldest first, as JSON."""
    newest_first = db.execute(
        """
        WITH RECURSIVE chain (id, parent_id, message) AS (
            SELECT entries.id, entries.parent_id, entries.message FROM entries
            JOIN conversations ON conversations.head_id = entries.id WHERE conversations.id = ?
            UNION ALL
            SELECT entries.id, entries.parent_id, entries.message
            FROM chain JOIN entries ON entries.id = chain.parent_id
        )
        SELECT message FROM chain
        """,
        (session_id,),
    ).fetchall()
    return [message for (message,) in reversed(newest_first)]


def start_indexer(location: Location) -> threading.Event:
    """Index older sessions in a background thread with its own connection, unless another process is indexing; set
    the event returned to stop it between two batches. A failure (a busy or damaged store) leaves the rest for later."""
    stop = threading.Event()

    def run() -> None:
        try:
            database = Database(location)
        except Exception:  # the run that started it reports an unusable store; the index can wait
            return
        try:
            catch_up(database, wait=False, stop=stop)
        except (sqlite3.Error, OSError):
            pass  # a busy store: what is not indexed yet is indexed by a later start, or before a search
        finally:
            database.close()

    threading.Thread(target=run, name="code-puppy search index").start()
    return stop


@dataclass(frozen=True)
class SearchHit:
    """A session that matched, with its best matching lines (each with `MARK` around the matched terms)."""

    session_id: str
    lines: list[tuple[str, str]]
    """(role, line), best match first."""


def search(
    database: Database, query: str, *, project_dir: Path | None, limit: int = 50, lines_per_session: int = 3
) -> list[SearchHit]:
    """The sessions (of `project_dir`, or every project) whose prompts or answers match every word of `query`
    (`fts_query`), best first; archived ones left out.

    Raises:
        SearchQueryError: FTS5 cannot parse `query`.
    """
    project = None if project_dir is None else str(project_dir.resolve())
    rows = (_search_postgres if database.postgres else _search_sqlite)(database, query, project)
    hits: dict[str, list[tuple[str, str]]] = {}
    for session_id, role, text in rows:
        found = hits.get(session_id)
        if found is None:
            if len(hits) == limit:
                continue
            found = hits[session_id] = []
        if len(found) < lines_per_session:
            found.append((role, _matching_line(text)))
    return [SearchHit(session_id, lines) for session_id, lines in hits.items()]


def _search_sqlite(database: Database, query: str, project: str | None) -> Sequence[tuple[str, str, str]]:
    try:
        with database.read() as db:
            return db.execute(
                """
                SELECT search_text.session_id, search_text.role, highlight(search, 0, :open, :close)
                FROM search JOIN search_text ON search_text.id = search.rowid
                JOIN sessions ON sessions.id = search_text.session_id
                WHERE search MATCH :query AND sessions.archived_at IS NULL
                    AND (:project IS NULL OR sessions.project_dir = :project)
                ORDER BY bm25(search) LIMIT 2000
                """,
                {"query": fts_query(query), "open": MARK[0], "close": MARK[1], "project": project},
            ).fetchall()
    except sqlite3.OperationalError as exc:
        if "fts5" in str(exc) or "no such column" in str(exc) or "unterminated" in str(exc):
            raise SearchQueryError(str(exc)) from None
        raise


def ts_query(query: str) -> tuple[str, list[str]]:
    """`query` for PostgreSQL, read as `fts_query` reads it: an expression of `tsquery`s, one per word or phrase, that
    must all match (`&&`), and its parameters; a word's trailing `*` matches the words its last part begins."""
    terms: list[str] = []
    parameters: list[str] = []
    for match in _QUERY_WORD.finditer(query):
        phrase, word = match.group(1), match.group(2)
        if word is not None and word.endswith("*") and (parts := re.findall(r"\w+", word)):
            terms.append("to_tsquery('simple', ?)")
            parameters.append(" <-> ".join(f"'{part}'" for part in parts) + ":*")
        else:
            terms.append("phraseto_tsquery('simple', ?)")
            parameters.append(phrase if phrase is not None else word or "")
    return " && ".join(terms) or "''::tsquery", parameters


def _search_postgres(database: Database, query: str, project: str | None) -> Sequence[tuple[str, str, str]]:
    expression, parameters = ts_query(query)
    options = f"StartSel={MARK[0]}, StopSel={MARK[1]}, HighlightAll=true"
    with database.read() as db:
        rows = db.execute(
            f"""
            WITH q (query) AS (SELECT {expression})
            SELECT search_text.session_id, search_text.role, ts_headline('simple', search_text.text, q.query, ?)
            FROM q, search_text JOIN sessions ON sessions.id = search_text.session_id
            WHERE search_text.document @@ q.query AND sessions.archived_at IS NULL
                AND (? IS NULL OR sessions.project_dir = ?)
            ORDER BY ts_rank(search_text.document, q.query) DESC, search_text.id LIMIT 2000
            """,
            [*parameters, options, project, project],
        ).fetchall()
    # PostgreSQL marks the parts of a compound word (`[code]-[puppy]`): one mark around it, as FTS5 gives.
    return [(session_id, role, _JOINED_MARKS.sub(r"\1", text)) for session_id, role, text in rows]


_JOINED_MARKS = re.compile(f"{MARK[1]}([^\\s\\w]*){MARK[0]}")


def _matching_line(text: str, width: int = 160) -> str:
    """The first line of `text` with a marked term, cut to about `width` characters around the first one."""
    line = next((line for line in text.splitlines() if MARK[0] in line), text.splitlines()[0] if text else "")
    start = line.find(MARK[0])
    if len(line) <= width or start < width // 3:
        return line[:width] + ("…" if len(line) > width else "")
    begin = start - width // 3
    return "…" + line[begin : begin + width] + ("…" if begin + width < len(line) else "")
