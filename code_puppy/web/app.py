"""The dashboard's routes: the pages, the live streams (server-sent events) and the actions (run, steer, queue,
cancel, answer an approval, rewind). Every failure is one clear line, in the page or as `{"error": ...}`, never a
traceback; the store is read through the sessions package alone."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from code_puppy.errors import ConfigError, one_line
from code_puppy.options import PERMISSION_MODES
from code_puppy.sessions.runs import RunRegistry
from code_puppy.sessions.store import SqliteConversationStore
from code_puppy.web import pages
from code_puppy.web.durable_runs import RunsFailure, RunsView
from code_puppy.web.guard import TokenGuard
from code_puppy.web.live import Busy, LiveRuns
from code_puppy.web.transcript import page_bounds, render

STATIC = Path(__file__).parent / "static"
LIVE_POLL = 0.5
"""Seconds between two looks at the running-runs registry for the live list."""


class Failure(Exception):
    """A request that cannot be served, with its status and one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Dashboard:
    """What the routes share: the store, the runs of this server, the default model and mode."""

    def __init__(self, store: SqliteConversationStore, runs: LiveRuns, *, model: str, mode: str) -> None:
        self.store = store
        self.runs = runs
        self.registry = RunRegistry(store.database)
        self.model = model
        self.mode = mode
        self.stopping: Callable[[], bool] = lambda: False
        """Whether the server is shutting down: the event streams end then, so that it need not cut them off."""

    def live(self) -> dict[str, dict[str, Any]]:
        """Every live run: this server's and those registered by other processes (chats, headless runs)."""
        found: dict[str, dict[str, Any]] = {
            run.session_id: {"session_id": run.session_id, "project": run.project_dir, "pid": run.pid, "here": False}
            for run in self.registry.running()
        }
        for session_id in self.runs.running():
            project = str(self.runs.conversations[session_id].project.root)
            found[session_id] = {"session_id": session_id, "project": project, "pid": None, "here": True}
        return found

    async def sessions(self, request: Request) -> Response:
        query = request.query_params.get("q", "").strip()
        infos = self.store.sessions.recent(None, failed=False)
        matches: dict[str, list[tuple[str, str]]] | None = None
        problem = None
        if query:
            from code_puppy.sessions.search import SearchQueryError, catch_up, search

            try:
                catch_up(self.store.database)
                hits = search(self.store.database, query, project_dir=None)
            except SearchQueryError as exc:
                hits, problem = [], f"search query {query!r}: {exc}"
            matches = {hit.session_id: hit.lines for hit in hits}
            by_id = {info.id: info for info in self.store.sessions.recent(None)}
            infos = [by_id[hit.session_id] for hit in hits if hit.session_id in by_id]
        costs = self.store.costs.session_totals(info.id for info in infos)
        page = pages.sessions_page(
            infos,
            costs,
            set(self.live()),
            project=str(self.runs.options.project_root),
            model=self.model,
            mode=self.mode,
            query=query,
            matches=matches,
            problem=problem,
        )
        return HTMLResponse(page)

    async def session(self, request: Request) -> Response:
        from code_puppy.sessions.checkpoints import CheckpointLog
        from code_puppy.sessions.session import find_session

        session_id = request.path_params["session_id"]
        conversation = self.runs.conversations.get(session_id)
        info = None
        try:
            info = find_session(self.store, session_id)
        except ConfigError as exc:  # unknown, unless a run started it and has not saved it yet
            if conversation is None and session_id not in self.live():
                raise Failure(404, str(exc)) from None
        if info is not None and info.id != session_id:  # a prefix or a name: the page of the whole id
            return Response(status_code=303, headers={"location": f"/s/{info.id}"})
        try:
            before = int(request.query_params["before"]) if "before" in request.query_params else None
        except ValueError:
            raise Failure(400, "before= takes a message number") from None
        # Only the page's messages and those after it are read: the history is walked from its head.
        record = await self.store.read_record(session_id)
        total = info.message_count if info is not None and record is not None else 0
        start, end = page_bounds(total, before)
        entries = await self.store.read_history(record.head_id, limit=total - start) if record is not None else []
        messages = [entry.message for entry in entries]
        live = self.live().get(session_id)
        page = pages.session_page(
            info,
            session_id,
            render(messages, 0, end - start),
            start=start,
            total=total,
            costs=self.store.costs.breakdown(session_id),
            checkpoints=list(reversed(CheckpointLog(self.store.database).of_session(session_id))),
            live=None if live is None else "here" if live["here"] else "terminal",
            notes=conversation.notes if conversation is not None else [],
            model=conversation.model_name if conversation is not None else self.model,
            mode=conversation.project.policy.mode if conversation is not None else self.mode,
        )
        return HTMLResponse(page)

    async def live_stream(self, request: Request) -> Response:
        async def stream() -> AsyncGenerator[str]:
            last = None
            while not self.stopping():
                runs = sorted(self.live().values(), key=lambda run: run["session_id"])
                if runs != last:
                    last = runs
                    yield f"data: {json.dumps(runs)}\n\n"
                await asyncio.sleep(LIVE_POLL)

        return _events(stream())

    async def run_events(self, request: Request) -> Response:
        """A session's live run: the events of its turn so far, then each new one, until the page goes away."""
        conversation = self.runs.conversations.get(request.path_params["session_id"])
        if conversation is None:
            raise Failure(404, "no run of this session in this server")
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for event in conversation.events:
            queue.put_nowait(event)
        conversation.listeners.add(queue)

        async def stream() -> AsyncGenerator[str]:
            try:
                while not self.stopping():
                    try:
                        event = await asyncio.wait_for(queue.get(), LIVE_POLL)
                    except TimeoutError:
                        continue
                    yield f"data: {json.dumps(event)}\n\n"
            finally:  # the page went away: the run goes on without it
                conversation.listeners.discard(queue)

        return _events(stream())

    async def progress(self, request: Request) -> Response:
        """A run of another process (a terminal's chat or `-p`): the steps its journal holds so far, as HTML, each
        time they change, then `{"ended": true}` when it no longer runs."""
        from code_puppy.sessions.journal import Journal

        session_id = request.path_params["session_id"]
        journal = Journal(self.store.database)

        async def stream() -> AsyncGenerator[str]:
            shown = None
            while not self.stopping():
                if session_id not in self.live():
                    yield f"data: {json.dumps({'ended': True})}\n\n"
                    return
                turns = [turn for turn in journal.read(session_id) if not turn.snapshot and not turn.orphaned]
                messages = turns[-1].messages if turns else []
                html = render(messages, 0, len(messages))
                if html != shown:
                    shown = html
                    yield f"data: {json.dumps({'html': html})}\n\n"
                await asyncio.sleep(LIVE_POLL)

        return _events(stream())

    def _full_id(self, reference: str) -> str:
        """The id of the session `reference` names (its id, name or a unique prefix, as `find_session` takes them), so
        that every check on a running turn sees the one id; `reference` itself when it names none (a run started here
        and not saved yet, or an unknown one, which the action then refuses)."""
        from code_puppy.sessions.session import find_session

        if reference in self.runs.conversations:
            return reference
        try:
            return find_session(self.store, reference).id
        except ConfigError:
            return reference

    async def start_run(self, request: Request) -> Response:
        body = await _json(request)
        session_id = request.path_params.get("session_id")
        prompt = _text(body, "prompt")
        model = body.get("model") or None
        mode = body.get("mode") or None
        if model is not None and not isinstance(model, str):
            raise Failure(400, "model: expected a model name")
        if mode is not None and mode not in PERMISSION_MODES:
            raise Failure(400, f"mode: one of {', '.join(PERMISSION_MODES)}")
        if session_id is not None:
            session_id = self._full_id(session_id)
        if session_id is not None and session_id not in self.runs.conversations:
            elsewhere = self.live().get(session_id)
            if elsewhere is not None:
                raise Failure(409, f"session {session_id[:8]} is running in process {elsewhere['pid']}: steer it")
        try:
            conversation = await self.runs.start(session_id, prompt, model=model, mode=mode)
        except Busy as exc:
            raise Failure(409, str(exc)) from None
        except ConfigError as exc:
            raise Failure(400, str(exc)) from None
        return JSONResponse({"session_id": conversation.session.id})

    async def steer(self, request: Request) -> Response:
        """Text into the running turn: this server's own through its inbox, another process's as `code-puppy steer`
        sends it (the running-runs registry), waiting until that process took it."""
        session_id = request.path_params["session_id"]
        text = _text(await _json(request), "text")
        conversation = self.runs.conversations.get(session_id)
        if conversation is not None and conversation.running is not None:
            if conversation.inbox.steer(text) == "closed":
                raise Failure(409, "the turn is ending; nothing was sent")
            return JSONResponse({"steered": True})
        from code_puppy.sessions.runs import steer

        ok, line = await asyncio.to_thread(
            steer, self.registry, text, project_dir=Path.cwd(), session_prefix=session_id
        )
        if not ok:
            raise Failure(409, line)
        return JSONResponse({"steered": True, "message": line})

    async def queue(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        text = _text(await _json(request), "text")
        conversation = self.runs.conversations.get(session_id)
        if conversation is None or conversation.running is None:
            raise Failure(409, "no turn of this session runs in this server; send a prompt instead")
        conversation.queued.append(text)
        conversation.publish({"type": "queued", "text": text})
        return JSONResponse({"queued": True})

    async def cancel(self, request: Request) -> Response:
        """Cancel the running turn, as Ctrl-C (finished work kept): this server's own here, another process's as
        `code-puppy steer --cancel` does (the running-runs registry), waiting until that process took it."""
        session_id = request.path_params["session_id"]
        if self.runs.cancel(session_id):
            return JSONResponse({"cancelled": True})
        if session_id not in self.live():
            raise Failure(409, "nothing cancelled: no turn of this session runs")
        from code_puppy.sessions.runs import cancel

        ok, line = await asyncio.to_thread(cancel, self.registry, project_dir=Path.cwd(), session_prefix=session_id)
        if not ok:
            raise Failure(409, line)
        return JSONResponse({"cancelled": True, "message": line})

    async def answer(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        verdict = (await _json(request)).get("verdict")
        if verdict not in ("yes", "always", "no"):
            raise Failure(400, "verdict: one of yes, always, no")
        conversation = self.runs.conversations.get(session_id)
        if conversation is None:
            raise Failure(404, "no run of this session in this server")
        if (refused := conversation.answer(request.path_params["question_id"], verdict)) is not None:
            raise Failure(409, refused)
        return JSONResponse({"answered": verdict})

    async def rewind(self, request: Request) -> Response:
        """`code-puppy rewind --turns N` of the session: files the user changed since are not overwritten (409 with
        them named) unless `force`."""
        from code_puppy.checkpoints.rewind import Rewinder, describe_rewind, open_shadow
        from code_puppy.checkpoints.shadow import CheckpointError
        from code_puppy.config import load_settings
        from code_puppy.sessions.session import Session, find_session

        session_id = request.path_params["session_id"]
        body = await _json(request)
        turns, force = body.get("turns", 1), body.get("force", False)
        if not isinstance(turns, int) or isinstance(turns, bool) or turns < 1 or not isinstance(force, bool):
            raise Failure(400, "expected {'turns': N (1 or more), 'force': true|false}")
        session_id = self._full_id(session_id)
        if session_id in self.live():
            raise Failure(409, "the session is running a turn; rewind it when the turn ends")
        try:
            info = find_session(self.store, session_id)
            root = Path(info.project_dir)
            shadow, _ = open_shadow(root, max_file_mb=load_settings(root).checkpoints.max_file_mb)
            session = await Session.resume(self.store, info, model=None)
            result = await Rewinder(self.store, root, shadow).rewind(session, turns=turns, force=force)
        except (ConfigError, CheckpointError) as exc:
            raise Failure(400, str(exc)) from None
        if result.conflicts and not force:
            raise Failure(
                409,
                f"rewind refused, nothing was changed: you changed {', '.join(result.conflicts)} since the agent did",
            )
        if result.nothing:
            raise Failure(409, "nothing to rewind: no checkpoint left and no turn in its history")
        return JSONResponse({"rewound": describe_rewind(result)})


def _events(stream: AsyncGenerator[str]) -> StreamingResponse:
    return StreamingResponse(stream, media_type="text/event-stream", headers={"cache-control": "no-store"})


async def _json(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError) as exc:
        raise Failure(400, f"malformed JSON: {exc}") from None
    if not isinstance(body, dict):
        raise Failure(400, "expected a JSON object")
    return cast(dict[str, Any], body)


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value.strip():
        raise Failure(400, f"{key}: expected some text")
    return value


class OneLineErrors:
    """Any failure of a request as one line (HTML for a page, JSON for the API), never a traceback: on the page or in
    the terminal."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def sending(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            if isinstance(exc, (Failure, RunsFailure)):
                status, message = exc.status, str(exc)
            elif isinstance(exc, ConfigError):
                status, message = 500, str(exc)
            else:
                status, message = 500, f"internal error: {one_line(exc, typed=True)}"
                print(f"code-puppy web: {message}", file=sys.stderr, flush=True)
            if started or scope["type"] != "http":
                return
            response: Response
            if scope["path"].startswith("/api/"):
                response = JSONResponse({"error": message}, status_code=status)
            else:
                response = HTMLResponse(pages.error_page(message), status_code=status)
            await response(scope, receive, send)


def build_app(dashboard: Dashboard, *, token: str, on_shutdown: Callable[[], Awaitable[None]]) -> Starlette:
    d = dashboard
    durable = RunsView(d.store.database, lambda: d.stopping())
    routes = [
        Route("/", d.sessions),
        Route("/s/{session_id}", d.session),
        Route("/api/live", d.live_stream),
        Route("/api/runs", d.start_run, methods=["POST"]),
        Route("/api/sessions/{session_id}/events", d.run_events),
        Route("/api/sessions/{session_id}/progress", d.progress),
        Route("/api/sessions/{session_id}/prompt", d.start_run, methods=["POST"]),
        Route("/api/sessions/{session_id}/steer", d.steer, methods=["POST"]),
        Route("/api/sessions/{session_id}/queue", d.queue, methods=["POST"]),
        Route("/api/sessions/{session_id}/cancel", d.cancel, methods=["POST"]),
        Route("/api/sessions/{session_id}/approvals/{question_id}", d.answer, methods=["POST"]),
        Route("/api/sessions/{session_id}/rewind", d.rewind, methods=["POST"]),
        Route("/api/durable", durable.listed),
        Route("/api/durable/events", durable.stream),
        Route("/api/durable/{run_id}/cancel", durable.cancel, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC)),
    ]
    middleware = [Middleware(TokenGuard, token=token), Middleware(OneLineErrors)]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncGenerator[None]:
        yield
        await on_shutdown()

    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
