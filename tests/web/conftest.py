"""`code-puppy web` started through the installed console script, and Debian's Chromium driven by Playwright.

Chromium is installed here when it is missing (`apt-get install chromium`, once per machine, under a file lock so that
xdist workers do not race dpkg): the browser tests never skip for want of it.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import CODE_PUPPY

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LINE = re.compile(r"code-puppy web: http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]+)\n")


def ensure_chromium() -> Path:
    """Debian's Chromium, installed now when it is missing (as root, once, under a lock)."""
    if CHROMIUM.exists():
        return CHROMIUM
    with open("/tmp/code-puppy-chromium.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not CHROMIUM.exists():
            if os.geteuid() != 0:
                pytest.fail("/usr/bin/chromium is missing: run `sudo apt-get install -y chromium` (the tests need it)")
            environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
                done = subprocess.run(command, env=environment, capture_output=True, text=True)
                if done.returncode != 0:
                    pytest.fail(f"{' '.join(command)} failed: {done.stderr.strip()[-400:]}")
    return CHROMIUM


@dataclass
class WebServer:
    process: subprocess.Popen[str]
    port: int
    token: str
    line: str

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/?token={self.token}"

    def stop(self) -> str:
        """Stop it as Ctrl-C would (unless it ended already); what it said on stderr."""
        if self.process.returncode is not None:
            return ""
        self.process.send_signal(2)
        try:
            _, stderr = self.process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, stderr = self.process.communicate()
        return stderr


def start_web(*args: str, cwd: Path, env: Mapping[str, str] | None = None) -> WebServer:
    """`code-puppy web --no-open --port 0 ARGS` in `cwd`, once it printed its line."""
    process = subprocess.Popen(
        [str(CODE_PUPPY), "web", "--no-open", "--port", "0", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    match = LINE.fullmatch(line)
    if match is None:
        process.kill()
        pytest.fail(f"code-puppy web printed {line!r}; stderr: {process.communicate()[1]!r}")
    return WebServer(process, int(match.group(1)), match.group(2), line)


@pytest.fixture
def web(project: Path) -> Iterator[WebServer]:
    """A dashboard of the test's own store, started in `project`."""
    server = start_web(cwd=project)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """One headless Chromium per test module: Playwright's sync API keeps an event loop running in the main thread
    while it is open, which the next module's asyncio tests in that worker could not run beside."""
    path = ensure_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(path), headless=True, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


def git_project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "README.md").write_text("# demo project\n")
    return root
