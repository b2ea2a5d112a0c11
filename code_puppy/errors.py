"""The errors code-puppy reports in one line with exit 2; importable without pydantic, for the fast paths."""

from __future__ import annotations


class ConfigError(Exception):
    """A usage or configuration error: reported in one line, exit 2, nothing sent to a model."""


class StoreError(ConfigError):
    """The sessions database cannot be opened or read; the message names the file and what to do."""
