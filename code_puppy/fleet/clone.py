"""A queued run of `--repo URL`: the worker's own clone of URL in its cache (`DATA_DIR/fleet/repos/`), made once and
fetched before each run, the run's worktree made there from `--ref` (else the remote's default branch). The run's
branch stays in that clone: the user fetches it from there (README "Fleet"); a worker pushes nothing."""

from __future__ import annotations

import fcntl
import hashlib
import re
import subprocess
from pathlib import Path

from code_puppy.errors import ConfigError

CACHE = Path("fleet") / "repos"
"""The clones' folder under the worker's data directory."""


def cache_path(url: str) -> Path:
    """Where the worker keeps its clone of `url`: a folder named after the url's last part and its hash."""
    from code_puppy.paths import data_dir

    tail = re.sub(r"[^A-Za-z0-9._-]", "_", url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")) or "repo"
    return data_dir() / CACHE / f"{tail}-{hashlib.sha256(url.encode()).hexdigest()[:12]}"


def _git(cwd: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"git {args[0]} failed: {exc}") from None
    if done.returncode != 0:
        raise ConfigError(f"git {args[0]} failed: {' '.join(done.stderr.split()) or f'exit {done.returncode}'}")
    return done.stdout


def check_remote(url: str, ref: str | None) -> None:
    """`url` answers as a git repository and has `ref` (a branch or tag; a commit id is taken on trust): else a
    `ConfigError` (exit 2), nothing queued."""
    listed = _git(Path.cwd(), "ls-remote", "--", url)
    if ref is None or re.fullmatch(r"[0-9a-f]{7,40}", ref):
        return
    names = {line.split("\t", 1)[1] for line in listed.splitlines() if "\t" in line}
    if not names & {ref, f"refs/heads/{ref}", f"refs/tags/{ref}"}:
        raise ConfigError(f"--ref: {url} has no branch or tag {ref}")


def worktree(url: str, ref: str | None, run_id: str) -> tuple[Path, Path]:
    """The worker's clone of `url` (cloned or fetched now) and the run's worktree in it, from `ref`; under a lock, so
    that runs of one url in this worker never clone or fetch at once."""
    from code_puppy.worktrees import ensure

    clone = cache_path(url)
    clone.parent.mkdir(parents=True, exist_ok=True)
    with (clone.parent / f"{clone.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (clone / ".git").is_dir():
            _git(clone.parent, "clone", "--quiet", "--", url, clone.name)
        else:
            _git(clone, "fetch", "--quiet", "--tags", "--force", "origin")
        start = _start(clone, ref)
        return clone, ensure(clone, run_id, start)


def _start(clone: Path, ref: str | None) -> str:
    if ref is None:
        return "origin/HEAD"
    remote = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"refs/remotes/origin/{ref}"], cwd=clone, capture_output=True
    )
    return f"origin/{ref}" if remote.returncode == 0 else ref
