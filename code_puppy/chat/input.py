"""What the chat's input line knows: `/command` and `@path` completion, `@path` expansion, per-project history."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from code_puppy.mentions import expand_mentions

__all__ = ["ChatCompleter", "ProjectFiles", "expand_mentions", "history_path", "private_history"]

_SKIPPED_DIRS = frozenset(
    {".git", ".hg", ".svn", "node_modules", ".venv", "venv", "__pycache__", ".mypy_cache", ".pytest_cache"}
    | {".ruff_cache", ".tox", "dist", "build", ".idea", ".code-puppy"}
)
_MAX_LISTED = 20_000
_AT_WORD = re.compile(r"(?:^|(?<=\s))@([^\s@]*)$")


def history_path(data_dir: Path, project_root: Path) -> Path:
    """The prompt-history file of one project, inside the data directory."""
    digest = hashlib.sha256(str(project_root.resolve()).encode()).hexdigest()[:16]
    return data_dir / "history" / f"{project_root.name or 'root'}-{digest}.txt"


def private_history(data_dir: Path, project_root: Path) -> Path:
    """The project's prompt-history file, created 0600 in 0700 folders; one an older code-puppy (or a loose umask)
    left readable to others is closed, as sessions.db is: it holds everything the user typed.

    Raises:
        OSError: The data directory cannot be created.
    """
    path = history_path(data_dir, project_root)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    for item, private in ((path.parent, 0o700), (path, 0o600)):
        with contextlib.suppress(OSError):  # not the user's to change: the history is still read and written
            if item.stat().st_mode & 0o077:
                item.chmod(private)
    return path


class ProjectFiles:
    """The project's file and directory paths (relative, `/`-separated), listed at most every few seconds."""

    def __init__(self, root: Path, *, ttl: float = 5.0) -> None:
        self.root = root
        self._ttl = ttl
        self._listed_at = -ttl
        self._paths: list[str] = []

    def paths(self) -> list[str]:
        if time.monotonic() - self._listed_at > self._ttl:
            self._paths = list(self._walk())
            self._listed_at = time.monotonic()
        return self._paths

    def _walk(self) -> Iterator[str]:
        count = 0
        for directory, dirs, files in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
            relative = Path(directory).relative_to(self.root).as_posix()
            prefix = "" if relative == "." else relative + "/"
            for name in [*(d + "/" for d in dirs), *sorted(files)]:
                yield prefix + name
                count += 1
                if count >= _MAX_LISTED:
                    return


class ChatCompleter(Completer):
    """Slash commands at the start of the line, project paths after `@`."""

    def __init__(
        self,
        files: ProjectFiles,
        command_names: Callable[[], Iterable[str]],
        describe: Callable[[str], str] | None = None,
    ) -> None:
        self._files = files
        self._command_names = command_names
        self._describe = describe
        """A command's one-line help, shown beside it in the menu."""

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterator[Completion]:
        before = document.text_before_cursor
        if before.startswith("/") and " " not in before and "\n" not in before:
            for name in self._command_names():
                if name.startswith(before[1:]):
                    meta = self._describe(name) if self._describe is not None else None
                    yield Completion("/" + name, start_position=-len(before), display_meta=meta)
            return
        match = _AT_WORD.search(before)
        if match is None:
            return
        typed = match.group(1).lower()
        paths = self._files.paths()
        starts = [path for path in paths if path.lower().startswith(typed)]
        contains = [path for path in paths if typed in path.lower() and not path.lower().startswith(typed)]
        for path in [*starts, *contains][:50]:
            yield Completion("@" + path, start_position=-len(match.group(0)), display=path)
