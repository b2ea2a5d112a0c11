"""`code-puppy sandbox check|run` (`commands.py`) and what they do (`probes.py`, loaded when one runs)."""

from code_puppy.cli.sandbox.commands import sandbox

__all__ = ("sandbox",)
