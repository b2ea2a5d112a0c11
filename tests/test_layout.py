"""The package's layout (issue 24): one package per concern in layers, no import cycle among its first-level units,
and every module listed in its package's README."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "code_puppy"

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "paths", "tools", "options", "config", "models", "trust", "hardening", "mentions"})
    | {"terminal_text"},
    frozenset({"sessions"}),
    frozenset({"run"}),
    frozenset({"workspace", "permissions", "sandbox", "history", "definitions", "mcp", "cost", "checkpoints"})
    | {"plugins", "worktrees", "__init__"},
    frozenset({"core"}),
    frozenset({"chat", "headless", "acp"}),
    frozenset({"cli", "__main__"}),
)
"""The first-level units of `code_puppy`, lowest layer first (STYLE.md "Shape of the tree"): leaf modules, storage, the
run contract, the features (the package itself among them: `code_puppy.hookimpl` is the plugin API's), the core, the
front ends, the command line. A unit imports only its own layer or lower ones; the front ends never import each
other."""
FRONT_ENDS = LAYERS[5]


def units() -> list[str]:
    """Every subpackage and top-level module of `code_puppy` (the package's own `__init__` is `__init__`)."""
    found = [path.stem for path in PACKAGE.glob("*.py")]
    found += [path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()]
    return sorted(found)


def unit_of(module: str) -> str | None:
    """The first-level unit `module` belongs to, or None for one outside `code_puppy`."""
    parts = module.split(".")
    if parts[0] != "code_puppy":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def imported(path: Path) -> Iterator[str]:
    """Every `code_puppy` module `path` imports at run time, at any depth (lazy imports inside functions count;
    imports under `if TYPE_CHECKING:` do not, nothing evaluates them)."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for statement in block.body
        for node in ast.walk(statement)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            if node.module == "code_puppy":  # `from code_puppy import sessions` imports the unit
                yield from (f"code_puppy.{alias.name}" for alias in node.names)


def dependencies() -> dict[str, set[str]]:
    """For each unit, the other units it imports."""
    graph: dict[str, set[str]] = {unit: set() for unit in units()}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        source = relative.parts[0].removesuffix(".py") if len(relative.parts) > 0 else "__init__"
        for module in imported(path):
            target = unit_of(module)
            if target is not None and target in graph and target != source:
                graph[source].add(target)
    return graph


def layer_of(unit: str) -> int:
    return next(index for index, layer in enumerate(LAYERS) if unit in layer)


def test_every_unit_has_a_layer() -> None:
    assert [unit for unit in units() if not any(unit in layer for layer in LAYERS)] == []
    assert sorted(set().union(*LAYERS)) == units()  # and every layer's unit exists


def test_no_unit_imports_a_layer_above_it_and_no_front_end_another() -> None:
    offenders = [
        f"{unit} imports {other}"
        for unit, others in dependencies().items()
        for other in sorted(others)
        if layer_of(other) > layer_of(unit) or (unit in FRONT_ENDS and other in FRONT_ENDS)
    ]
    assert offenders == []


def test_no_import_cycle_among_the_units() -> None:
    graph = dependencies()
    cycles: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(unit: str, path: list[str]) -> None:
        state[unit] = "open"
        for other in sorted(graph[unit]):
            if state.get(other) == "open":
                cycles.append([*path[path.index(other) :], other])
            elif other not in state:
                visit(other, [*path, other])
        state[unit] = "done"

    for unit in sorted(graph):
        if unit not in state:
            visit(unit, [unit])
    assert cycles == []


def test_the_checks_above_see_imports() -> None:
    """They mean something only while the graph they read has edges: the chat imports the core, lazily too."""
    graph = dependencies()
    assert {"core", "sessions"} <= graph["chat"] and "plugins" in graph["__init__"]


@pytest.mark.parametrize("package", sorted(path.parent.name for path in PACKAGE.glob("*/__init__.py")))
def test_every_module_is_listed_in_its_package_readme(package: str) -> None:
    folder = PACKAGE / package
    readme = (folder / "README.md").read_text()
    modules = sorted(path.name for path in folder.glob("*.py") if path.name != "__init__.py")
    assert [module for module in modules if f"`{module}`" not in readme] == []
