"""code-puppy uses only the public surfaces of pydantic-ai and the harness (issue 11): no module or name whose dotted
path has a segment starting with `_`, at any depth of any module of `code_puppy/` and the bundled plugins; and no
subclass of one of their classes reaches a private member of it (issue 24), but for the one documented allowance."""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from pathlib import Path

import pytest
from pydantic_ai.toolsets import FunctionToolset

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = frozenset({"pydantic_ai", "pydantic_ai_harness"})
PRIVATE_MEMBERS_ALLOWED = {"code_puppy.workspace.project_files.ProjectFileSystemToolset"}
"""The harness offers no public hook for reading a file or making a folder, so `ProjectFileSystemToolset` overrides
its private entry points and reads its path resolution, header and budget; its module's docstring says which."""


def private_imports(source: str) -> list[str]:
    """The dotted paths `source` imports from the libraries through a private segment (dunders are public)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            paths = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            paths = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [
            path
            for path in paths
            if path.split(".")[0] in LIBRARIES
            and any(part.startswith("_") and not part.endswith("__") for part in path.split("."))
        ]
    return found


def test_code_puppy_imports_no_private_module_of_the_libraries() -> None:
    modules = sorted([*(ROOT / "code_puppy").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")])
    assert len(modules) > 50  # the walk reads the package, not an empty folder
    offenders = [
        f"{path.relative_to(ROOT)}: {imported}" for path in modules for imported in private_imports(path.read_text())
    ]
    assert offenders == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from pydantic_ai._run_context import RunContext", ["pydantic_ai._run_context.RunContext"]),
        ("import pydantic_ai_harness.coder._instructions", ["pydantic_ai_harness.coder._instructions"]),
        ("from pydantic_ai_harness.compaction import _shared", ["pydantic_ai_harness.compaction._shared"]),
        ("def lazy():\n    from pydantic_ai.toolsets._dynamic import X", ["pydantic_ai.toolsets._dynamic.X"]),
        ("from pydantic_ai.toolsets import CombinedToolset, _internal", ["pydantic_ai.toolsets._internal"]),
        ("from pydantic_ai.toolsets import CombinedToolset", []),
        ("from pydantic_ai import __version__", []),
        ("from pydantic._internal import _config", []),  # another library's business
        ("from ._private import x", []),  # our own relative import
    ],
)
def test_private_imports_are_found_wherever_they_are(source: str, found: list[str]) -> None:
    assert private_imports(source) == found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


def _library_class(cls: type) -> bool:
    return cls.__module__.split(".")[0] in LIBRARIES


def private_members_used(cls: type) -> list[str]:
    """The private members of its pydantic-ai or harness base classes that `cls` reads, writes or overrides: a private
    name reached through `self`, `cls` or `super()` (or a private method defined) that a library base defines, or that
    no class of ours in its MRO defines (one the library's `__init__` sets)."""
    library = [base for base in cls.__mro__ if _library_class(base)]
    if not library:
        return []
    ours = [base for base in cls.__mro__ if not _library_class(base) and base.__module__ != "builtins"]
    defined: set[str] = set()
    for base in ours:
        defined |= set(vars(base)) | set(vars(base).get("__annotations__", {}))
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(base)))):
            stored = isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
            if stored and isinstance(node.value, ast.Name) and node.value.id == "self":
                defined.add(node.attr)
    used: set[str] = set()
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(cls)))):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id in ("self", "cls")) or (
                isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super"
            ):
                used.add(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _private(node.name):
            used.add(node.name)
    in_library = set().union(*(vars(base) for base in library))
    return sorted(name for name in used if name in in_library or name not in defined)


def library_subclasses() -> list[type]:
    """Every class of `code_puppy/` with a pydantic-ai or harness class among its bases."""
    found: list[type] = []
    for path in sorted((ROOT / "code_puppy").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        if module.endswith("__main__"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                cls = getattr(importlib.import_module(module), node.name, None)
                if inspect.isclass(cls) and cls.__module__ == module and any(map(_library_class, cls.__mro__)):
                    found.append(cls)
    return found


def test_no_subclass_of_a_library_class_uses_its_private_members_but_the_documented_one() -> None:
    classes = library_subclasses()
    assert len(classes) > 10  # the capabilities and toolsets are found
    offenders = {f"{cls.__module__}.{cls.__qualname__}": used for cls in classes if (used := private_members_used(cls))}
    assert sorted(set(offenders) - PRIVATE_MEMBERS_ALLOWED) == []
    allowed = offenders["code_puppy.workspace.project_files.ProjectFileSystemToolset"]
    documented = importlib.import_module("code_puppy.workspace.project_files").__doc__ or ""
    assert {"_read_file", "_create_directory", "_resolve_path"} <= set(allowed)
    assert all(
        f"`ProjectFileSystemToolset.{name}`" in documented or f"`{name}`" in documented
        for name in ("_read_file", "_create_directory", "_resolve_path")
    )


class _Peeking(FunctionToolset[None]):
    """Reads what `FunctionToolset.__init__` set, and overrides one of its private methods."""

    def peek(self) -> object:
        return self._instructions

    def _tool_for(self, *args: object) -> object:
        return args


class _Own(FunctionToolset[None]):
    def __init__(self) -> None:
        super().__init__()
        self._mine = 1

    def mine(self) -> int:
        return self._mine + self._helper()

    def _helper(self) -> int:
        return 1


def test_private_members_of_a_library_base_are_found_and_a_subclass_own_are_not() -> None:
    assert private_members_used(_Peeking) == ["_instructions", "_tool_for"]
    assert private_members_used(_Own) == []
