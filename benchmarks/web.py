"""`code-puppy web`: how fast a session of 10,000 messages opens, and the screenshots in the README.

    python benchmarks/web.py [--runs 5] [--screenshots docs/screenshots]

1. Seeds a store (a temporary CODE_PUPPY_HOME) with a 10,000-message session and a few small ones made by real
   headless runs against the fake model server (tool calls, an edit, checkpoints, a denied call).
2. Starts `code-puppy web` through the installed console script and times, with the token header: the sessions list,
   the 10,000-message session's page (its newest 200 messages), and its oldest page (median of --runs).
   Queues a few fleet runs (`code-puppy queue add`, no worker: they stay queued; one cancelled) and times the runs
   list's read (`/api/durable`: DBOS's tables through `durable/runs.py`, DBOS never launched), and `list_runs` itself
   over --queued runs enqueued in-process (the read the page's live list repeats every 2 s).
3. In Debian's Chromium (Playwright): the big session's page until `load`, then screenshots of the sessions list, a
   search, a session, and a live run waiting on an approval card.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.fake_llm import FakeLLMServer, call, text, tool_calls  # noqa: E402
from tests.sessions_data import exchange  # noqa: E402
from tests.web.conftest import CHROMIUM_FLAGS, ensure_chromium, start_web  # noqa: E402

CODE_PUPPY = str(Path(sys.executable).parent / "code-puppy")
TEST_FILE = "from app import greet\n\n\ndef test_greet():\n    assert greet('Ada') == 'Hello, Ada!'\n"


async def seed_big(home: Path, project: Path, messages: int) -> str:
    from code_puppy.sessions.session import Session
    from code_puppy.sessions.store import SqliteConversationStore

    with SqliteConversationStore(home / "sessions.db") as store:
        session = await Session.start(store, project, model="fake")
        await session.set_message_history([m for i in range(messages // 4) for m in exchange(i)])
        store.sessions.rename(session.id, "ten-thousand")
        return session.id


def headless(project: Path, env: dict[str, str], *args: str) -> None:
    subprocess.run([CODE_PUPPY, *args], cwd=project, env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL)


def timed(client: httpx.Client, path: str, runs: int) -> tuple[float, int]:
    times: list[float] = []
    size = 0
    for _ in range(runs):
        started = time.perf_counter()
        response = client.get(path)
        times.append(time.perf_counter() - started)
        response.raise_for_status()
        size = len(response.content)
    return statistics.median(times), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--queued", type=int, default=300, help="runs enqueued to time list_runs over")
    parser.add_argument("--screenshots", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer() as fake:
        home, project = Path(tmp) / "home", Path(tmp) / "demo-project"
        home.mkdir()
        project.mkdir()
        subprocess.run(["git", "init", "-q", str(project)], check=True)
        (project / "app.py").write_text("def greet(name):\n    return 'hello ' + name\n")
        (home / "config.toml").write_text(
            f'model = "fake"\n[sessions]\nauto_title = false\n[models.fake]\nname = "gpt-4o-mini"\n'
            f'base_url = "{fake.base_url}"\n'
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "CODE_PUPPY_"))} | {
            "CODE_PUPPY_HOME": str(home)
        }
        fake.script(
            tool_calls(call("read_file", {"path": "app.py"})),
            tool_calls(
                call(
                    "edit_file",
                    {"path": "app.py", "old_text": "'hello ' + name", "new_text": "f'Hello, {name}!'"},
                )
            ),
            text("I changed `greet` to use an **f-string**:\n\n```python\nreturn f'Hello, {name}!'\n```\n\nAll set."),
            text("The project has one module, `app.py`, with a `greet` function."),
        )
        headless(project, env, "-p", "make greet use an f-string", "--permission-mode", "accept-edits")
        headless(project, env, "-p", "what is in this project?")
        os.environ["CODE_PUPPY_HOME"] = str(home)
        queue_runs(project, env)
        big = asyncio.run(seed_big(home, project, 10_000))
        web = start_web(cwd=project, env=env)
        try:
            with httpx.Client(base_url=web.base, headers={"authorization": f"Bearer {web.token}"}) as client:
                listing, listing_size = timed(client, "/", args.runs)
                newest, newest_size = timed(client, f"/s/{big}", args.runs)
                oldest, _ = timed(client, f"/s/{big}?before=200", args.runs)
                runs_read, _ = timed(client, "/api/durable", args.runs)
            print(f"sessions list: {listing * 1000:.0f} ms ({listing_size // 1024} KiB)")
            print(f"10,000-message session, newest page: {newest * 1000:.0f} ms ({newest_size // 1024} KiB)")
            print(f"10,000-message session, oldest page: {oldest * 1000:.0f} ms")
            print(f"runs list (/api/durable, 3 runs and their costs): {runs_read * 1000:.0f} ms")
            browse(web.url, web.base, big, fake, args.screenshots)
        finally:
            web.stop()
        time_list_runs(project, args.queued, args.runs)


def queue_runs(project: Path, env: dict[str, str]) -> None:
    """Three fleet runs on the queue (no worker takes them), the last one cancelled: the sessions page lists them."""
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    subprocess.run([*git, "add", "-A"], cwd=project, check=True)
    subprocess.run([*git, "commit", "-qm", "start"], cwd=project, check=True)
    ids: list[str] = []
    for prompt in ("add a --verbose flag to the CLI", "write tests for greet", "translate the README"):
        done = subprocess.run(
            [CODE_PUPPY, "queue", "add", "-p", prompt], cwd=project, env=env, text=True, capture_output=True
        )
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.splitlines()[-1])
    subprocess.run([CODE_PUPPY, "runs", "cancel", ids[-1]], cwd=project, env=env, check=True, capture_output=True)


def time_list_runs(project: Path, count: int, runs: int) -> None:
    """`list_runs` over `count` more queued runs (enqueued in-process through the fleet's client), median of `runs`."""
    from code_puppy.durable.runs import list_runs
    from code_puppy.fleet.queue import QueuedRun, enqueue

    for n in range(count):
        enqueue(QueuedRun(prompt=f"task {n}", project=project))
    times: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        listed = list_runs()
        times.append(time.perf_counter() - started)
    print(f"list_runs over {len(listed)} runs: {statistics.median(times) * 1000:.0f} ms")
    from code_puppy.paths import store_location
    from code_puppy.sessions.schema import Database
    from code_puppy.web.durable_runs import snapshot

    database = Database(store_location(), readonly=True)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        snapshot(database)
        times.append(time.perf_counter() - started)
    database.close()
    print(
        f"the runs list's read (runs, costs, workers) over {len(listed)} runs: {statistics.median(times) * 1000:.0f} ms"
    )


def browse(url: str, base: str, big: str, fake: FakeLLMServer, shots: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(ensure_chromium()), headless=True, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(url)
        started = time.perf_counter()
        page.goto(f"{base}/s/{big}", wait_until="load")
        print(f"10,000-message session in Chromium, until load: {(time.perf_counter() - started) * 1000:.0f} ms")
        page.goto(f"{base}/")
        page.locator("#durable-runs tr[data-run]").first.wait_for()  # the runs list, filled in by its event stream
        page.screenshot(path=str(shots / "sessions.png"), full_page=True)
        page.get_by_placeholder("Search sessions").fill("f-string")
        page.get_by_role("button", name="Search").click()
        page.wait_for_load_state()
        page.screenshot(path=str(shots / "search.png"))
        page.get_by_role("link", name="make greet use an f-string").click()
        page.locator("details.tool").nth(1).click()  # unfold the edit: its diff
        page.screenshot(path=str(shots / "session.png"), full_page=True)
        fake.script(
            tool_calls(
                call(
                    "write_file",
                    {
                        "path": "test_app.py",
                        "content": TEST_FILE,
                    },
                )
            ),
            text("Added `test_app.py`."),
        )
        page.goto(f"{base}/")
        page.get_by_placeholder("Prompt for a new session").fill("add a test for greet")
        page.get_by_role("button", name="Run").click()
        expect(page.get_by_role("group", name="Approval")).to_be_visible(timeout=30_000)
        page.screenshot(path=str(shots / "live-run.png"))
        page.get_by_role("button", name="Deny").click()
        expect(page.get_by_role("status")).to_be_visible(timeout=30_000)
        browser.close()
    print(f"screenshots: {', '.join(sorted(str(path.relative_to(ROOT)) for path in shots.glob('*.png')))}")


if __name__ == "__main__":
    main()
