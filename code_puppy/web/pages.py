"""The dashboard's pages as HTML, made on the server, every stored string escaped; `static/app.js` adds the rest."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape

from code_puppy.core.session_text import age, short_cost, short_path
from code_puppy.options import PERMISSION_MODES
from code_puppy.sessions.catalog import SessionInfo
from code_puppy.sessions.checkpoints import Checkpoint
from code_puppy.sessions.costs import CostTotals, format_cost
from code_puppy.sessions.search import MARK

CANCEL = '<button type="button" id="cancel-button">Cancel</button>'
QUEUE_AND_CANCEL = '<button type="button" id="queue-button">Queue</button>' + CANCEL
RUNS = (
    '<section id="durable-runs" hidden><h2>Runs</h2><p class="error" role="alert" hidden></p>'
    '<table class="runs"><thead><tr><th>Run</th><th>Status</th><th>Prompt</th><th>Worker</th><th>Branch</th>'
    "<th>Cost</th><th>Age</th><th>Session</th><th></th></tr></thead><tbody></tbody></table>"
    '<div id="workers" hidden><h3>Workers</h3><table class="workers"><thead><tr><th>Worker</th><th>Host</th>'
    "<th>Pid</th><th>Concurrency</th><th>Runs in hand</th><th>Last beat</th></tr></thead><tbody></tbody></table>"
    "</div></section>"
)
"""The durable and fleet runs and the fleet's workers, filled in by `static/app.js` from `/api/durable/events`."""


def layout(title: str, body: str, *, page: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)} · code-puppy</title>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="stylesheet" href="/static/style.css"></head>'
        f'<body data-page="{page}"><header><a href="/" class="brand">code-puppy</a></header>'
        f'<main>{body}</main><script src="/static/app.js"></script></body></html>'
    )


def error_page(message: str) -> str:
    return layout(
        "error", f'<p class="error" role="alert">{escape(message)}</p><p><a href="/">All sessions</a></p>', page="error"
    )


def prompt_form(*, label: str, model: str, mode: str, session_id: str | None) -> str:
    """The prompt box: a new session of the server's project, or the next turn of a session."""
    modes = "".join(
        f'<option value="{name}"{" selected" if name == mode else ""}>{name}</option>' for name in PERMISSION_MODES
    )
    target = f' data-session="{escape(session_id)}"' if session_id else ""
    return (
        f'<form id="prompt-form" class="prompt"{target}>'
        f'<textarea name="prompt" aria-label="{escape(label)}" placeholder="{escape(label)}" rows="3"></textarea>'
        f'<div class="row"><label>model <input name="model" value="{escape(model)}" size="24"></label>'
        f'<label>permission mode <select name="mode">{modes}</select></label>'
        '<button type="submit">Run</button></div><p class="form-error" role="alert"></p></form>'
    )


def sessions_page(
    infos: Sequence[SessionInfo],
    costs: dict[str, CostTotals],
    live: set[str],
    *,
    project: str,
    model: str,
    mode: str,
    query: str = "",
    matches: dict[str, list[tuple[str, str]]] | None = None,
    problem: str | None = None,
) -> str:
    now = datetime.now(UTC)
    rows = "".join(
        _session_row(info, costs.get(info.id), now, info.id in live, (matches or {}).get(info.id)) for info in infos
    )
    if not infos:
        rows = f'<tr><td colspan="6" class="empty">{"no session matches" if query else "no sessions yet"}</td></tr>'
    body = (
        f'<h1>Sessions</h1><p class="where">new runs start in <code>{escape(project)}</code></p>'
        + prompt_form(label="Prompt for a new session", model=model, mode=mode, session_id=None)
        + '<section id="live-runs" hidden><h2>Live runs</h2><ul></ul></section>'
        + RUNS
        + '<form class="search" method="get" action="/" role="search">'
        f'<input type="search" name="q" value="{escape(query)}" placeholder="Search sessions" '
        'aria-label="Search sessions">'
        '<button type="submit">Search</button></form>'
        + (f'<p class="error" role="alert">{escape(problem)}</p>' if problem else "")
        + '<table class="sessions"><thead><tr><th>Session</th><th>Project</th><th>Age</th><th>Turns</th><th>Cost</th>'
        f"<th></th></tr></thead><tbody>{rows}</tbody></table>"
    )
    return layout("Sessions", body, page="sessions")


def _session_row(
    info: SessionInfo, cost: CostTotals | None, now: datetime, live: bool, lines: list[tuple[str, str]] | None
) -> str:
    label = f"{info.name} · {info.title}" if info.name and info.title else info.label
    turns = "failed" if info.failed else str(info.turns) if info.indexed else "-"
    found = "".join(
        f'<div class="match">{"›" if role == "user" else "‹"} {_marked(line)}</div>' for role, line in lines or []
    )
    badge = '<span class="badge live">live</span>' if live else ""
    return (
        f'<tr data-session="{escape(info.id)}"><td><a href="/s/{escape(info.id)}">{escape(label or info.id[:8])}</a>'
        f'{found}</td><td title="{escape(info.project_dir)}">{escape(short_path(info.project_dir))}</td>'
        f"<td>{age(info.updated_at, now)}</td><td>{turns}</td><td>{escape(short_cost(cost))}</td>"
        f'<td class="badges">{badge}</td></tr>'
    )


def _marked(line: str) -> str:
    """A search hit's line with its matches in <mark>, everything else escaped."""
    out: list[str] = []
    rest = line
    while MARK[0] in rest and MARK[1] in rest:
        before, _, tail = rest.partition(MARK[0])
        inside, _, rest = tail.partition(MARK[1])
        out += [escape(before), f"<mark>{escape(inside)}</mark>"]
    return "".join([*out, escape(rest)])


def session_page(
    info: SessionInfo | None,
    session_id: str,
    transcript: str,
    *,
    start: int,
    total: int,
    costs: Sequence[tuple[str, str, CostTotals]],
    checkpoints: Sequence[Checkpoint],
    live: str | None,
    notes: Sequence[str],
    model: str,
    mode: str,
) -> str:
    """A session: its transcript page, costs, checkpoints, and the live run's controls (`live`: `here` for a run of
    this server, `terminal` for one of another process, None)."""
    title = (info.name or info.title or session_id[:8]) if info is not None else session_id[:8]
    older = (
        f'<p class="older"><a href="/s/{escape(session_id)}?before={start}">Older messages ({start} more)</a></p>'
        if start > 0
        else ""
    )
    project = info.project_dir if info is not None else ""
    body = (
        f'<h1>{escape(title)}</h1><p class="where"><code>{escape(session_id)}</code> · '
        f"<code>{escape(project)}</code> · {total} messages</p>"
        + "".join(f'<p class="note" role="note">{escape(note)}</p>' for note in notes)
        + f'<div class="layout"><section class="transcript" aria-label="Transcript">{older}{transcript}'
        f'<div id="live-output" data-session="{escape(session_id)}" data-live="{live or ""}"></div></section>'
        f"<aside>{_controls(session_id, live, model, mode)}{_costs(costs)}{_checkpoints(checkpoints)}</aside></div>"
    )
    return layout(title, body, page="session")


def _controls(session_id: str, live: str | None, model: str, mode: str) -> str:
    steer = (
        '<section id="run-controls" class="controls"><h2>Running <span class="badge live">live</span></h2>'
        '<form id="steer-form"><textarea name="text" aria-label="Steer" placeholder="Steer" rows="2"></textarea>'
        '<div class="row"><button type="submit" name="send">Send</button>'
        + (QUEUE_AND_CANCEL if live != "terminal" else CANCEL)
        + "</div></form>"
        + (
            '<p class="hint">This run belongs to a terminal: Steer and Cancel reach it as '
            "<code>code-puppy steer</code> and <code>code-puppy steer --cancel</code> do.</p>"
            if live == "terminal"
            else ""
        )
        + '<p class="form-error" role="alert"></p></section>'
    )
    hidden = "" if live else " hidden"
    prompt = prompt_form(label="Continue this session", model=model, mode=mode, session_id=session_id)
    return steer.replace('class="controls"', f'class="controls"{hidden}') + (
        f'<section id="continue" class="controls"{" hidden" if live else ""}><h2>Continue</h2>{prompt}</section>'
    )


def _costs(costs: Sequence[tuple[str, str, CostTotals]]) -> str:
    if not costs:
        return '<section><h2>Cost</h2><p class="empty">no model requests recorded</p></section>'
    rows = "".join(
        f"<tr><td>{escape(kind)}</td><td>{escape(model)}</td><td>{totals.requests}</td>"
        f"<td>{totals.input_tokens:,} / {totals.output_tokens:,}</td>"
        f"<td>{escape(format_cost(totals.cost_usd, complete=totals.complete))}</td></tr>"
        for kind, model, totals in costs
    )
    return (
        '<section><h2>Cost</h2><table class="costs"><thead><tr><th>Kind</th><th>Model</th>'
        '<th title="model requests">Req.</th>'
        f"<th>Tokens in / out</th><th>Cost</th></tr></thead><tbody>{rows}</tbody></table></section>"
    )


def _checkpoints(checkpoints: Sequence[Checkpoint]) -> str:
    """Newest first; each live one with a button that rewinds back to before it (all newer ones too)."""
    if not checkpoints:
        return '<section><h2>Checkpoints</h2><p class="empty">no checkpoints</p></section>'
    items: list[str] = []
    live = 0
    for checkpoint in checkpoints:
        what = f"“{' '.join(checkpoint.prompt.split())[:60]}”" if checkpoint.kind == "turn" else "(a rewind)"
        files = ", ".join(sorted(checkpoint.changes)[:4]) + (", …" if len(checkpoint.changes) > 4 else "")
        when = checkpoint.created_at.astimezone().strftime("%Y-%m-%d %H:%M")
        if checkpoint.rewound_at is None:
            live += 1
            button = f'<button type="button" class="rewind" data-turns="{live}">Rewind</button>'
        else:
            button = '<span class="badge">rewound</span>'
        items.append(
            f"<li><div>#{checkpoint.id} {when} {escape(what)}</div>"
            + f'<div class="files">{escape(files)}</div>{button}</li>'
        )
    return (
        f'<section id="checkpoints"><h2>Checkpoints</h2><ul class="checkpoints">{"".join(items)}</ul>'
        '<p class="form-error" role="alert"></p></section>'
    )
