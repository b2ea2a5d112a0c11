"""`ShadowRepo`: snapshots of one project's files in a git repository of code-puppy's own, driven by the `git` CLI.

The repository lives in the data directory (`checkpoints/<hash of the root>/`), with its own `GIT_DIR` and index, so
the project's `.git` is never read or changed and projects that are not git repositories work too. The user's git
configuration and attributes are shut out (`GIT_CONFIG_GLOBAL=/dev/null`, `GIT_CONFIG_NOSYSTEM=1`, `info/attributes`
of `* -text -filter -diff`): CRLF conversion or an LFS filter would otherwise store something other than the bytes.

A snapshot is one `git status` walk (the persistent index, split so that each write is small, is the stat cache); when
it lists changes, the changed files are stored and put into the index, `git write-tree`, and a commit of the tree, so
every snapshot stays reachable (`gc.auto=0` besides, and nothing is ever pruned). Directories `.gitignore` ignores as
a whole (`node_modules/`) are left out; smaller ignored files (`.env`) are kept, unless `.code-puppy/checkpointignore`
names them (only while the user trusts its content: `code_puppy.trust`); files over `max_file_mb` are skipped and
listed. git stores a symlink as a link, never what it points to.

On Linux a folder watcher (`watch.py`) can prove that nothing a snapshot covers changed since its walk began: the
snapshot before a tool call is then the latest one (`unchanged`), with no walk. The snapshot after a call always walks.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import threading
import time
import zlib
from collections.abc import Generator, Iterable, Mapping
from pathlib import Path
from stat import S_ISDIR, S_ISLNK, S_ISREG, S_IXUSR

from code_puppy.checkpoints.git_format import (
    FILE_MODES,
    IDENTITY,
    NO_OBJECT,
    Change,
    Entry,
    commit_text,
    git_object,
    read_status,
)
from code_puppy.checkpoints.ignores import FileStat, covered, ignore_files, write_excludes
from code_puppy.checkpoints.watch import Watcher
from code_puppy.paths import WORKTREES_DIR

LOCK_WAIT = 30.0
"""Seconds to wait for another process's snapshot or rewind before reporting it."""
BULK_PATHS = 64
"""A snapshot adding more files than this writes their contents straight into one pack (git's bulk check-in), not
one loose object each: the first, full scan of a big project needs no packing afterwards."""
_SETTINGS = (
    ("core.bare", "false"),
    ("gc.auto", "0"),
    ("core.autocrlf", "false"),
    # The index of 10,000 files is ~0.9 MB, rewritten by every update-index and write-tree: split, each writes only
    # its changes, the rest stays in a shared file (the old one deleted at once when it is rewritten).
    ("core.splitIndex", "true"),
    ("splitIndex.sharedIndexExpire", "now"),
    ("index.version", "4"),
)


class CheckpointError(Exception):
    """The shadow repository cannot be used (git failed, another process holds it too long); one line."""


def shadow_directory(root: Path, data: Path) -> Path:
    """Where the shadow repository of project `root` is kept, under data directory `data`."""
    return data / "checkpoints" / hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]


class ShadowRepo:
    """The shadow repository of the project at `root`; see the module docstring."""

    def __init__(self, root: Path, directory: Path, *, git: str, max_file_bytes: int) -> None:
        self.root = root
        self.directory = directory
        self.max_file_bytes = max_file_bytes
        self.skipped: set[str] = set()
        """Files left out of the last snapshot for their size (project-relative)."""
        self._git = git
        self._thread_lock = threading.Lock()
        self._trees: dict[str, str] = {}
        """The tree of each snapshot commit seen, so that a snapshot finding nothing changed costs one `git status`."""
        self._taken: tuple[str, str, dict[str, Change]] | None = None
        """The latest snapshot of this object: the tree before it, its tree, and what changed in between."""
        self._last: str | None = None
        self._signature: tuple[int, int, int] | None = None
        """The latest snapshot's tree, and its index file as this object left it (None: a snapshot failed halfway)."""
        self.walks = 0
        """`git status` walks taken by this object."""
        self._watcher: Watcher | None = None
        self._watching = True
        """False once the watcher could not start or failed: every snapshot walks, for the rest of the process."""
        self._clean: tuple[str, int, tuple[FileStat, ...]] | None = None
        """The latest whole snapshot's tree, the watcher's count of events before its walk began, and the ignore files
        a watch may not see then (`_ignore_files`; None: it cannot be reused, `unchanged`)."""
        self._env = {
            **{name: value for name, value in os.environ.items() if not name.startswith("GIT_")},
            **IDENTITY,
            "GIT_DIR": str(directory),
            "GIT_WORK_TREE": str(root),
            "GIT_INDEX_FILE": str(directory / "code-puppy-index"),
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_OPTIONAL_LOCKS": "1",
            "LC_ALL": "C",
        }

    @classmethod
    def open(cls, root: Path, data: Path, *, max_file_mb: float) -> ShadowRepo:
        """The shadow repository of `root` under `data` (`shadow_directory`), created on first use; a
        `CheckpointError` when git is missing or the repository cannot be created."""
        git = shutil.which("git")
        if git is None:
            raise CheckpointError("git is not installed")
        root = root.resolve()
        repo = cls(root, shadow_directory(root, data), git=git, max_file_bytes=int(max_file_mb * 1024 * 1024))
        if not repo._ready():
            # Another process may be creating it right now: look again under the lock it holds while it does.
            repo.directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with repo.lock():
                if not (repo.directory / "HEAD").is_file():
                    repo._create()
                elif not repo._ready():
                    repo._configure()  # made by an earlier version
        return repo

    def _ready(self) -> bool:
        config = self.directory / "config"
        return (self.directory / "HEAD").is_file() and config.is_file() and "splitIndex" in config.read_text("latin-1")

    def _configure(self) -> None:
        for key, value in _SETTINGS:
            self.git("config", key, value)

    def _create(self) -> None:
        """Make the repository; the caller holds `lock()`."""
        self.git("init", "--quiet", "--bare", str(self.directory), worktree=False)
        self._configure()
        info = self.directory / "info"
        info.mkdir(exist_ok=True)
        (info / "attributes").write_text("* -text -filter -diff\n")
        (self.directory / "project").write_text(f"{self.root}\n")
        (self.directory / "HEAD").write_text("ref: refs/heads/snapshots\n")

    @contextlib.contextmanager
    def lock(self) -> Generator[None]:
        """Hold the repository for a snapshot or a rewind: against other threads, and (flock) other processes; a
        `CheckpointError` when another process held it for `LOCK_WAIT` seconds."""
        with self._thread_lock:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            descriptor = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                deadline = time.monotonic() + LOCK_WAIT
                while True:
                    try:
                        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            raise CheckpointError(
                                f"another code-puppy process has held the checkpoints of {self.root} for "
                                f"{LOCK_WAIT:g} s; try again"
                            ) from None
                        time.sleep(0.05)
                yield
            finally:
                os.close(descriptor)  # releases the flock

    def git(self, *args: str, input: bytes | None = None, worktree: bool = True, config: str | None = None) -> bytes:
        """Run git on the shadow repository (with `config`, a `name=value` for this command only); its stdout.

        Raises:
            CheckpointError: git failed (its first line of stderr).
        """
        env = self._env if worktree else {k: v for k, v in self._env.items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
        done = subprocess.run(
            [self._git, *(("-c", config) if config else ()), *args],
            input=input,
            capture_output=True,
            env=env,
            cwd=self.root if worktree else None,
        )
        if done.returncode != 0:
            reason = (done.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[0]
            raise CheckpointError(f"git {args[0]} failed in the checkpoints of {self.root}: {reason}")
        return done.stdout

    def snapshot(self) -> str:
        """Record the project's files as they are now; the id of the tree that holds them."""
        with self.lock():
            return self.snapshot_held()

    def snapshot_held(self) -> str:
        """`snapshot`, by a caller that holds `lock()` already.

        The files `git status` lists are the only ones that can differ from the latest snapshot (the index is its stat
        cache): a few are hashed and written here, each as the bytes read once, and go into the index with their ids
        (`--index-info`), so what they changed since the latest snapshot is known without asking git again (`changes`).
        Many (the first scan) are left to git, which writes them straight into a pack. The snapshot's commit is written
        here too: the ref makes every snapshot reachable, and its tree is what `git status` compares the index to.
        """
        # Whoever held the lock before died mid-snapshot (kill -9): git's own lock file of the index is left behind,
        # and would fail every snapshot from now on. Under our lock, no other git of ours can be using it.
        (self.directory / "code-puppy-index.lock").unlink(missing_ok=True)
        self._signature = self._clean = None  # until this snapshot is whole
        checkpoint_ignore = write_excludes(self.root, self.directory)
        # Before the walk: what changed from now on raises an event the next `unchanged` reads.
        token = self._watcher.token() if self._watcher is not None else None
        outside = ignore_files(self.root)
        self.walks += 1
        status = self.git(
            "status", "--porcelain=v2", "-z", "--untracked-files=all", "--ignored=matching", "--no-renames",
            "--ignore-submodules=all",
        )  # fmt: skip
        previous, ahead, changed, ignored, left_out = read_status(status)
        if ignored and checkpoint_ignore:
            excluded = self._checkpoint_ignored()
            ignored = [path for path in ignored if not covered(path, excluded)]
        self.skipped = {path for path in self.skipped if (self.root / path).is_file()}
        paths: list[str] = []
        for path in [*changed, *ignored]:
            try:
                stat = os.lstat(self.root / path)
            except OSError:
                paths.append(path)  # gone: the index drops it
                continue
            if stat.st_size > self.max_file_bytes and not os.path.islink(self.root / path):
                self.skipped.add(path)
                continue
            self.skipped.discard(path)
            paths.append(path)
        head = self._head()
        if not paths and not ahead and head is not None:
            self._taken = (head[1], head[1], {})
            return self._watch(self._commit(head[1], head), token, outside, left_out)
        found: dict[str, Entry | None] | None = None
        if len(paths) > BULK_PATHS:
            listing = b"".join(os.fsencode(path) + b"\0" for path in paths)
            self.git(
                "update-index", "--add", "--remove", "-z", "--stdin", input=listing, config="core.bigFileThreshold=1"
            )
        elif paths:
            found = self._store_files(paths, previous)
        tree = self.git("write-tree").decode().strip()
        changes: dict[str, Change] = {}
        if found is not None and head is not None:
            for path, new in [*found.items(), *ahead.items()]:
                if previous.get(path) != new:
                    changes[path] = (previous.get(path), new)
        self._taken = (head[1], tree, changes) if found is not None and head is not None else None
        return self._watch(self._commit(tree, head), token, outside, left_out)

    def _watch(self, tree: str, token: int | None, outside: tuple[FileStat, ...], left_out: list[str]) -> str:
        """After a whole snapshot: `tree` can be reused while nothing changes (`token`, when the watcher covered all
        the walk did); the watches follow the folders left out (started at the first snapshot)."""
        if not self._watching:
            return tree
        skip = [*left_out, WORKTREES_DIR.rstrip("/")]
        if self._watcher is None:
            self._watcher = Watcher.start(self.root, skip)
            self._watching = self._watcher is not None
            return tree  # watched since after the walk only: the next walk is the first one known
        if not self._watcher.healthy:
            self._watcher, self._watching = None, False
            return tree
        if self._watcher.needs_sync(skip):
            self._watcher.sync(skip)  # a folder the walk covered may have been unwatched during it
        elif token is not None:
            self._clean = (tree, token, outside)
        return tree

    def unchanged(self) -> str | None:
        """The latest snapshot's tree, when it is known to still hold without a walk: the folder watcher saw nothing
        change in the project since the walk of that snapshot began (and it was a whole snapshot of this object,
        nobody else changed the shadow repository since, and the ignore files are as they were). None: take
        a `snapshot`."""
        with self.lock():
            clean, watcher = self._clean, self._watcher
            if clean is None or watcher is None or clean[0] != self._last or self._signature is None:
                return None
            head = self._head()
            if head is None or head[1] != clean[0] or self._index_signature() != self._signature:
                return None
            if ignore_files(self.root) != clean[2] or not watcher.clean(clean[1]):
                self._clean = None
                return None
            return clean[0]

    def close(self) -> None:
        """Stop watching the project's folders (the repository can still be used, each snapshot a walk)."""
        with self._thread_lock:
            if self._watcher is not None:
                self._watcher.close()
            self._watcher, self._watching, self._clean = None, False, None

    def snapshot_files(self, paths: Iterable[str]) -> str | None:
        """A snapshot that looks at `paths` (project-relative) only, after a call that can change nothing else (a file
        editor): no `git status` walk. None when only a full `snapshot` will do: a path the latest snapshot does not
        hold (a new file: only `git status` knows whether it is ignored), or an index changed since this object's
        latest snapshot (by another process, or a snapshot that failed halfway)."""
        with self.lock():
            head = self._head()
            if head is None or head[1] != self._last or self._signature is None:
                return None
            if self._index_signature() != self._signature:
                return None
            wanted = sorted(set(paths))
            previous = self.entries(head[1], wanted)
            if not wanted or any(entry is None for entry in previous.values()):
                return None
            self._signature = None  # until this snapshot is whole
            kept: list[str] = []
            for path in wanted:
                with contextlib.suppress(OSError):
                    if os.lstat(self.root / path).st_size > self.max_file_bytes and not (self.root / path).is_symlink():
                        self.skipped.add(path)
                        continue
                self.skipped.discard(path)
                kept.append(path)
            found = self._store_files(kept, previous, index_all=False)
            changed = any(found[path] != previous[path] for path in found)
            tree = self.git("write-tree").decode().strip() if changed else head[1]
            self._taken = (
                head[1],
                tree,
                {path: (previous[path], new) for path, new in found.items() if new != previous[path]},
            )
            return self._commit(tree, head)

    def _commit(self, tree: str, head: tuple[str, str] | None) -> str:
        """Make `tree` the latest snapshot (unless it is already), with a commit of it on the latest; `tree`."""
        if head is None or head[1] != tree:
            commit, raw = git_object("commit", commit_text(tree, head[0] if head is not None else None))
            self._store(commit, raw)
            # What `git update-ref HEAD` does, without its process: under the lock, a ref is one file replaced whole.
            ref = self.directory / "refs" / "heads" / "snapshots"
            ref.parent.mkdir(parents=True, exist_ok=True)
            temporary = ref.with_name(".snapshots.new")
            temporary.write_text(commit + "\n")
            os.replace(temporary, ref)
            self._trees[commit] = tree
        self._last, self._signature = tree, self._index_signature()
        return tree

    def _index_signature(self) -> tuple[int, int, int] | None:
        """What tells whether the index file was rewritten since (git replaces it whole, by a rename)."""
        try:
            stat = os.stat(self.directory / "code-puppy-index")
        except OSError:
            return None
        return stat.st_ino, stat.st_mtime_ns, stat.st_size

    def _store_files(
        self, paths: Iterable[str], latest: Mapping[str, Entry | None], *, index_all: bool = True
    ) -> dict[str, Entry | None]:
        """Store each file's content as a blob (unless the latest snapshot has it: `latest`, each path's entry in it)
        and put it in the index, or take it out (gone); each one's new entry. `index_all=False`: only the paths that
        differ from `latest` go into the index (when the index is known to hold `latest`).

        A folder where a file was takes the file out; any other folder (a nested repository) is left alone.

        Raises:
            CheckpointError: A file cannot be read, or git failed.
        """
        found: dict[str, Entry | None] = {}
        for path in paths:
            location = self.root / path
            try:
                stat = os.lstat(location)
                if S_ISLNK(stat.st_mode):
                    mode, content = "120000", os.fsencode(os.readlink(location))
                elif S_ISREG(stat.st_mode):
                    mode, content = ("100755" if stat.st_mode & S_IXUSR else "100644"), location.read_bytes()
                elif S_ISDIR(stat.st_mode) and latest.get(path) is None:
                    continue
                else:
                    found[path] = None
                    continue
            except (FileNotFoundError, NotADirectoryError):  # gone, or a file where its folder was
                found[path] = None
                continue
            except OSError as exc:
                raise CheckpointError(f"cannot snapshot {path}: {exc.strerror}") from None
            name, raw = git_object("blob", content)
            if latest.get(path) != (mode, name):
                self._store(name, raw)
            found[path] = (mode, name)
        listed = [path for path in found if index_all or found[path] != latest.get(path)]
        gone = [f"0 {NO_OBJECT}\t{path}" for path in listed if found[path] is None]
        kept = [f"{entry[0]} {entry[1]}\t{path}" for path in listed if (entry := found[path]) is not None]
        listing = b"".join(os.fsencode(line) + b"\0" for line in [*gone, *kept])
        if listing:
            self.git("update-index", "--add", "--replace", "-z", "--index-info", input=listing)
        return found

    def _store(self, name: str, raw: bytes) -> None:
        """Write an object (`_object`) loose, as git does: deflated, in a file named by its id, made whole by a
        rename."""
        folder = self.directory / "objects" / name[:2]
        target = folder / name[2:]
        if not target.exists():  # also packed: a loose copy is harmless, and packing drops it
            folder.mkdir(exist_ok=True)
            temporary = folder / f"tmp_obj_{os.getpid()}_{threading.get_ident()}"
            temporary.write_bytes(zlib.compress(raw))
            temporary.chmod(0o444)
            os.replace(temporary, target)

    def maintain(self) -> None:
        """Pack what the last turn wrote (a blob per file changed, a tree per folder on its path, per snapshot): packed,
        each version of a tree is stored as a delta of the one before. A geometric roll-up: the new objects join the
        small packs of the turns before, and a pack is merged into a bigger one only once it is half its size, so each
        turn's packing stays cheap and the packs stay few. Every object of the packs rolled up is kept, reachable or
        not: nothing is ever pruned or lost."""
        with self.lock():
            counted = self.git("count-objects").decode().split()
            if counted and int(counted[0]) > 0:
                self.git("repack", "-d", "-q", "--geometric=2")

    def _head(self) -> tuple[str, str] | None:
        """The latest snapshot's commit and tree, or None before the first (the ref file read directly: gc is off, so
        refs are never packed)."""
        ref = self.directory / "refs" / "heads" / "snapshots"
        commit = ref.read_text().strip() if ref.is_file() else None
        if commit is None:
            return None
        if commit not in self._trees:
            self._trees[commit] = self.git("rev-parse", f"{commit}^{{tree}}").decode().strip()
        return commit, self._trees[commit]

    def _checkpoint_ignored(self) -> list[str]:
        """The untracked paths `info/exclude` names (directories with a trailing `/`): what the checkpointignore said
        when it was checked, not what it says now."""
        exclude = self.directory / "info" / "exclude"
        listed = self.git("ls-files", "-z", "--others", "--ignored", "--directory", f"--exclude-from={exclude}")
        return [item.decode("utf-8", "surrogateescape") for item in listed.split(b"\0") if item]

    def changes(self, before: str, after: str) -> dict[str, Change]:
        """The files that differ between two snapshots, each with its entry in both: known without git when `after`
        is the latest snapshot and `before` the one before it."""
        if before == after:
            return {}
        taken = self._taken
        if taken is not None and taken[0] == before and taken[1] == after:
            return dict(taken[2])
        diff = self.git("diff-tree", "-r", "-z", "--no-renames", before, after)
        fields = diff.split(b"\0")
        found: dict[str, Change] = {}
        for header, path in zip(fields[0::2], fields[1::2], strict=False):
            if not header.startswith(b":"):
                continue
            old_mode, new_mode, old_blob, new_blob, _ = header[1:].decode().split(" ")
            old = (old_mode, old_blob) if old_mode in FILE_MODES else None
            new = (new_mode, new_blob) if new_mode in FILE_MODES else None
            if old != new:
                found[path.decode("utf-8", "surrogateescape")] = (old, new)
        return found

    def entries(self, tree: str, paths: Iterable[str]) -> dict[str, Entry | None]:
        """Each path's entry in `tree` (None where it has none)."""
        wanted = list(paths)
        found: dict[str, Entry | None] = dict.fromkeys(wanted)
        if not wanted:
            return found
        listing = self.git("ls-tree", "-z", "--full-tree", tree, "--", *[f":(literal){path}" for path in wanted])
        for item in listing.split(b"\0"):
            if not item:
                continue
            header, _, path = item.partition(b"\t")
            mode, _, blob = header.decode().split(" ")
            if mode in FILE_MODES:
                found[path.decode("utf-8", "surrogateescape")] = (mode, blob)
        return found

    def read_blobs(self, blobs: Iterable[str]) -> dict[str, bytes]:
        """The content of each blob, all read before the caller changes anything."""
        wanted = sorted(set(blobs))
        if not wanted:
            return {}
        output = self.git("cat-file", "--batch", input="".join(f"{blob}\n" for blob in wanted).encode())
        contents: dict[str, bytes] = {}
        position = 0
        for blob in wanted:
            newline = output.index(b"\n", position)
            header = output[position:newline].decode().split(" ")
            if len(header) != 3:
                raise CheckpointError(f"the checkpoints of {self.root} lack the content {blob} (missing object)")
            size = int(header[2])
            contents[blob] = output[newline + 1 : newline + 1 + size]
            position = newline + 1 + size + 1
        return contents

    def size(self) -> int:
        """Bytes the repository takes on disk."""
        return sum(file.stat().st_size for file in self.directory.rglob("*") if file.is_file())
