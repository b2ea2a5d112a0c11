"""code-puppy: a coding agent for the terminal."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from code_puppy.plugins import PromptBlocked as PromptBlocked
    from code_puppy.plugins import hookimpl as hookimpl

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """`code_puppy.hookimpl` and `code_puppy.PromptBlocked` for plugins, imported on first use (not for --version)."""
    if name in ("hookimpl", "PromptBlocked"):
        import code_puppy.plugins

        return getattr(code_puppy.plugins, name)
    raise AttributeError(f"module 'code_puppy' has no attribute {name!r}")
