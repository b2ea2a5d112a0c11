"""Git worktrees for parallel agents: `code-puppy -w NAME`, `code-puppy worktrees remove` (the listing is
`cli/worktrees.py`).

A worktree lives at `.code-puppy/worktrees/NAME` of the repository's main checkout, on the branch `code-puppy/NAME`.
It is a project of its own (its root is the worktree: sessions, checkpoints and trust are its own, the repository's
trust carrying over, see trust.py). The main checkout leaves the folder out: git and ripgrep through the repository's
`info/exclude`, the checkpoints through their own excludes, the permission policy by treating it as outside the
project.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Generator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from code_puppy.errors import ConfigError
from code_puppy.paths import WORKTREES_DIR

BRANCH_PREFIX = "code-puppy/"
"""The branch of worktree NAME is `code-puppy/NAME`."""
EXCLUDE_LINE = f"/{WORKTREES_DIR}/"
"""What the repository's `info/exclude` gets, so the main checkout's `git status` and searches leave worktrees out."""
_COMMITTER = {
    "GIT_AUTHOR_NAME": "code-puppy",
    "GIT_AUTHOR_EMAIL": "worktrees@code-puppy.invalid",
    "GIT_COMMITTER_NAME": "code-puppy",
    "GIT_COMMITTER_EMAIL": "worktrees@code-puppy.invalid",
}
"""Who commits a removed worktree's changes when the user's git names nobody."""


class WorktreeError(Exception):
    """A git operation on a worktree failed (exit 1); the message says what and why."""


@dataclass(frozen=True)
class Worktree:
    name: str
    path: Path
    branch: str | None
    """`code-puppy/NAME`, or None when the worktree's HEAD is detached."""
    changes: tuple[str, ...]
    """The paths with uncommitted changes (modified, staged, untracked), as `git status` names them."""


NAME_MAX = 64
"""The longest worktree name: it is a folder and part of a branch name."""


def check_name(name: str) -> str:
    """`name` when it can name a worktree folder and a branch; else a `ConfigError` (exit 2)."""
    bad = not name or name.startswith((".", "-")) or name.endswith((".", ".lock")) or len(name) > NAME_MAX
    if bad or ".." in name or any(not (character.isalnum() or character in "-_.") for character in name):
        shown = name if len(name) <= NAME_MAX else name[:NAME_MAX] + "…"
        raise ConfigError(
            f"bad worktree name {shown!r}: use up to {NAME_MAX} letters, digits, '-', '_' and '.' (no '..', not "
            "starting with '.' or '-', not ending with '.' or '.lock')"
        )
    return name


def repository(cwd: Path) -> Path:
    """The main checkout of the git repository `cwd` is in (also from inside one of its worktrees)."""
    try:
        common = Path(_git(cwd, "rev-parse", "--path-format=absolute", "--git-common-dir").strip())
    except WorktreeError:
        raise ConfigError(f"{cwd} is not in a git repository: worktrees need one (run `git init` first)") from None
    if common.name != ".git":
        raise ConfigError(f"{cwd} is in a bare git repository ({common}): worktrees need a main checkout")
    return common.parent.resolve()


def ensure(repo: Path, name: str, start: str | None = None) -> Path:
    """The worktree NAME of `repo`, created on `code-puppy/NAME` (from `start`, else HEAD, or the branch if it exists)
    if needed."""
    path = repo / WORKTREES_DIR / name
    folder = repo.resolve() / WORKTREES_DIR
    if (repo / WORKTREES_DIR).resolve() != folder or path.is_symlink():
        # A repository's own files (a queued --repo one's) could otherwise put the worktree anywhere on the machine.
        raise WorktreeError(
            f"{folder} is a symbolic link (or under one): worktrees are made only in the repository's own folder"
        )
    _exclude(repo)
    if path.exists():
        if not (path / ".git").is_file():
            raise WorktreeError(f"{path} exists but is not a git worktree; move it away or pick another name")
        return path
    branch = BRANCH_PREFIX + name
    if not _git(repo, "rev-parse", "--verify", "--quiet", start or "HEAD", check=False).strip():
        raise WorktreeError(f"{repo} has no commit yet: a worktree starts from one (commit something first)")
    exists = bool(_git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False).strip())
    made = (str(path), branch) if exists else ("-b", branch, str(path), *((start,) if start else ()))
    with _bookkeeping(repo):
        _git(repo, "worktree", "add", "--quiet", *made)
    return path


def listed(repo: Path, *, only: str | None = None) -> list[Worktree]:
    """The worktrees of `repo` under `.code-puppy/worktrees/`, by name (`only`: that one, if it is there: the others'
    `git status` is not run)."""
    folder = (repo / WORKTREES_DIR).resolve()
    found: list[Worktree] = []
    with _bookkeeping(repo):
        blocks = _git(repo, "worktree", "list", "--porcelain", "-z").split("\0\0")
    for block in blocks:
        fields: dict[str, str] = {}
        for line in filter(None, block.split("\0")):
            key, _, value = line.partition(" ")
            fields[key] = value
        if "worktree" not in fields:
            continue
        path = Path(fields["worktree"]).resolve()
        if path.parent != folder or only not in (None, path.name):
            continue
        branch = fields.get("branch", "").removeprefix("refs/heads/") or None
        try:
            changes = _changes(path) if path.is_dir() else ()
        except WorktreeError:
            if path.is_dir():
                raise
            continue  # removed while we looked (another process: a fleet worker finishing a run)
        found.append(Worktree(name=path.name, path=path, branch=branch, changes=changes))
    return sorted(found, key=lambda worktree: worktree.name)


def find(repo: Path, name: str) -> Worktree:
    """The worktree NAME of `repo`; a `WorktreeError` when there is none."""
    for worktree in listed(repo, only=name):
        return worktree
    raise WorktreeError(f"no worktree named {name!r} in {repo} (`code-puppy worktrees list` shows them)")


def remove(repo: Path, worktree: Worktree, *, force: bool) -> str | None:
    """Remove `worktree` (its branch stays). Uncommitted changes stop it unless `force`, which first commits them on
    the worktree's branch; returns that commit's id, or None when there was nothing to commit."""
    # These stop it even with --force: what would be lost is not this worktree's to commit.
    running = _running_sessions(worktree.path)
    if running:
        raise WorktreeError(
            f"an agent is running in worktree {worktree.name} (session {', '.join(running)}): stop it first"
        )
    nested = _nested_repositories(worktree.path)
    if nested:
        raise WorktreeError(
            f"worktree {worktree.name} holds git repositories of its own ({', '.join(nested)}): their history would "
            f"go with it; move them out, or remove it yourself with `git worktree remove`"
        )
    if (
        worktree.branch is None
        and not _git(
            worktree.path, "for-each-ref", "--count=1", "--contains=HEAD", "refs/heads", "refs/remotes", "refs/tags"
        ).strip()
    ):
        raise WorktreeError(
            f"worktree {worktree.name} has a detached HEAD with commits on no branch: put them on one first "
            f"(`git -C {worktree.path} switch -c NAME`)"
        )
    commit = None
    if worktree.changes:
        if not force:
            raise WorktreeError(
                f"worktree {worktree.name} has uncommitted changes: {', '.join(worktree.changes)} (commit them, or "
                "--force to commit them on its branch and remove it)"
            )
        if worktree.branch is None:
            raise WorktreeError(f"worktree {worktree.name} has a detached HEAD: its changes would be on no branch")
        _git(worktree.path, "add", "--all")
        env = {} if _git(worktree.path, "config", "user.email", check=False).strip() else _COMMITTER
        message = f"code-puppy: uncommitted changes of worktree {worktree.name}, saved before removing it"
        _git(worktree.path, "commit", "--quiet", "--no-verify", "-m", message, env=env)
        commit = _git(worktree.path, "rev-parse", "HEAD").strip()
    # Clean now, but for ignored files (build output), which go with the folder.
    with _bookkeeping(repo):
        _git(repo, "worktree", "remove", "--force", str(worktree.path))
    return commit


def commit_all(path: Path, message: str) -> str | None:
    """Commit every change of worktree `path` on its branch as code-puppy (author and committer, whoever the user's
    git names): the commit's id, None when there was nothing to commit."""
    if not _changes(path):
        return None
    _git(path, "add", "--all")
    _git(path, "commit", "--quiet", "--no-verify", "-m", message, env=_COMMITTER)
    return _git(path, "rev-parse", "HEAD").strip()


def diff_stat(path: Path, base: str) -> str:
    """`git diff --shortstat` of `path`'s HEAD against commit `base`: `1 file changed, 1 insertion(+)`, or ''."""
    return _git(path, "diff", "--shortstat", base, "HEAD").strip()


def head(path: Path) -> str:
    """The commit `path`'s HEAD is on."""
    return _git(path, "rev-parse", "HEAD").strip()


def _nested_repositories(path: Path) -> list[str]:
    """The folders under worktree `path` that are git repositories of their own (submodules, a cloned or `git init`ed
    folder), which `git add` would only record as a commit id."""
    found: list[str] = []
    for folder, subfolders, files in os.walk(path):
        here = Path(folder)
        if here != path and (".git" in subfolders or ".git" in files):
            found.append(here.relative_to(path).as_posix())
            subfolders.clear()
            continue
        subfolders[:] = [name for name in subfolders if name != ".git"]
    return sorted(found)


def _changes(path: Path) -> tuple[str, ...]:
    # Without the optional index lock `git status` takes to refresh the index: it would make a `git add` that a fleet
    # run (or the user) runs in that worktree at that moment fail ("index.lock: File exists").
    args = ("status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames")
    status = _git(path, *args, env={"GIT_OPTIONAL_LOCKS": "0"})
    return tuple(record[3:] for record in status.split("\0") if record)


def _exclude(repo: Path) -> None:
    exclude = repo / ".git" / "info" / "exclude"
    current = exclude.read_text(errors="replace") if exclude.is_file() else ""
    if EXCLUDE_LINE not in current.splitlines():
        exclude.parent.mkdir(parents=True, exist_ok=True)
        exclude.write_text(current + ("" if not current or current.endswith("\n") else "\n") + EXCLUDE_LINE + "\n")


@contextmanager
def _bookkeeping(repo: Path) -> Generator[None]:
    """git's record of `repo`'s worktrees (`.git/worktrees/`) changed or read by one code-puppy process at a time:
    `git worktree add` and `list` read every worktree's record and fail on one that another process is making or
    removing at that moment ("failed to read .git/worktrees/NAME/commondir"), as fleet runs finishing and starting in
    one repository do."""
    try:
        lock = (repo / ".git" / "code-puppy-worktrees.lock").open("a")
    except OSError:  # a .git this user cannot write (a shared, read-only one): git says so itself if it must write
        lock = None
    if lock is None:
        yield
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _git(cwd: Path, *args: str, check: bool = True, env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, **(env or {})},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WorktreeError(f"git {args[0]} failed: {exc}") from None
    if check and done.returncode != 0:
        reason = " ".join(done.stderr.split()) or f"exit {done.returncode}"
        raise WorktreeError(f"git {args[0]} failed: {reason}")
    return done.stdout


def _running_sessions(path: Path) -> list[str]:
    """The sessions a live code-puppy process runs in `path`."""
    from code_puppy.paths import store_exists

    if not store_exists():
        return []
    from code_puppy.sessions.runs import RunRegistry
    from code_puppy.sessions.store import open_store

    with open_store() as store:
        return [run.session_id[:8] for run in RunRegistry(store.database).running(project_dir=path)]
