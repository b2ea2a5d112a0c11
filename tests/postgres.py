"""A real PostgreSQL for the tests: one server per test process (each xdist worker), a fresh database per test.

The server is Debian's `postgresql` (its binaries under /usr/lib/postgresql/VERSION/bin). Where they are missing and
the tests run as root, they are installed once (`apt-get install -y postgresql`, under a file lock so that parallel
workers never race dpkg); without root and without them, every test that needs the server fails with one message
saying what to install. Never a skip: a shared-store test that quietly does not run proves nothing.

PostgreSQL refuses to run as root, so under root the server runs as the tests' unprivileged system user
(tests/unprivileged.py), in a temp dir it owns, on a free loopback port, with its socket in that dir. It runs without
fsync: a test never survives a power cut. Each test gets `CREATE DATABASE … TEMPLATE template0`: about 0.1 s.
"""

from __future__ import annotations

import fcntl
import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

INSTALL_LOCK = Path(tempfile.gettempdir()) / "code-puppy-tests-postgresql-install.lock"


def server_binaries() -> Path:
    """The directory of `initdb` and `pg_ctl`, installing Debian's `postgresql` first when they are missing."""
    if found := _found():
        return found
    if os.geteuid() != 0:
        pytest.fail(
            "the PostgreSQL tests need PostgreSQL's server binaries (/usr/lib/postgresql/*/bin/initdb): "
            "install Debian's `postgresql` package (sudo apt-get install -y postgresql), or run the tests as root"
        )
    with INSTALL_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker installs; the others wait, then find it installed
        if not _found():
            for command in (
                ["apt-get", "update"],
                ["apt-get", "install", "-y", "--no-install-recommends", "postgresql"],
            ):
                done = subprocess.run(
                    command, capture_output=True, text=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
                )
                if done.returncode != 0:
                    pytest.fail(f"`{' '.join(command)}` failed: {(done.stderr or done.stdout).strip()[-500:]}")
    if found := _found():
        return found
    pytest.fail("apt-get installed `postgresql`, but no /usr/lib/postgresql/*/bin/initdb is there")


def _found() -> Path | None:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda path: int(path.split("/")[4]))
    return Path(candidates[-1]).parent if candidates else None


@dataclass
class PostgresServer:
    """A running server: `url(name)` is a database on it, `create_database()` a fresh one."""

    port: int
    directory: Path
    crash_safe: bool = False
    _names = itertools.count(1)

    def url(self, database: str, *, user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as connection:
            connection.execute(sql)  # type: ignore[arg-type]  # a test's own literal statement

    def stop(self) -> None:
        """Stop the server at once (`-m immediate`: its clients' connections drop, as in a crash)."""
        done = _pg_ctl(self.directory, "-m", "immediate", "stop")
        assert done.returncode == 0, done.stderr

    def start(self) -> None:
        """Start it again, on its port."""
        log = str(self.directory / "log")
        options = _options(self.port, self.directory, crash_safe=self.crash_safe)
        done = _pg_ctl(self.directory, "-o", options, "-l", log, "-w", "start")
        assert done.returncode == 0, done.stderr

    def create_database(self) -> str:
        """A new empty database (no schema yet: code-puppy migrates it when it opens it); its url."""
        name = f"test_{os.getpid()}_{next(self._names)}"
        self.admin(f"CREATE DATABASE {name} TEMPLATE template0")
        return self.url(name)


def _options(port: int, directory: Path, *, crash_safe: bool = False) -> str:
    """The server's options: fast (no flush at commit) unless `crash_safe` (a commit survives its process crashing)."""
    fast = "" if crash_safe else "-c synchronous_commit=off "
    return (
        f"-p {port} -k {directory} -c listen_addresses=127.0.0.1 -c fsync=off {fast}-c full_page_writes=off "
        "-c max_connections=200"
    )


def _pg_ctl(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    from tests.unprivileged import unprivileged

    command = [*unprivileged().prefix, str(server_binaries() / "pg_ctl"), "-D", str(directory / "data"), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=directory, timeout=120)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(*, crash_safe: bool = False) -> tuple[PostgresServer, list[str]]:
    """Start a server in a new temp dir (`crash_safe`: see `_options`); the server and the command that stops it."""
    from tests.unprivileged import unprivileged

    binaries = server_binaries()
    runner = unprivileged()
    directory = Path(tempfile.mkdtemp(prefix="code-puppy-postgres-"))
    os.chown(directory, runner.uid, runner.gid)
    data = directory / "data"

    def run(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*runner.prefix, *command], capture_output=True, text=True, cwd=directory, timeout=120)

    done = run(str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
    if done.returncode != 0:
        pytest.fail(f"initdb failed: {done.stderr.strip()[-500:]}")
    for _attempt in range(5):  # another process may take the free port between the probe and the start
        port = _free_port()
        options = _options(port, directory, crash_safe=crash_safe)
        started = run(
            str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(directory / "log"), "-w", "start"
        )
        if started.returncode == 0:
            stop = [*runner.prefix, str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]
            return PostgresServer(port, directory, crash_safe), stop
    log = (directory / "log").read_text() if (directory / "log").exists() else ""
    pytest.fail(f"PostgreSQL did not start: {started.stderr.strip()[-300:]} {log[-500:]}")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL for this test process, stopped and removed at its end."""
    server, stop = start_server()
    try:
        yield server
    finally:
        subprocess.run(stop, capture_output=True, timeout=60)
        shutil.rmtree(server.directory, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """The url of a fresh, empty database of the test's own."""
    return postgres_server.create_database()
