"""Secrets through /proc (issue 10, item 5): a command the agent runs, as the same unprivileged user as code-puppy,
walks up its ancestors and reads each one's environment; no provider key may reach the model or the store."""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.test_startup import imported_modules
from tests.unprivileged import unprivileged

WALK_UP = r"""
pid=$$
while [ "$pid" -gt 1 ]; do
  echo "== $pid $(cat /proc/$pid/comm)"
  cat /proc/$pid/environ 2>&1 | tr '\0' '\n'
  pid=$(sed 's/.*) //' /proc/$pid/stat | cut -d' ' -f2)
done
"""
"""Every ancestor's environment, from the command's own shell up to (not including) init."""

CANARIES = {"OPENAI_API_KEY": "sk-secret-canary", "FAKE_ENDPOINT_KEY": "sk-endpoint-canary"}


def test_a_command_cannot_read_provider_keys_from_code_puppys_environment() -> None:
    runner = unprivileged()
    with runner.workdir() as workdir, FakeLLMServer() as server:
        home, project = workdir / "home", workdir / "project"
        (project / ".git").mkdir(parents=True)
        home.mkdir()
        (home / "config.toml").write_text(
            f'model = "fake"\n[models.fake]\nname = "fake-model"\nbase_url = "{server.base_url}"\n'
            'api_key_env = "FAKE_ENDPOINT_KEY"\n'
        )
        runner.own(home, project)
        server.script(tool_calls(call("shell", {"command": WALK_UP})), text("done"))
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(workdir),
            "CODE_PUPPY_HOME": str(home),
            "HARMLESS_MARKER": "visible-to-children",
            **CANARIES,
        }
        completed = runner.run_cli("-p", "read the environment", "--permission-mode", "yolo", cwd=project, env=env)
        stored = b"".join(path.read_bytes() for path in home.rglob("sessions.db*"))

    assert (completed.returncode, completed.stdout) == (0, "done\n"), completed.stderr
    (walk,) = [m["content"] for m in server.requests[1].body["messages"] if m["role"] == "tool"]
    requests = json.dumps([request.body for request in server.requests])
    assert b"visible-to-children" in stored  # the walk's output is in the store
    leaked = [value for value in CANARIES.values() if value in requests or value.encode() in stored]
    assert leaked == []
    # The walk really read environments: its own shell's and the harness supervisor's carry the marker...
    assert walk.count("HARMLESS_MARKER=visible-to-children") >= 2, walk
    # ...and it reached code-puppy itself, whose environment is closed to it.
    assert re.search(r"^== \d+ code-puppy\n[^\n]*Permission denied$", walk, re.MULTILINE), walk


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_do_not_load_the_hardening(flag: str) -> None:
    """The hardening runs in the command callback, which click never reaches for --version and --help."""
    assert {"ctypes", "resource"} & imported_modules(flag) == set()
