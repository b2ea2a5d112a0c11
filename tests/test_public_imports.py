"""code-puppy imports only the public surfaces of pydantic-ai and the harness (issue 11): no module or name whose
dotted path has a segment starting with `_`, at any depth of any module of `code_puppy/` and the bundled plugins."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = frozenset({"pydantic_ai", "pydantic_ai_harness"})


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
