"""Project trust: whether code-puppy may use what a project's own files configure.

`trusted_projects.json` in the config directory (`$CODE_PUPPY_HOME` when set) is a JSON list of entries
`{"path": ..., "files": {RELATIVE_PATH: SHA256, ...}, "plugins_sha256": ...}`, written by `code-puppy trust`. Trust is
of content, not of a name: a covered file (`COVERED_FILES`, `COVERED_GLOBS`) that is not the one recorded, because it
changed or appeared since, or the plugins folder with other content, is ignored until the user trusts again, whatever
wrote it (the agent, a `git pull`, another tool).

Entries written before file hashes were recorded are still read: a bare path string, or `{"path", "plugins_sha256"}`.
They keep the project listed and trust its plugins digest, but every covered file present counts as unrecorded, so
it is ignored (with a note) until `code-puppy trust` runs again: an old entry says nothing about today's content.

A worktree of `code-puppy -w` (`REPO/.code-puppy/worktrees/NAME`) without an entry of its own uses its repository's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from code_puppy.paths import config_dir, in_worktrees, write_json

TRUSTED_PROJECTS_FILE = "trusted_projects.json"
PROJECT_CONFIG = ".code-puppy/config.toml"
CHECKPOINT_IGNORE = ".code-puppy/checkpointignore"
"""More paths to leave out of checkpoints, in `.gitignore` syntax: with `*` it would switch them off."""
COVERED_FILES = (PROJECT_CONFIG, ".mcp.json", "mcp.json", CHECKPOINT_IGNORE)
"""Project files whose content trust records (relative to the project root, `/`-separated)."""
COMMAND_GLOBS = (".code-puppy/commands/**/*.md", ".agents/commands/**/*.md", ".claude/commands/**/*.md")
"""A project's file commands: their `!` lines run and their `allowed-tools` grant only as trusted."""
COVERED_GLOBS = (
    ".claude/settings*.json",
    *COMMAND_GLOBS,
    *(f"{layout}/agents/**/*.md" for layout in (".claude", ".code-puppy", ".agents")),
)
"""Patterns of further covered files: other agents' settings, the project's file commands, and file-defined agents
(whose frontmatter `hooks:` run commands), recorded so that a reader of them can rely on trust."""
PluginsTrust = Literal["trusted", "untrusted", "changed"]


@dataclass(frozen=True)
class ProjectTrust:
    """What the user trusted of a project, compared with the project's covered files as they are now."""

    listed: bool
    """Whether the trust file has an entry for the project."""
    hashed: bool
    """Whether that entry recorded file hashes (entries from before they existed did not)."""
    recorded: frozenset[str]
    """Covered files whose hash the entry holds."""
    untrusted_files: frozenset[str]
    """Covered files present now whose content was not recorded: changed, added since, or never hashed."""

    def trusts(self, relative: str) -> bool:
        """Whether the covered file `relative` may be used as it is now."""
        return self.listed and relative not in self.untrusted_files

    def why_not(self, relative: str) -> str:
        """Why `relative` is not trusted, as the start of a one-line note."""
        if not self.listed:
            return "this project is not trusted"
        if not self.hashed:
            return f"{relative} has no recorded hash (the project was trusted by an older code-puppy)"
        if relative not in self.recorded:
            return f"{relative} appeared since you trusted this project"
        return f"{relative} changed since you trusted this project"


UNREADABLE = "unreadable"
"""The hash of a covered file that cannot be read: never recorded, so never equal to a recorded one."""


def project_plugins_dir(project_root: Path) -> Path:
    """The folder of a project's own plugins."""
    return project_root / ".code-puppy" / "plugins"


def project_trust(project_root: Path) -> ProjectTrust:
    """The project's trust; an unreadable or malformed trust file trusts nothing."""
    entry = _entry(project_root)
    if entry is None:
        return ProjectTrust(listed=False, hashed=False, recorded=frozenset(), untrusted_files=frozenset())
    hashes = _hashes(entry)
    untrusted = {name for name, digest in covered_files(project_root).items() if (hashes or {}).get(name) != digest}
    return ProjectTrust(
        listed=True,
        hashed=hashes is not None,
        recorded=frozenset(hashes or {}),
        untrusted_files=frozenset(untrusted),
    )


def trusted_content(project_root: Path, relative: str, content: bytes) -> bool:
    """Whether `content` is what trust recorded for the covered file `relative`: for a reader that applies the bytes
    it read only if so, so that the file cannot change between the check and the use."""
    return (_hashes(_entry(project_root)) or {}).get(relative) == hashlib.sha256(content).hexdigest()


def plugins_trust(project_root: Path, files: Mapping[str, bytes]) -> PluginsTrust:
    """Whether the project's plugins folder, read as `files` (`plugins_files`), is trusted, was trusted with other
    content, or never was."""
    entry = _entry(project_root)
    if not isinstance(entry, dict) or "plugins_sha256" not in entry:
        return "untrusted"
    return "trusted" if entry["plugins_sha256"] == plugins_digest(files) else "changed"


def trust_project(project_root: Path) -> dict[str, Any]:
    """Trust the project's covered files and plugins folder as they are now; returns the entry recorded."""
    root = project_root.resolve()
    entry: dict[str, Any] = {
        "path": str(root),
        "files": {name: digest for name, digest in covered_files(root).items() if digest != UNREADABLE},
        "plugins_sha256": plugins_digest(plugins_files(root)),
    }
    write_json(trust_file(), [*(other for other in _entries() if _path_of(other) != root), entry])
    return entry


def covered_files(project_root: Path) -> dict[str, str]:
    """The SHA-256 of each covered file present in the project, by relative path."""
    candidates = [project_root / name for name in COVERED_FILES]
    candidates += sorted(path for pattern in COVERED_GLOBS for path in project_root.glob(pattern))
    hashes: dict[str, str] = {}
    for path in candidates:
        if path.is_file():
            try:
                hashes[path.relative_to(project_root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                hashes[path.relative_to(project_root).as_posix()] = UNREADABLE
    return hashes


def plugins_files(project_root: Path) -> dict[str, bytes]:
    """The plugins folder's files, each content by `/`-separated relative path, in the digest's order. Bytecode
    caches are left out: plugins are compiled from these bytes (`code_puppy.plugins.hashed`), never from bytecode."""
    folder = project_plugins_dir(project_root)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.relative_to(folder).parts)
    return {file.relative_to(folder).as_posix(): file.read_bytes() for file in files}


def plugins_digest(files: Mapping[str, bytes]) -> str:
    """SHA-256 over the plugins folder's files (`plugins_files`): their relative paths and contents."""
    digest = hashlib.sha256()
    for relative, content in files.items():
        digest.update(relative.encode() + b"\0")
        digest.update(hashlib.sha256(content).digest())
    return digest.hexdigest()


def trust_file() -> Path:
    """Where the trust entries live."""
    return config_dir() / TRUSTED_PROJECTS_FILE


def _entries() -> list[Any]:
    try:
        listed = json.loads(trust_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return listed if isinstance(listed, list) else []  # pyright: ignore[reportUnknownVariableType]


def _hashes(entry: Any) -> dict[str, Any] | None:
    """The file hashes an entry recorded; None for an entry from before they were recorded, or no entry."""
    files: Any = cast(dict[str, Any], entry).get("files") if isinstance(entry, dict) else None
    return cast(dict[str, Any], files) if isinstance(files, dict) else None


def _path_of(entry: Any) -> Path | None:
    path: Any = cast(dict[str, Any], entry).get("path") if isinstance(entry, dict) else entry
    return Path(path).expanduser().resolve() if isinstance(path, str) else None


def _entry(project_root: Path) -> Any:
    """The newest entry naming `project_root`, or else, for a worktree of `code-puppy -w`, its repository's; or None.

    A worktree's covered files are still compared with the hashes recorded for the repository: what is the same
    content is trusted, what differs (a branch that changed the config) is not.
    """
    root = project_root.resolve()
    entries = _entries()
    matching = [entry for entry in entries if _path_of(entry) == root]
    repository = root.parents[2] if len(root.parents) > 2 else root
    if not matching and (root / ".git").is_file() and in_worktrees(repository, root):
        matching = [entry for entry in entries if _path_of(entry) == repository]
    return matching[-1] if matching else None
