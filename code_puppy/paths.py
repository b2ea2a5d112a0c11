"""Where code-puppy keeps things (DESIGN §3 "Locations"), and how it writes its own small files there, without
importing pydantic: the chat needs them before its prompt shows, and `code_puppy.config` re-exports them."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path
from typing import Any, cast

from code_puppy.errors import ConfigError


def code_puppy_home() -> Path | None:
    """The `CODE_PUPPY_HOME` root, when set."""
    home = os.environ.get("CODE_PUPPY_HOME")
    return Path(home).expanduser() if home else None


def config_dir() -> Path:
    """Where config.toml and user plugins live."""
    if home := code_puppy_home():
        return home
    import platformdirs

    return Path(platformdirs.user_config_dir("code-puppy"))


def data_dir() -> Path:
    """Where sessions.db and prompt history live."""
    if home := code_puppy_home():
        return home
    import platformdirs

    return Path(platformdirs.user_data_dir("code-puppy"))


def sessions_db() -> Path:
    """The sessions database: every session, its journal, checkpoints, costs and running runs."""
    return data_dir() / "sessions.db"


STORAGE_URL_VARIABLE = "CODE_PUPPY_STORAGE_URL"
"""Puts the store on PostgreSQL, as `[storage] url` of the user's config.toml does (the variable wins)."""


def storage_url() -> str | None:
    """The PostgreSQL url of the store (`CODE_PUPPY_STORAGE_URL`, else `[storage] url` of the user's config.toml,
    never a project's: a repository must not send the user's sessions elsewhere); None: the SQLite file.

    Raises:
        ConfigError: The user's config.toml cannot be read, or its url is not a PostgreSQL one.
    """
    url: object = os.environ.get(STORAGE_URL_VARIABLE) or None
    where = STORAGE_URL_VARIABLE
    if url is None:
        import tomllib

        user_file = config_dir() / "config.toml"
        if not user_file.is_file():
            return None
        try:
            data = tomllib.loads(user_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{user_file}: {exc}") from None
        storage: object = data.get("storage")
        url = cast(dict[str, object], storage).get("url") if isinstance(storage, dict) else None
        where = f"[storage] url in {user_file}"
        if url is None:
            return None
    if not isinstance(url, str) or not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(f"{where} must be a url postgresql://USER[:PASSWORD]@HOST:PORT/DB")
    return url


def store_location() -> Path | str:
    """Where the sessions store is: the PostgreSQL url of `storage_url`, else `sessions_db()`."""
    return storage_url() or sessions_db()


def store_exists() -> bool:
    """Whether there is a store to read: a configured PostgreSQL one always is (reaching it is another matter)."""
    location = store_location()
    return isinstance(location, str) or location.exists()


AGENT_CONFIG_DIRS = frozenset({".code-puppy", ".claude", ".agents"})
"""Folders whose whole content configures code-puppy or another agent: protected from the agent's writes."""
AGENT_CONFIG_FILES = frozenset({".mcp.json", "mcp.json", ".git"})
"""Files that configure one (a `.git` file names the repository, hooks and config included, that git uses)."""
GIT_CONFIG = frozenset({"hooks", "config"})
"""What in a `.git` folder runs code: hooks, and config (`core.fsmonitor`, `core.pager`, aliases, filters)."""

WORKTREES_DIR = ".code-puppy/worktrees"
"""Where `code-puppy -w NAME` puts a repository's worktrees: each is a project of its own, none part of the main one."""


def in_worktrees(project_root: Path, target: Path) -> bool:
    """Whether `target` lies in one of the project's worktrees (`.code-puppy/worktrees/NAME/...`), which belong to
    other agents' checkouts, not to the project."""
    return (project_root / WORKTREES_DIR) in target.parents


def find_project_root(start: Path) -> Path:
    """The nearest ancestor holding `.git` or `.code-puppy`, else `start` itself."""
    start = start.resolve()
    for directory in (start, *start.parents):
        if (directory / ".git").exists() or (directory / ".code-puppy").is_dir():
            return directory
    return start


def write_json(path: Path, data: Any) -> None:
    """Replace `path` with `data` as JSON atomically, private to the user (0600, its folder created 0700)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomically(path, json.dumps(data, indent=1) + "\n", private=True)


def write_atomically(path: Path, text: str, *, private: bool = False) -> None:
    """Replace `path` with `text` atomically: a crash leaves the old or the new file, never half of one. The file is
    made 0600 when `private`, else as a plain write makes it (0666 less the umask).

    Raises:
        OSError: The folder is missing or not writable, or the disk is full; nothing is left behind.
    """
    while True:
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o666)
        except FileExistsError:
            continue
        break
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    # The rename itself survives a power cut only once the folder is synced; a folder this process may write but not
    # read (rare) keeps the file written, with the durability the filesystem gives it.
    with contextlib.suppress(OSError):
        directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
