"""A trusted project's plugins are imported from the very bytes trust hashed, compiled here.

Python's own loader would run a `__pycache__/*.pyc` beside the source (an unchecked-hash one without even looking at
the source), read each file again after the trust check, and write bytecode into the project. None of that here: a
module of the plugins folder, the plugin itself or one its package imports from the folder, is compiled from the
bytes read for the digest, and a file the digest did not cover (under a symlinked folder, or one that appeared since)
cannot be imported from it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path, PurePosixPath
from types import CodeType


class HashedSource(importlib.abc.SourceLoader):
    """Loads one module from source bytes already read: no bytecode is read or written."""

    def __init__(self, path: str, source: bytes) -> None:
        self.path = path
        self.source = source

    def get_filename(self, fullname: str) -> str:
        return self.path

    def get_data(self, path: str) -> bytes:
        if path != self.path:
            raise OSError(f"{path} is not this module's source")
        return self.source

    def get_code(self, fullname: str) -> CodeType:
        return self.source_to_code(self.source, self.path)


@dataclass(frozen=True)
class HashedFolder:
    """A trusted plugins folder as the digest read it."""

    folder: Path
    files: Mapping[str, bytes]
    """Each file's content by `/`-separated path relative to `folder`."""

    def install(self) -> None:
        """Serve imports from the folder (a package plugin's own modules, whenever they load) from `files`."""
        if _path_hook not in sys.path_hooks:
            sys.path_hooks.insert(0, _path_hook)
        _installed[self.folder] = self
        for entry in [entry for entry in sys.path_importer_cache if _relative(self.folder, entry) is not None]:
            del sys.path_importer_cache[entry]  # a finder made before, with other bytes or none of ours

    def spec(self, fullname: str, relative: str) -> ModuleSpec:
        """The spec of module `fullname` from the file `relative` (`NAME.py` or `NAME/__init__.py`)."""
        source = self.files.get(relative)
        if source is None:
            raise ImportError(
                f"{relative} is not among the files trust hashed (trust does not look inside a symlinked folder)",
                name=fullname,
            )
        path = self.folder / relative
        spec = importlib.util.spec_from_file_location(
            fullname,
            path,
            loader=HashedSource(str(path), source),
            submodule_search_locations=[str(path.parent)] if path.name == "__init__.py" else None,
        )
        assert spec is not None  # always, given a loader
        return spec


@dataclass(frozen=True)
class _Entry:
    """The finder of one import path entry inside a hashed folder."""

    hashed: HashedFolder
    directory: PurePosixPath

    def find_spec(self, fullname: str, target: object = None) -> ModuleSpec | None:
        name = fullname.rpartition(".")[2]
        for relative in (self.directory / name / "__init__.py", self.directory / f"{name}.py"):
            if relative.as_posix() in self.hashed.files:
                return self.hashed.spec(fullname, relative.as_posix())
        return None


_installed: dict[Path, HashedFolder] = {}


def _path_hook(entry: str) -> _Entry:
    for hashed in _installed.values():
        if (directory := _relative(hashed.folder, entry)) is not None:
            return _Entry(hashed, directory)
    raise ImportError("not a trusted plugins folder")  # the next hook (Python's FileFinder) takes the entry


def _relative(folder: Path, entry: str) -> PurePosixPath | None:
    """Where the import path entry `entry` lies in `folder`, or None outside it; compared as written, never resolved,
    so that no symlink leads out of what was hashed."""
    path = Path(entry)
    return PurePosixPath(path.relative_to(folder).as_posix()) if path.is_relative_to(folder) else None
