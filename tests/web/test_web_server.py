"""`code-puppy web` without a browser: its one line, the token (query string once, then the cookie, or the header),
the Origin check, the refusals, and one clear line for each bad input; the durable and fleet runs listed and a queued
one cancelled; through the installed console script."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import CODE_PUPPY, run_cli, wait_for
from tests.fake_llm import FakeLLMServer, call, hang, text, tool_calls
from tests.test_startup import imported_modules
from tests.web.conftest import WebServer


def test_it_prints_one_line_with_a_real_port_and_answers_only_with_the_token(web: WebServer) -> None:
    assert web.line == f"code-puppy web: http://127.0.0.1:{web.port}/?token={web.token}\n"
    with httpx.Client(base_url=web.base) as client:
        for path in ("/", "/s/abc", "/api/live", "/static/app.js"):
            refused = client.get(path)
            assert (refused.status_code, refused.text) == (
                401,
                "code-puppy web: unauthorized: open the address `code-puppy web` printed\n",
            )
        assert client.get("/", params={"token": "wrong-token"}).status_code == 401
        assert client.get("/", headers={"authorization": "Bearer wrong-token"}).status_code == 401
        assert client.post("/api/runs", json={"prompt": "hi"}).status_code == 401
        entered = client.get("/", params={"token": web.token, "q": "x"})
        assert entered.status_code == 303
        assert entered.headers["location"] == "/?q=x"  # the token leaves the address
        cookie = entered.headers["set-cookie"]
        assert cookie == f"code_puppy_token={web.token}; HttpOnly; SameSite=Strict; Path=/"
        page = client.get("/")  # the cookie, from now on
        assert page.status_code == 200 and "<h1>Sessions</h1>" in page.text
        assert (
            page.headers["content-security-policy"] == "default-src 'self'; frame-ancestors 'none'; form-action 'self'"
        )
        assert client.get("/static/app.js").status_code == 200
    bearer = httpx.get(f"{web.base}/", headers={"authorization": f"Bearer {web.token}"})
    assert bearer.status_code == 200


def test_a_change_from_another_origin_is_refused(web: WebServer) -> None:
    with httpx.Client(base_url=web.base, cookies={"code_puppy_token": web.token}) as client:
        for headers in ({"origin": "http://evil.example"}, {}):
            refused = client.post("/api/runs", content=b"{}", headers=headers)
            assert (refused.status_code, refused.text) == (
                403,
                "code-puppy web: refused: this request did not come from the dashboard's page\n",
            )
        own = client.post("/api/runs", content=b"{not json", headers={"origin": web.base})
    assert own.status_code == 400
    assert own.json() == {
        "error": "malformed JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    }


def test_bad_requests_get_one_line_each(web: WebServer) -> None:
    auth = {"authorization": f"Bearer {web.token}"}
    with httpx.Client(base_url=web.base, headers=auth) as client:
        unknown = client.get("/s/no-such-session")
        assert unknown.status_code == 404
        assert (
            "no session matches &#x27;no-such-session&#x27; (code-puppy sessions list --all shows them)" in unknown.text
        )
        assert "Traceback" not in unknown.text
        assert client.post("/api/runs", json=["a list"]).json() == {"error": "expected a JSON object"}
        assert client.post("/api/runs", json={"prompt": " "}).json() == {"error": "prompt: expected some text"}
        assert client.post("/api/sessions/nope/cancel", json={}).json() == {
            "error": "nothing cancelled: no turn of this session runs"
        }
        assert client.post("/api/sessions/nope/steer", json={"text": "hi"}).json() == {
            "error": "no running code-puppy run of session nope; nothing was sent"
        }
        assert client.get("/s/x", params={"before": "many"}).status_code in (400, 404)
    stderr = web.stop()
    assert "Traceback" not in stderr


def test_a_host_others_can_reach_needs_an_explicit_token(project: Path) -> None:
    refused = run_cli("web", "--no-open", "--host", "0.0.0.0", cwd=project)
    assert (refused.returncode, refused.stdout, refused.stderr) == (
        2,
        "",
        "code-puppy: error: --host 0.0.0.0 is reachable from other machines: set --token TOKEN explicitly\n",
    )


def test_a_store_it_cannot_read_is_one_line(project: Path, code_puppy_home: Path) -> None:
    (code_puppy_home / "sessions.db").write_bytes(b"this is not a database" * 100)
    completed = run_cli("web", "--no-open", cwd=project)
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr.count("\n") == 1 and completed.stderr.startswith("code-puppy: error: ")
    assert "sessions.db" in completed.stderr


def test_only_the_web_command_imports_the_server_libraries(project: Path, code_puppy_home: Path) -> None:
    for args in (("--help",), ("sessions", "list")):
        modules = imported_modules(*args, cwd=project)
        assert sorted(m for m in modules if m.split(".")[0] in ("starlette", "uvicorn")) == []
    (code_puppy_home / "sessions.db").write_bytes(b"not a database" * 100)  # so that `web` stops after its imports
    completed = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "code_puppy", "web", "--no-open"],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 2
    modules = {line.split("|")[-1].strip() for line in completed.stderr.splitlines() if line.startswith("import time:")}
    assert {"starlette", "uvicorn"} <= modules


def test_the_session_list_shows_a_stored_session(server: FakeLLMServer, project: Path, web: WebServer) -> None:
    server.script(text("The needle is in the haystack."))
    done = run_cli("-p", "where is the needle?", "--output-format", "json", cwd=project)
    session_id = json.loads(done.stdout)["session_id"]
    auth = {"authorization": f"Bearer {web.token}"}
    listing = httpx.get(f"{web.base}/", headers=auth).text
    assert f'href="/s/{session_id}"' in listing and "where is the needle?" in listing
    found = httpx.get(f"{web.base}/", params={"q": "needle"}, headers=auth).text
    assert "<mark>needle</mark>" in found
    page = httpx.get(f"{web.base}/s/{session_id}", headers=auth).text
    assert "<p>The needle is in the haystack.</p>" in page


def user_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def api(web: WebServer) -> httpx.Client:
    return httpx.Client(base_url=web.base, headers={"authorization": f"Bearer {web.token}"}, timeout=30)


def page_text(client: httpx.Client, session_id: str) -> str:
    return client.get(f"/s/{session_id}").text


def test_a_long_session_opens_a_page_at_a_time(code_puppy_home: Path, project: Path, web: WebServer) -> None:
    import asyncio

    from code_puppy.sessions.session import Session
    from code_puppy.sessions.store import SqliteConversationStore
    from tests.sessions_data import exchange

    async def seed() -> str:
        with SqliteConversationStore(code_puppy_home / "sessions.db") as store:
            session = await Session.start(store, project, model="fake")
            await session.set_message_history([m for i in range(113) for m in exchange(i)])  # 452 messages
            return session.id

    # In a thread of its own: in a worker that drives the browser, Playwright's loop runs in this one.
    with ThreadPoolExecutor(1) as thread:
        session_id = thread.submit(asyncio.run, seed()).result()
    with api(web) as client:
        newest = page_text(client, session_id)
        assert f'<a href="/s/{session_id}?before=252">Older messages (252 more)</a>' in newest
        assert "please fix bug 112 " in newest and "please fix bug 62 " not in newest
        older = client.get(f"/s/{session_id}", params={"before": 252}).text
        assert f'<a href="/s/{session_id}?before=52">Older messages (52 more)</a>' in older
        assert "please fix bug 62 " in older and "please fix bug 112 " not in older
        oldest = client.get(f"/s/{session_id}", params={"before": 52}).text
        assert "Older messages" not in oldest and "please fix bug 0 " in oldest


def test_a_run_goes_on_when_its_page_goes_away_and_runs_what_was_queued(
    server: FakeLLMServer, project: Path, web: WebServer
) -> None:
    server.script(text("First answer.", delay=1.5), text("Queued answer."))
    with api(web) as client:
        session_id = client.post("/api/runs", json={"prompt": "start"}).json()["session_id"]
        with client.stream("GET", f"/api/sessions/{session_id}/events") as events:
            first = next(events.iter_lines())
        assert json.loads(first.removeprefix("data: ")) == {"type": "prompt", "text": "start"}
        assert client.post(f"/api/sessions/{session_id}/queue", json={"text": "and then this"}).json() == {
            "queued": True
        }
        wait_for(lambda: "Queued answer." in page_text(client, session_id), timeout=30, what="the queued turn")
        assert [user_messages(request.body)[-1] for request in server.requests] == ["start", "and then this"]
        assert "First answer." in page_text(client, session_id)
        assert client.post(f"/api/sessions/{session_id}/queue", json={"text": "late"}).json() == {
            "error": "no turn of this session runs in this server; send a prompt instead"
        }


def test_an_untrusted_project_runs_as_in_the_cli_with_its_note_on_the_page(
    server: FakeLLMServer, project: Path, web: WebServer
) -> None:
    (project / ".code-puppy").mkdir()
    (project / ".code-puppy" / "config.toml").write_text('[permissions]\nmode = "yolo"\n')
    server.script(tool_calls(call("write_file", {"path": "x.txt", "content": "x"})), text("Could not write."))
    with api(web) as client:
        session_id = client.post("/api/runs", json={"prompt": "write x.txt", "mode": "accept-edits"}).json()[
            "session_id"
        ]
        note = (
            "note: this project is not trusted, so code-puppy ignores its [permissions] "
            "(run `code-puppy trust` in the project to trust it)"
        )
        assert f'<p class="note" role="note">{note}</p>' in page_text(client, session_id)
        wait_for(lambda: "Could not write." in page_text(client, session_id), timeout=30, what="the run's end")
    assert (project / "x.txt").read_text() == "x"  # accept-edits, chosen on the page, applies; yolo never did


def test_sigterm_saves_the_running_turn_and_ends_quietly(server: FakeLLMServer, project: Path, web: WebServer) -> None:
    server.script(hang())
    with api(web) as client:
        session_id = client.post("/api/runs", json={"prompt": "hang on"}).json()["session_id"]
        wait_for(lambda: server.requests, what="the model request")
        with client.stream("GET", "/api/live") as live:  # a page still watching
            next(live.iter_lines())
            web.process.send_signal(signal.SIGTERM)
            _, stderr = web.process.communicate(timeout=30)
    assert (web.process.returncode, stderr) == (-signal.SIGTERM, "")
    exported = run_cli("sessions", "export", session_id, cwd=project)
    assert exported.returncode == 0 and "hang on" in exported.stdout


def test_allow_always_answers_the_next_question_of_its_kind(
    server: FakeLLMServer, project: Path, web: WebServer
) -> None:
    server.script(
        tool_calls(call("write_file", {"path": "one.txt", "content": "1"})),
        tool_calls(call("write_file", {"path": "two.txt", "content": "2"})),
        text("Both written."),
    )
    with api(web) as client:
        session_id = client.post("/api/runs", json={"prompt": "write both", "mode": "ask"}).json()["session_id"]
        kinds: list[str] = []
        with client.stream("GET", f"/api/sessions/{session_id}/events") as events:
            for line in events.iter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line.removeprefix("data: "))
                kinds.append(event["type"])
                if event["type"] == "approval":
                    assert event["title"] == "write_file wants to write file one.txt"
                    answer = client.post(
                        f"/api/sessions/{session_id}/approvals/{event['id']}", json={"verdict": "always"}
                    )
                    assert answer.json() == {"answered": "always"}
                if event["type"] == "end":
                    assert (event["status"], event["message"]) == ("success", None)
                    break
    assert kinds.count("approval") == 1
    assert (project / "one.txt").read_text() == "1" and (project / "two.txt").read_text() == "2"


def git_repository(root: Path) -> Path:
    """A git repository with one commit: a project `code-puppy queue add` takes."""
    root.mkdir()
    (root / "README.md").write_text("# demo\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "start"],
        cwd=root,
        check=True,
        capture_output=True,
    )
    return root


def test_a_queued_run_is_listed_with_its_worker_and_cancelled_from_the_page(
    backend: str, server: FakeLLMServer, project: Path, web: WebServer, tmp_path: Path
) -> None:
    """On either store: DBOS's tables and the workers' heartbeat in the SQLite file or in the PostgreSQL database."""
    from code_puppy.durable.system import system_database_url
    from code_puppy.fleet.heartbeat import Heartbeats, WorkerBeat

    repository = git_repository(tmp_path / "repository")
    prompt = "rename   the\nhelpers " + "x" * 90  # squeezed to one line, cut at 80 characters
    added = run_cli("queue", "add", "-p", prompt, "--name", "renamer", cwd=repository)
    assert added.returncode == 0, added.stderr
    run_id = added.stdout.splitlines()[-1]
    heartbeats = Heartbeats(system_database_url())  # a worker's beat, as `code-puppy worker` writes it
    now = int(time.time() * 1000)
    try:
        heartbeats.beat(WorkerBeat("executor-1", "w-1", "box", 4242, "code-puppy-fleet", 3, 0, "auto", now, now))
    finally:
        heartbeats.close()
    with api(web) as client:
        listed = client.get("/api/durable").json()
        assert listed == {
            "runs": [
                {
                    "id": run_id,
                    "kind": "fleet",
                    "status": "queued",
                    "prompt": "rename the helpers " + "x" * 60 + "…",
                    "worker": None,
                    "branch": None,
                    "cost_usd": None,
                    "age": listed["runs"][0]["age"],
                    "session_id": None,
                    "cancellable": True,
                }
            ],
            "workers": [
                {
                    "worker": "w-1",
                    "host": "box",
                    "pid": 4242,
                    "concurrency": 3,
                    "in_hand": 0,
                    "last_beat": listed["workers"][0]["last_beat"],
                    "alive": True,
                }
            ],
        }
        assert re.fullmatch(r"\d+s", listed["runs"][0]["age"]) and re.fullmatch(
            r"\d+s ago", listed["workers"][0]["last_beat"]
        )
        with client.stream("GET", "/api/durable/events") as events:  # the live list: the same, as an event
            first = next(line for line in events.iter_lines() if line)
        streamed = json.loads(first.removeprefix("data: "))
        # The same list, but for the ages, which a second later may read one more.
        streamed["runs"][0]["age"], streamed["workers"][0]["last_beat"] = (
            listed["runs"][0]["age"],
            listed["workers"][0]["last_beat"],
        )
        assert streamed == listed
        cancelled = client.post(f"/api/durable/{run_id[:8]}/cancel", headers={"origin": web.base})
        assert cancelled.json() == {"cancelled": True, "message": f"cancelled queued run {run_id}"}
        again = client.post(f"/api/durable/{run_id}/cancel", headers={"origin": web.base})
        assert (again.status_code, again.json()) == (
            409,
            {"error": f"run {run_id} is cancelled: only a queued run is cancelled here"},
        )
        unknown = client.post("/api/durable/nope/cancel", headers={"origin": web.base})
        assert (unknown.status_code, unknown.json()) == (
            404,
            {"error": "no durable run nope (code-puppy runs list shows them)"},
        )
        assert client.get("/api/durable").json()["runs"][0]["status"] == "cancelled"
    shown = run_cli("runs", "show", run_id, "--json", cwd=project)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == "cancelled"


def test_a_session_named_by_a_prefix_is_checked_as_running_like_its_full_id(
    server: FakeLLMServer, project: Path, web: WebServer
) -> None:
    """The hostile review's bypass: a prefix of a running session's id once rewound it, or started a second turn."""
    server.script(text("First answer."), text("Slow answer.", delay=4))
    with api(web) as client:
        session_id = client.post("/api/runs", json={"prompt": "start"}).json()["session_id"]
        wait_for(lambda: "First answer." in page_text(client, session_id), timeout=30, what="the first turn")
        assert client.post(f"/api/sessions/{session_id}/prompt", json={"prompt": "go on"}).status_code == 200
        prefix = session_id[:8]
        rewound = client.post(f"/api/sessions/{prefix}/rewind", json={"turns": 1}, headers={"origin": web.base})
        assert (rewound.status_code, rewound.json()) == (
            409,
            {"error": "the session is running a turn; rewind it when the turn ends"},
        )
        second = client.post(f"/api/sessions/{prefix}/prompt", json={"prompt": "again"}, headers={"origin": web.base})
        assert second.status_code == 409
        wait_for(lambda: "Slow answer." in page_text(client, session_id), timeout=30, what="the second turn")
    assert [user_messages(request.body)[-1] for request in server.requests] == ["start", "go on"]


def test_the_browser_is_opened_on_a_private_page_never_with_the_token_in_its_command_line(
    project: Path, code_puppy_home: Path, tmp_path: Path
) -> None:
    """Every local user can list a process's command line (`ps`): the browser gets a page only this user can read."""
    seen = tmp_path / "browser-argv"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {seen}\n')
    browser.chmod(0o755)
    process = subprocess.Popen(
        [str(CODE_PUPPY), "web", "--port", "0"],
        cwd=project,
        env={**os.environ, "DISPLAY": ":0", "BROWSER": str(browser)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().removeprefix("code-puppy web: ").strip()
        wait_for(lambda: seen.exists() and seen.read_text(), timeout=30, what="the browser")
        (argument,) = seen.read_text().split()
        assert argument.startswith("file:///") and "token" not in argument
        page = Path(argument.removeprefix("file://"))
        assert page.stat().st_mode & 0o777 == 0o600
        assert f'content="0;url={url}"' in page.read_text()
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl-C: the server stops and removes the page
        process.communicate(timeout=30)
    assert process.returncode == 130
    assert not page.exists()
