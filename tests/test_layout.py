"""The package's layers (issue 11): front ends over one core, which imports no front end."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "code_puppy"

FRONT_ENDS = ("code_puppy.chat", "code_puppy.headless", "code_puppy.acp")

FORBIDDEN = {
    "chat": ("code_puppy.headless", "code_puppy.acp"),
    "headless": ("code_puppy.chat", "code_puppy.acp"),
    "acp": ("code_puppy.chat", "code_puppy.headless"),
    "core": FRONT_ENDS,
    "run": ("code_puppy.core", *FRONT_ENDS),
    "history": ("code_puppy.core", *FRONT_ENDS),
    "sessions": ("code_puppy.core", *FRONT_ENDS),
    "plugins": ("code_puppy.core", *FRONT_ENDS),
    "checkpoints": ("code_puppy.core", *FRONT_ENDS),
}
"""What each subpackage must not import: the front ends (chat, headless, the ACP server) sit over the core, the core
over the agent, sessions and plugins, and nothing imports upwards."""


def imports(path: Path) -> list[str]:
    """Every module `path` imports, at any depth (lazy imports inside functions count too)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_no_layer_imports_what_sits_above_it(layer: str) -> None:
    offenders = [
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for module in imports(path)
        if module.startswith(FORBIDDEN[layer])
    ]
    assert offenders == []


def test_the_layers_exist() -> None:
    """The check above means something only while the folders it reads hold modules."""
    assert all(list((PACKAGE / layer).rglob("*.py")) for layer in FORBIDDEN)
