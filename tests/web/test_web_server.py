"""`code-puppy web` without a browser: its one line, the token (query string once, then the cookie, or the header),
the Origin check, the refusals, and one clear line for each bad input; through the installed console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import run_cli
from tests.test_startup import imported_modules
from tests.web.conftest import WebServer, start_web


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


def test_only_the_web_command_imports_the_server_libraries(project: Path) -> None:
    for args in (("--help",), ("sessions", "list")):
        modules = imported_modules(*args, cwd=project)
        assert sorted(m for m in modules if m.split(".")[0] in ("starlette", "uvicorn")) == []
    web = start_web("--port", "0", cwd=project)
    try:
        script = "import code_puppy.cli.web, sys; print('starlette' in sys.modules)"
        assert subprocess.run([sys.executable, "-c", script], capture_output=True, text=True).stdout == "False\n"
    finally:
        web.stop()


def test_the_session_list_shows_a_stored_session(server: object, project: Path, web: WebServer) -> None:
    from tests.fake_llm import FakeLLMServer, text

    assert isinstance(server, FakeLLMServer)
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
