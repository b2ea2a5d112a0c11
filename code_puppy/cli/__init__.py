"""The `code-puppy` command line: the root command (`root.py`) and one module per subcommand group, each loaded
when its command runs or `--help` lists it (`root.SUBCOMMANDS`). Nothing here imports anything heavy."""

from code_puppy.cli.root import cli

__all__ = ("cli",)
