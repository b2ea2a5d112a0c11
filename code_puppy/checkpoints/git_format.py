"""git's formats as the shadow repository writes and reads them, without a git process: a file's entry, an object and
its id, a snapshot's commit, and the records of `git status --porcelain=v2`."""

from __future__ import annotations

import hashlib
import time

Entry = tuple[str, str]
"""A file as git stores it: its mode (`100644`, `100755`, `120000` for a symlink) and its blob id."""
Change = tuple[Entry | None, Entry | None]
"""A path's state before and after (None: it did not exist)."""

FILE_MODES = frozenset({"100644", "100755", "120000"})
"""What a checkpoint restores; gitlinks (nested repositories) are not content."""
NO_OBJECT = "0" * 40
IDENTITY = {
    "GIT_AUTHOR_NAME": "code-puppy",
    "GIT_AUTHOR_EMAIL": "checkpoints@code-puppy.invalid",
    "GIT_COMMITTER_NAME": "code-puppy",
    "GIT_COMMITTER_EMAIL": "checkpoints@code-puppy.invalid",
}


def file_entry(mode: bytes, blob: bytes) -> Entry | None:
    return (mode.decode(), blob.decode()) if mode.decode() in FILE_MODES else None


def git_object(kind: str, content: bytes) -> tuple[str, bytes]:
    """A git object: its id (the SHA-1 of `<kind> <size>\\0<content>`) and those bytes."""
    raw = f"{kind} {len(content)}\0".encode() + content
    return hashlib.sha1(raw, usedforsecurity=False).hexdigest(), raw


def commit_text(tree: str, parent: str | None) -> bytes:
    """A snapshot's commit object, as `git commit-tree` would write it."""
    signature = f"{IDENTITY['GIT_AUTHOR_NAME']} <{IDENTITY['GIT_AUTHOR_EMAIL']}> {int(time.time())} +0000"
    parents = f"parent {parent}\n" if parent is not None else ""
    return f"tree {tree}\n{parents}author {signature}\ncommitter {signature}\n\nsnapshot\n".encode()


def read_status(
    status: bytes,
) -> tuple[dict[str, Entry | None], dict[str, Entry | None], list[str], list[str], list[str]]:
    """What `git status --porcelain=v2 -z --ignored=matching` lists: each tracked path's entry in the latest snapshot
    (HEAD); paths whose index entry is newer than that snapshot and matches the file (a snapshot cut short); paths
    changed or untracked; files ignored; folders ignored as a whole (not snapshotted, so not watched)."""
    previous: dict[str, Entry | None] = {}
    ahead: dict[str, Entry | None] = {}
    changed: list[str] = []
    ignored: list[str] = []
    left_out: list[str] = []
    for record in status.split(b"\0"):
        if not record:
            continue
        kind = record[:1]
        if kind == b"1":  # 1 XY sub mH mI mW hH hI path
            fields = record.split(b" ", 8)
            path = fields[8].decode("utf-8", "surrogateescape")
            previous[path] = file_entry(fields[3], fields[6])
            if fields[1][1:2] == b".":
                ahead[path] = file_entry(fields[4], fields[7])
            else:
                changed.append(path)
        elif kind == b"?":
            changed.append(record[2:].decode("utf-8", "surrogateescape"))
        elif kind == b"!":
            path = record[2:].decode("utf-8", "surrogateescape")
            (left_out if path.endswith("/") else ignored).append(path.rstrip("/"))
    return previous, ahead, changed, ignored, left_out
