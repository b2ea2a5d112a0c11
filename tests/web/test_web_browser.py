"""The dashboard in a real browser (Debian's Chromium, headless, driven by Playwright): list, open and search
sessions; start a run and see its text arrive while it runs; steer, approve, deny, cancel and rewind it; a run
started in a terminal shows up live and is steered and cancelled from the page; a queued fleet run shows up in the
runs list and is cancelled there. One dashboard per module, one browser per worker.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.conftest import run_cli, start_cli, wait_for
from tests.fake_llm import FakeLLMServer, call, hang, text, tool_calls
from tests.web.conftest import WebServer, git_project, start_web

pytestmark = pytest.mark.browser


@dataclass
class Dashboard:
    web: WebServer
    home: Path
    project: Path

    @property
    def env(self) -> dict[str, str]:
        return {"CODE_PUPPY_HOME": str(self.home)}


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    home = tmp_path_factory.mktemp("web-home")
    project = git_project(tmp_path_factory.mktemp("web") / "project")
    (home / "config.toml").write_text('model = "fake"\n')
    web = start_web(cwd=project, env={"CODE_PUPPY_HOME": str(home)})
    yield Dashboard(web, home, project)
    web.stop()


@pytest.fixture
def fake(dashboard: Dashboard) -> Iterator[FakeLLMServer]:
    """A fake model server of the test's own: each new run's project reads the config again."""
    with FakeLLMServer() as server:
        (dashboard.home / "config.toml").write_text(
            f'model = "fake"\n[sessions]\nauto_title = false\n[models.fake]\nname = "fake-model"\n'
            f'base_url = "{server.base_url}"\n'
        )
        yield server


@pytest.fixture
def page(browser: Browser, dashboard: Dashboard) -> Iterator[Page]:
    context = browser.new_context()
    opened = context.new_page()
    opened.goto(dashboard.web.url)  # the token, once: the cookie from now on
    yield opened
    context.close()


def user_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def start_run(page: Page, prompt: str) -> str:
    """Send `prompt` from the sessions page; the new session's id (its page is open)."""
    page.get_by_placeholder("Prompt for a new session").fill(prompt)
    page.get_by_role("button", name="Run").click()
    page.wait_for_url("**/s/*")
    return page.url.rsplit("/", 1)[1]


def test_list_open_and_search(page: Page, dashboard: Dashboard, fake: FakeLLMServer) -> None:
    fake.script(text("The **needle** is in the haystack."), text("Nothing here."))
    for prompt in ("where is the needle?", "what about the <b>weather</b>?"):
        done = start_cli("-p", prompt, cwd=dashboard.project, env=dashboard.env)
        _, stderr = done.communicate(timeout=60)
        assert done.returncode == 0, stderr
    page.reload()
    expect(page.get_by_role("link", name="where is the needle?")).to_be_visible()
    expect(page.get_by_role("link", name="what about the <b>weather</b>?")).to_be_visible()  # text, not markup
    page.get_by_placeholder("Search sessions").fill("needle")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_role("link", name="where is the needle?")).to_be_visible()
    expect(page.get_by_role("link", name="what about the <b>weather</b>?")).to_have_count(0)
    page.get_by_role("link", name="where is the needle?").click()
    expect(page.locator(".msg.model strong")).to_have_text("needle")  # markdown rendered
    expect(page.locator(".msg.you")).to_contain_text("where is the needle?")


def test_a_run_streams_its_text_before_it_ends_and_is_steered(page: Page, fake: FakeLLMServer) -> None:
    fake.script(text("alpha beta gamma delta epsilon zeta eta theta", chunk_delay=0.4), text("Revised, with tests."))
    start_run(page, "write the thing")
    expect(page.get_by_text("alpha")).to_be_visible()
    assert page.locator(".run-end").count() == 0  # the text came while the run was still going
    page.get_by_placeholder("Steer").fill("focus on the tests")
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_role("status")).to_have_text("run ended: success", timeout=30_000)
    expect(page.locator("#live-output .msg.steer")).to_contain_text("focus on the tests")
    assert user_messages(fake.requests[1].body) == ["write the thing", "focus on the tests"]


def test_approve_in_one_tab_deny_later_and_rewind(page: Page, dashboard: Dashboard, fake: FakeLLMServer) -> None:
    fake.script(tool_calls(call("write_file", {"path": "approved.txt", "content": "yes\n"})), text("Written."))
    session_id = start_run(page, "write approved.txt")
    card = page.get_by_role("group", name="Approval")
    expect(card).to_contain_text("write_file wants to")
    expect(card.locator(".diff")).to_contain_text("+yes")
    other = page.context.new_page()  # a second tab on the same run
    other.goto(page.url)
    expect(other.get_by_role("group", name="Approval")).to_be_visible()
    card.get_by_role("button", name="Allow", exact=True).click()
    expect(page.get_by_role("status")).to_have_text("run ended: success", timeout=30_000)
    assert (dashboard.project / "approved.txt").read_text() == "yes\n"
    expect(other.locator(".approval .outcome")).to_have_text("answered: yes")
    question = other.locator(".approval").get_attribute("data-question")
    late = other.evaluate(
        """async ([session, question]) => {
            const r = await fetch(`/api/sessions/${session}/approvals/${question}`,
                {method: "POST", headers: {"content-type": "application/json"}, body: '{"verdict": "no"}'});
            return [r.status, await r.json()];
        }""",
        [session_id, question],
    )
    assert late == [409, {"error": "already answered: yes"}]

    fake.script(tool_calls(call("write_file", {"path": "denied.txt", "content": "no\n"})), text("Not written."))
    page.get_by_placeholder("Continue this session").fill("now write denied.txt")
    page.get_by_role("button", name="Run").click()
    page.locator(".approval:not(.answered)").get_by_role("button", name="Deny").click()
    expect(page.get_by_role("status")).to_have_count(2, timeout=30_000)
    expect(page.get_by_role("status").last).to_have_text("run ended: success")
    assert not (dashboard.project / "denied.txt").exists()

    page.reload()
    expect(page.locator("details.tool.denied")).to_have_count(1)
    (dashboard.project / "approved.txt").write_text("my own edit\n")  # the user's change since the agent's
    page.get_by_role("button", name="Rewind").first.click()
    expect(page.locator("#checkpoints .form-error")).to_contain_text("rewind refused, nothing was changed")
    assert (dashboard.project / "approved.txt").read_text() == "my own edit\n"
    page.get_by_role("button", name="Rewind anyway (your versions are kept)").click()
    page.wait_for_load_state()
    wait_for(lambda: not (dashboard.project / "approved.txt").exists(), timeout=15, what="the rewind")


def test_cancel_stops_the_run_and_keeps_the_prompt(page: Page, fake: FakeLLMServer) -> None:
    fake.script(hang())
    start_run(page, "this will take forever")
    wait_for(lambda: fake.requests, what="the model request")
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("status")).to_have_text("run ended: interrupted", timeout=30_000)
    page.reload()
    expect(page.locator(".transcript .msg.you")).to_contain_text("this will take forever")


def test_a_terminal_run_shows_up_live_and_is_steered_and_cancelled_from_the_page(
    page: Page, dashboard: Dashboard, fake: FakeLLMServer
) -> None:
    fake.script(text("A first draft.", delay=4), hang())
    process = start_cli("-p", "draft it", "--output-format", "stream-json", cwd=dashboard.project, env=dashboard.env)
    try:
        live = page.locator("#live-runs")
        expect(live).to_contain_text("(a terminal)", timeout=30_000)
        live.get_by_role("link").click()
        expect(page.locator("#live-output .journal .msg.you")).to_contain_text("draft it")  # its journal, live
        page.get_by_placeholder("Steer").fill("mind the terminal")
        page.get_by_role("button", name="Send").click()
        wait_for(lambda: len(fake.requests) == 2, timeout=30, what="the steered request")
        page.get_by_role("button", name="Cancel").click()  # as SIGINT in its terminal
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert (process.returncode, stderr) == (130, "")
    events = [json.loads(line) for line in stdout.splitlines()]
    assert (events[-1]["type"], events[-1]["status"]) == ("result", "interrupted")
    assert user_messages(fake.requests[1].body) == ["draft it", "mind the terminal"]  # steered, then cancelled
    assert len(fake.requests) == 2
    expect(page.locator("#live-output")).to_contain_text("the terminal's run ended", timeout=15_000)
    expect(page.get_by_role("alert")).to_have_text("")  # the cancel was taken: no error under the controls


def test_a_queued_run_is_listed_and_cancelled_from_the_sessions_page(
    page: Page, dashboard: Dashboard, fake: FakeLLMServer
) -> None:
    project = dashboard.project
    subprocess.run(["git", "add", "-A"], cwd=project, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "start", "--allow-empty"],
        cwd=project,
        check=True,
    )
    added = run_cli("queue", "add", "-p", "tidy the docs", cwd=project, env=dashboard.env)
    assert added.returncode == 0, added.stderr
    run_id = added.stdout.splitlines()[-1]
    row = page.locator(f'#durable-runs tr[data-run="{run_id}"]')  # the live list: no reload
    expect(row.locator("td")).to_have_text(
        [run_id[:8], "queued", "tidy the docs", "-", "-", "unknown", re.compile(r"\d+s"), "-", "Cancel"], timeout=15_000
    )
    row.get_by_role("button", name="Cancel").click()
    expect(row.locator("td").nth(1)).to_have_text("cancelled")
    expect(row.get_by_role("button")).to_have_count(0)
    shown = run_cli("runs", "show", run_id, "--json", cwd=project, env=dashboard.env)
    assert json.loads(shown.stdout)["status"] == "cancelled", shown.stderr
