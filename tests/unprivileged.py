"""Running the installed `code-puppy` as an unprivileged user, for checks that mean nothing as root.

Root can read any process's `/proc/PID/environ`, so a test of process hardening must run code-puppy as an ordinary
user. When the tests run as root (CI, containers), a dedicated system user is created and the console script runs as
that user through `setpriv` (or `runuser`); otherwise the current user is already unprivileged. Whatever is missing
for this is a test failure, never a skip: a security check that quietly does not run proves nothing.
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

import code_puppy
from tests.conftest import CODE_PUPPY

USER = "code-puppy-test"
"""The system user the tests create when they run as root."""


@dataclass(frozen=True)
class Unprivileged:
    """How to run a command as an unprivileged user."""

    uid: int
    gid: int
    prefix: tuple[str, ...]
    """The argv prefix that switches to the user (empty when the tests already run unprivileged)."""

    def run_cli(
        self, *args: str, cwd: Path, env: Mapping[str, str], timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the installed `code-puppy` as the user, with exactly `env`."""
        return subprocess.run(
            [*self.prefix, str(CODE_PUPPY), *args],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    @contextmanager
    def workdir(self) -> Iterator[Path]:
        """A fresh directory the user owns, outside pytest's root-only temp tree (it is 0700 under root)."""
        path = Path(tempfile.mkdtemp(prefix="code-puppy-unprivileged-"))
        try:
            os.chown(path, self.uid, self.gid)
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def own(self, *paths: Path) -> None:
        """Give files the test wrote as root to the user, so code-puppy can change them."""
        for path in paths:
            for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
                os.chown(item, self.uid, self.gid)


@functools.cache
def unprivileged() -> Unprivileged:
    """The runner, set up once per test process; fails the calling test when no mechanism is available."""
    if os.geteuid() != 0:
        return Unprivileged(os.getuid(), os.getgid(), ())
    entry = _system_user()
    _make_python_reachable()
    if setpriv := shutil.which("setpriv"):
        prefix = (setpriv, f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups", "--")
    elif runuser := shutil.which("runuser"):
        prefix = (runuser, "-u", USER, "--")
    else:
        pytest.fail("running as root, but neither setpriv nor runuser is installed to switch to an unprivileged user")
    runner = Unprivileged(entry.pw_uid, entry.pw_gid, prefix)
    probe = subprocess.run(
        [*prefix, str(CODE_PUPPY), "--version"], capture_output=True, text=True, cwd="/", stdin=subprocess.DEVNULL
    )
    if probe.returncode != 0:
        pytest.fail(f"code-puppy does not run as the user {USER}: {probe.stderr.strip() or probe.stdout.strip()}")
    return runner


def _system_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        pass
    useradd = shutil.which("useradd")
    if useradd is None:
        pytest.fail(f"running as root, but useradd is not installed to create the user {USER}")
    created = subprocess.run(
        [useradd, "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", USER],
        capture_output=True,
        text=True,
    )
    if created.returncode not in (0, 9):  # 9: created meanwhile by a parallel test worker
        pytest.fail(f"cannot create the user {USER}: {created.stderr.strip()}")
    return pwd.getpwnam(USER)


def _make_python_reachable() -> None:
    """Let the user reach the interpreter, the virtual environment and the code_puppy sources.

    The interpreter may live under a home directory only its owner may enter (pyenv under /root, mode 0700). Only
    the traverse bit (o+x) is added, on the directories on the way, never read or write: the user can then open
    files it knows the names of (which are world-readable already) but cannot list or change anything. The bit is
    left in place afterwards, since parallel test workers rely on it too.
    """
    needed = {
        Path(sys.executable).resolve(),
        Path(sys.prefix),
        Path(sys.base_prefix).resolve(),
        Path(sysconfig.get_path("stdlib")).resolve(),
        Path(sysconfig.get_path("purelib")).resolve(),
        Path(code_puppy.__file__).resolve().parent,
    }
    for path in needed:
        for directory in [path, *path.parents] if path.is_dir() else path.parents:
            mode = directory.stat().st_mode
            if not mode & stat.S_IXOTH:
                directory.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
