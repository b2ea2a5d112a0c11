"""Fast start: --version and --help import neither pydantic_ai nor a provider SDK."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from code_puppy import __version__
from code_puppy.cli.root import SUBCOMMANDS, cli
from tests.fake_llm import FakeLLMServer, text

HEAVY = (
    "pydantic_ai",
    "openai",
    "anthropic",
    "google.genai",
    "pydantic_ai_harness",
    "pydantic",
    "mcp",
    "fastmcp",
    "acp",
)
MCP = ("pydantic_ai.mcp", "mcp", "fastmcp")
SLOW_STDLIB = ("asyncio", "subprocess", "ssl", "socket", "json", "tempfile", "logging", "sqlite3")
"""Standard modules a subcommand needs when it runs, not before: each costs milliseconds (asyncio ~40, with ssl).
`shutil` is not among them: click's help asks it for the terminal's width."""


def imported_modules(*args: str, cwd: Path | None = None) -> set[str]:
    completed = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "code_puppy", *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )
    return {line.split("|")[-1].strip() for line in completed.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_flag_imports_nothing_heavy(flag: str) -> None:
    modules = imported_modules(flag)
    assert "click" in modules  # the measurement itself works
    assert sorted(m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY) == []
    assert sorted(m for m in modules if m in SLOW_STDLIB) == []


def test_version_loads_no_subcommand_and_help_lists_each_by_its_name() -> None:
    loaded = sorted(module for module in imported_modules("--version") if module.startswith("code_puppy.cli."))
    assert loaded == ["code_puppy.cli.common", "code_puppy.cli.root"]
    context = click.Context(cli)
    assert cli.list_commands(context) == sorted(SUBCOMMANDS)
    for name in SUBCOMMANDS:
        command = cli.get_command(context, name)
        assert command is not None and command.name == name


def test_version_prints_the_package_version() -> None:
    completed = subprocess.run([sys.executable, "-m", "code_puppy", "--version"], capture_output=True, text=True)
    assert (completed.returncode, completed.stdout) == (0, f"code-puppy, version {__version__}\n")


def test_a_run_without_mcp_servers_imports_no_mcp(code_puppy_home: Path, project: Path) -> None:
    with FakeLLMServer(text("hi")) as fake:
        (code_puppy_home / "config.toml").write_text(
            f'model = "fake"\n[models.fake]\nname = "fake-model"\nbase_url = "{fake.base_url}"\n'
            '[mcp_servers.off]\ncommand = "never-started"\nenabled = false\n'
        )
        modules = imported_modules("-p", "hi", cwd=project)
    assert "pydantic_ai.models.openai" in modules  # the run happened
    assert sorted(m for m in modules if m.split(".")[0] in MCP or m in MCP) == []


def test_acp_answers_initialize_before_importing_pydantic_ai(project: Path) -> None:
    """The editor waits for `initialize`: the agent and the model's SDK load with the first session, not before."""
    completed = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "code_puppy", "acp"],
        input='{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}\n',
        capture_output=True,
        text=True,
        cwd=project,
        timeout=60,
    )
    modules = {line.split("|")[-1].strip() for line in completed.stderr.splitlines() if line.startswith("import time:")}
    assert json.loads(completed.stdout)["result"]["agentInfo"]["name"] == "code-puppy"
    assert "acp.schema" in modules
    assert sorted(m for m in modules if m.split(".")[0] in ("pydantic_ai", "openai", "anthropic", "mcp")) == []
