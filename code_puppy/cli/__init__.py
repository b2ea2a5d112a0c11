"""The `code-puppy` command line: the root command (`root.py`) and one module per subcommand group, each attaching
its commands to the root when imported. Nothing here imports anything heavy: `--help` and `--version` load them all."""

from code_puppy.cli import (
    acp,
    checkpoints,
    definitions,
    mcp,
    plugins,
    sandbox,
    sessions,
    steer,
    usage,
    worktrees,
)
from code_puppy.cli.root import cli

__all__ = (
    "acp",
    "checkpoints",
    "cli",
    "definitions",
    "mcp",
    "plugins",
    "sandbox",
    "sessions",
    "steer",
    "usage",
    "worktrees",
)
