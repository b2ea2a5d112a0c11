"""Fast start: --version and --help import neither pydantic_ai nor a provider SDK."""

from __future__ import annotations

import subprocess
import sys

import pytest

from code_puppy import __version__

HEAVY = ("pydantic_ai", "openai", "anthropic", "google.genai", "pydantic_ai_harness", "pydantic")


def imported_modules(*args: str) -> set[str]:
    completed = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "code_puppy", *args], capture_output=True, text=True, check=True
    )
    return {line.split("|")[-1].strip() for line in completed.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_flag_imports_nothing_heavy(flag: str) -> None:
    modules = imported_modules(flag)
    assert "click" in modules  # the measurement itself works
    assert sorted(m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY) == []


def test_version_prints_the_package_version() -> None:
    completed = subprocess.run([sys.executable, "-m", "code_puppy", "--version"], capture_output=True, text=True)
    assert (completed.returncode, completed.stdout) == (0, f"code-puppy, version {__version__}\n")
