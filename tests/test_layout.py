"""The package's layout (issue 24): one package per concern in layers, no import cycle among its first-level units,
every module listed in its package's README, folders and modules small enough to read, functions simple enough to
follow, and the few things said once said in one place."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "code_puppy"
MAX_MODULES = 16
"""Modules in one folder of `code_puppy/`, besides its `__init__.py` (each subfolder counted on its own)."""
MAX_LINES = 500
MAX_COMPLEXITY = 15

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "paths", "tools", "options", "config", "models", "trust", "hardening", "mentions"})
    | {"terminal_text", "model_choices"},
    frozenset({"sessions"}),
    frozenset({"run"}),
    frozenset({"workspace", "permissions", "sandbox", "history", "definitions", "mcp", "cost", "checkpoints"})
    | {"plugins", "worktrees", "durable", "__init__"},
    frozenset({"core"}),
    frozenset({"chat", "headless", "acp", "web"}),
    frozenset({"fleet"}),
    frozenset({"cli", "__main__"}),
)
"""The first-level units of `code_puppy`, lowest layer first (STYLE.md "Shape of the tree"): leaf modules, storage, the
run contract, the features (the package itself among them: `code_puppy.hookimpl` is the plugin API's), the core, the
front ends, the fleet (over the headless front end), the command line. A unit imports only its own layer or lower ones;
the front ends never import each other."""
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


def test_no_folder_holds_more_than_16_modules() -> None:
    folders = [PACKAGE, *(path.parent for path in PACKAGE.rglob("*/__init__.py"))]
    counts = {
        str(folder.relative_to(ROOT)): len([path for path in folder.glob("*.py") if path.name != "__init__.py"])
        for folder in folders
    }
    assert counts["code_puppy"] > 5  # the walk counts the package's own modules
    assert {folder: count for folder, count in counts.items() if count > MAX_MODULES} == {}


def test_no_module_is_over_500_lines() -> None:
    lengths = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}
    assert len(lengths) > 100 and max(lengths.values()) > 300  # every module is measured
    assert {module: lines for module, lines in lengths.items() if lines > MAX_LINES} == {}


def ruff_complexity(*paths: Path) -> subprocess.CompletedProcess[str]:
    """ruff's mccabe check (C901) over `paths`, with the project's configuration."""
    return subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "C90", "--output-format", "concise", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_no_function_is_over_complexity_15_and_none_is_excused(tmp_path: Path) -> None:
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "C90" in lint["select"] and lint["mccabe"]["max-complexity"] == MAX_COMPLEXITY
    checked = ruff_complexity(PACKAGE, ROOT / "plugins")
    assert checked.returncode == 0, checked.stdout
    excused = [str(path) for path in PACKAGE.rglob("*.py") if "noqa: C901" in path.read_text()]
    assert excused == []
    # The check itself: a function with sixteen branches, under the project's configuration, fails it.
    tangled = tmp_path / "tangled.py"
    tangled.write_text("def f(x):\n" + "".join(f"    if x == {n}:\n        return {n}\n" for n in range(16)))
    failed = ruff_complexity(tangled)
    assert failed.returncode == 1 and "C901" in failed.stdout, failed.stdout + failed.stderr


def modules_saying(text: str) -> list[str]:
    return sorted(str(path.relative_to(ROOT)) for path in PACKAGE.rglob("*.py") if text in path.read_text())


def test_the_store_file_the_denial_text_and_run_turn_are_each_in_one_place() -> None:
    assert modules_saying('"sessions.db"') == ["code_puppy/paths.py"]
    assert modules_saying("The user denied this call") == ["code_puppy/core/approvals.py"]
    assert modules_saying("def run_turn(") == ["code_puppy/core/turn.py"]
