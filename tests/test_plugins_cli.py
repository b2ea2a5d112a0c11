"""Plugins end to end: the installed `code-puppy` against the fake server, plugins in $CODE_PUPPY_HOME/plugins."""

from __future__ import annotations

import importlib.util
import json
import py_compile
import re
from pathlib import Path
from py_compile import PycInvalidationMode
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.fake_llm import call, text, tool_calls
from tests.test_plugin_discovery import install_entry_point, write

RECORDER = """
import json, os, code_puppy

def record(*fields):
    with open(os.environ["RECORD"], "a") as log:
        log.write(json.dumps(fields, default=str) + "\\n")

@code_puppy.hookimpl
def startup(settings):
    record("startup", settings.model)

@code_puppy.hookimpl
def user_prompt_submit(prompt, session):
    record("user_prompt_submit", prompt, session.id, len(session.messages))

@code_puppy.hookimpl
async def agent_run_start(prompt, session):
    record("agent_run_start", prompt, len(session.messages))

@code_puppy.hookimpl
def pre_tool_call(tool_name, args):
    record("pre_tool_call", tool_name, args["path"])

@code_puppy.hookimpl
def post_tool_call(tool_name, result):
    record("post_tool_call", tool_name, "# demo project" in str(result))

@code_puppy.hookimpl
def agent_run_end(result, error, session):
    record("agent_run_end", result.output, error, list(session.messages) == result.all_messages())

@code_puppy.hookimpl
def turn_end(result):
    record("turn_end", result.output)
    return "are you sure?" if result.output == "first answer" else None

@code_puppy.hookimpl
def shutdown():
    record("shutdown")
"""


def configure(home: Path, toml: str) -> None:
    with (home / "config.toml").open("a") as config:
        config.write(toml)


def user_plugin(home: Path, name: str, source: str) -> Path:
    return write(home / "plugins" / f"{name}.py", source)


def records(path: Path) -> list[list[Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def table(listing: str) -> list[list[str]]:
    """`plugins list` rows, split on the column gaps."""
    return [re.split(r"\s{2,}", line.strip(), maxsplit=3) for line in listing.splitlines()]


def tool_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def test_every_hook_fires_once_per_run_in_a_headless_turn_with_a_follow_up(
    server: Any, code_puppy_home: Path, project: Path, tmp_path: Path
) -> None:
    user_plugin(code_puppy_home, "recorder", RECORDER)
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("first answer"), text("yes, sure"))
    log = tmp_path / "record.jsonl"
    completed = run_cli("-p", "what is this?", "--output-format", "json", cwd=project, env={"RECORD": str(log)})
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert (result["output"], result["status"], result["usage"]["requests"]) == ("yes, sure", "success", 3)
    assert records(log) == [
        ["startup", "fake"],
        ["user_prompt_submit", "what is this?", result["session_id"], 0],
        ["agent_run_start", "what is this?", 0],
        ["pre_tool_call", "read_file", "README.md"],
        ["post_tool_call", "read_file", True],
        ["agent_run_end", "first answer", None, True],
        ["turn_end", "first answer"],
        ["agent_run_start", "are you sure?", 4],
        ["agent_run_end", "yes, sure", None, True],
        ["turn_end", "yes, sure"],
        ["shutdown"],
    ]
    assert server.requests[2].body["messages"][-1] == {"role": "user", "content": "are you sure?"}


def test_continuations_stop_at_max_continuations_and_stream_events_carry_the_run(
    server: Any, code_puppy_home: Path, project: Path
) -> None:
    configure(code_puppy_home, "[plugins]\nmax_continuations = 1\n")
    user_plugin(code_puppy_home, "forever", "import code_puppy\n@code_puppy.hookimpl\ndef turn_end(): return 'again'\n")
    server.script(text("one"), text("two"), text("three"))
    completed = run_cli("-p", "go", "--output-format", "stream-json", cwd=project)
    assert completed.returncode == 0, completed.stderr
    events = [json.loads(line) for line in completed.stdout.splitlines()]
    assert [(e["run"], e["text"]) for e in events if e["type"] == "text_delta"] == [(0, "one"), (1, "two")]
    assert (events[-1]["output"], events[-1]["usage"]["requests"]) == ("two", 2)
    assert len(server.requests) == 2
    assert (
        completed.stderr
        == "code-puppy: note: stopped after 1 follow-ups ([plugins] max_continuations); not run: again\n"
    )


def test_a_block_reaches_the_model_as_the_tool_result_and_a_raising_hook_blocks_too(
    server: Any, code_puppy_home: Path, project: Path
) -> None:
    user_plugin(
        code_puppy_home,
        "guard",
        "import code_puppy\n@code_puppy.hookimpl\ndef pre_tool_call(tool_name, args):\n"
        "    return 'secrets stay secret' if args.get('path') == '.env' else None\n",
    )
    user_plugin(
        code_puppy_home,
        "crashy",
        "import code_puppy\n@code_puppy.hookimpl\ndef pre_tool_call(tool_name):\n"
        "    if tool_name == 'shell': raise RuntimeError('kaboom')\n",
    )
    (project / ".env").write_text("TOKEN=hunter2\n")
    server.script(
        tool_calls(call("read_file", {"path": ".env"}), call("shell", {"command": "touch made"})), text("understood")
    )
    completed = run_cli("-p", "go", "--permission-mode", "yolo", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "understood\n")
    assert tool_messages(server.requests[1].body) == [
        "Blocked by plugin guard: secrets stay secret",
        "Blocked by plugin crashy: its pre_tool_call hook failed (RuntimeError: kaboom)",
    ]
    assert not (project / "made").exists()
    assert [line for line in completed.stderr.splitlines() if line.startswith("code-puppy")] == [
        "code-puppy: plugin crashy: pre_tool_call raised RuntimeError: kaboom",
        # The closing line of a headless run with denied calls (issue 26): a plugin's block counts.
        "code-puppy: 2 calls were denied in yolo mode (1 command, 1 read); a permission rule, a plugin, a protected "
        "file or the project's bounds denied them (each result says which)",
    ]


def test_broken_plugins_are_one_line_each_and_never_break_the_run(
    server: Any, code_puppy_home: Path, project: Path
) -> None:
    broken = user_plugin(code_puppy_home, "broken", "import not_installed_anywhere\n")
    user_plugin(
        code_puppy_home,
        "flaky",
        "import code_puppy\n"
        + "".join(
            f"@code_puppy.hookimpl\ndef {hook}(): raise KeyError('{hook}')\n"
            for hook in ("startup", "agent_run_start", "agent_run_end", "turn_end", "shutdown")
        ),
    )
    server.script(text("still fine"), text("still fine"))
    completed = run_cli("-p", "hi", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "still fine\n")
    assert completed.stderr.splitlines() == [
        f"code-puppy: plugin broken: cannot be loaded from {broken}: "
        "ModuleNotFoundError: No module named 'not_installed_anywhere'",
        "code-puppy: plugin flaky: startup raised KeyError: 'startup'",
    ]
    debug = run_cli("-p", "hi", "--debug", cwd=project)
    assert debug.returncode == 0 and debug.stderr.count("Traceback (most recent call last)") == 2


def test_no_plugins_flag_and_disabled_names_switch_plugins_off(
    server: Any, code_puppy_home: Path, project: Path
) -> None:
    user_plugin(
        code_puppy_home, "deny_all", "import code_puppy\n@code_puppy.hookimpl\ndef pre_tool_call(): return 'no'\n"
    )
    server.script(*[step for _ in range(3) for step in (tool_calls(call("list_files", {})), text("ok"))])
    run_cli("-p", "list", cwd=project)
    run_cli("-p", "list", "--no-plugins", cwd=project)
    configure(code_puppy_home, '[plugins]\ndisabled = ["deny_all"]\n')
    run_cli("-p", "list", cwd=project)
    results = [tool_messages(server.requests[i].body)[0] for i in (1, 3, 5)]
    assert results[0] == "Blocked by plugin deny_all: no"
    assert "README.md" in results[1] and "README.md" in results[2]


def test_a_blocked_prompt_sends_nothing_and_exits_1(server: Any, code_puppy_home: Path, project: Path) -> None:
    user_plugin(
        code_puppy_home,
        "gate",
        "import code_puppy\n@code_puppy.hookimpl\nasync def user_prompt_submit(prompt):\n"
        "    raise code_puppy.PromptBlocked('not on fridays')\n",
    )
    completed = run_cli("-p", "deploy", "--output-format", "json", cwd=project)
    assert completed.returncode == 1
    result = json.loads(completed.stdout)
    assert (result["status"], result["error"], result["output"]) == (
        "error",
        "prompt blocked by plugin gate: not on fridays",
        None,
    )
    assert server.requests == []


def test_plugins_list_and_trust(server: Any, code_puppy_home: Path, project: Path) -> None:
    user_plugin(code_puppy_home, "broken", "raise ValueError('bad config')\n")
    user_plugin(code_puppy_home, "raiser", "import code_puppy\n@code_puppy.hookimpl\ndef turn_end(): 1 / 0\n")
    write(project_plugins := project / ".code-puppy" / "plugins" / "local.py", "import code_puppy\n")
    configure(code_puppy_home, '[plugins]\ndisabled = ["notify"]\n[plugins.verify_loop]\ncommand = "true"\n')
    server.script(text("done"))
    headless = run_cli("-p", "hi", cwd=project)
    assert headless.returncode == 0
    assert (
        f"code-puppy: note: not running the plugins in {project_plugins.parent} (local): this project is not trusted"
        in headless.stderr
    )
    listed = run_cli("plugins", "list", cwd=project)
    assert listed.returncode == 0, listed.stderr
    broken_error = f"cannot be loaded from {code_puppy_home / 'plugins' / 'broken.py'}: ValueError: bad config"
    rows = table(listed.stdout)
    assert [*rows[:4], rows[4][:3], rows[5][:3], rows[6]] == [
        ["NAME", "SOURCE", "ENABLED", "LAST ERROR"],
        ["notify", "bundled", "no (disabled)"],
        ["shell_hooks", "bundled", "no (not configured)"],
        ["verify_loop", "bundled", "yes"],
        ["broken", "user", "no (failed to load)"],
        ["raiser", "user", "yes"],
        ["local", "project", "no (not trusted)"],
    ]
    assert rows[4][3] == broken_error
    assert rows[5][3].endswith(" turn_end raised ZeroDivisionError: division by zero")  # remembered from the run

    trusted = run_cli("plugins", "trust", cwd=project)
    assert trusted.returncode == 0
    assert trusted.stdout.startswith(
        f"trusted {project}: no config files; plugins in {project_plugins.parent}: local (sha256 "
    )
    assert table(run_cli("plugins", "list", cwd=project).stdout)[-1] == ["local", "project", "yes"]
    project_plugins.write_text("import code_puppy  # edited\n")
    assert table(run_cli("plugins", "list", cwd=project).stdout)[-1] == [
        "local",
        "project",
        "no (changed since trusted)",
    ]


def test_an_installed_distribution_is_discovered_through_its_entry_point(
    server: Any, project: Path, tmp_path: Path
) -> None:
    install_entry_point(
        tmp_path / "site",
        "acme",
        "import code_puppy\n@code_puppy.hookimpl\ndef pre_tool_call(tool_name): return 'acme policy says no'\n",
    )
    server.script(tool_calls(call("list_files", {})), text("ok"))
    env = {"PYTHONPATH": str(tmp_path / "site")}
    assert run_cli("-p", "list", cwd=project, env=env).returncode == 0
    assert tool_messages(server.requests[1].body) == ["Blocked by plugin acme: acme policy says no"]
    assert ["acme", "entry point acme_module", "yes"] in table(run_cli("plugins", "list", cwd=project, env=env).stdout)


MARKS = """
import os


def mark(what):
    with open(os.environ["RECORD"], "a") as log:
        log.write(what + "\\n")
"""
"""A module of a project plugin package that appends a line to $RECORD."""
PLANTED = "import os\nopen(os.path.join(os.environ['PLANTED'], __name__), 'w').close()\n"
"""The source of the bytecode an attacker ships: leaves a file named after the module in $PLANTED."""


@pytest.mark.parametrize("shipped", [True, False], ids=["bytecode-shipped", "clean"])
def test_a_trusted_project_plugin_runs_its_source_and_no_bytecode_read_or_written(
    server: Any, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shipped: bool
) -> None:
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)  # as for most users: Python writes bytecode
    folder = project / ".code-puppy" / "plugins"
    sources = [
        write(folder / "p.py", "import os\nwith open(os.environ['RECORD'], 'a') as log:\n    log.write('p\\n')\n"),
        write(
            folder / "pkg" / "__init__.py",
            "import code_puppy\nfrom .helper import mark\nmark('pkg')\n\n"
            "@code_puppy.hookimpl\ndef pre_tool_call():\n    from . import lazy  # imported only now\n",
        ),
        write(folder / "pkg" / "helper.py", MARKS),
        write(folder / "pkg" / "lazy.py", "from .helper import mark\nmark('lazy')\n"),
    ]
    planted = tmp_path / "planted"
    planted.mkdir()
    if shipped:
        evil = write(tmp_path / "evil.py", PLANTED)
        for source in sources:  # what `git clone` of a hostile repository leaves: unchecked, so never compared
            py_compile.compile(
                str(evil),
                importlib.util.cache_from_source(str(source)),
                invalidation_mode=PycInvalidationMode.UNCHECKED_HASH,
            )
    bytecode = sorted(folder.rglob("*.pyc"))
    assert len(bytecode) == (4 if shipped else 0)
    assert run_cli("plugins", "trust", cwd=project).returncode == 0
    server.script(tool_calls(call("list_files", {})), text("done"))
    log = tmp_path / "record.log"
    completed = run_cli("-p", "go", cwd=project, env={"RECORD": str(log), "PLANTED": str(planted)})
    assert (completed.returncode, completed.stdout) == (0, "done\n")
    assert [line for line in completed.stderr.splitlines() if line.startswith("code-puppy")] == []
    assert log.read_text().split() == ["p", "pkg", "lazy"]
    assert list(planted.iterdir()) == []
    assert sorted(folder.rglob("*.pyc")) == bytecode  # nothing written into the project


def test_a_plugin_package_behind_a_symlinked_folder_does_not_run(server: Any, project: Path, tmp_path: Path) -> None:
    vendored = write(project / "vendor" / "pkg" / "__init__.py", "x = 1\n")
    folder = project / ".code-puppy" / "plugins"
    folder.mkdir(parents=True)
    (folder / "pkg").symlink_to(Path("..", "..", "vendor", "pkg"))
    assert run_cli("plugins", "trust", cwd=project).returncode == 0
    vendored.write_text(PLANTED)  # a `git pull` changed it: outside the folder, so the digest is unchanged
    planted = tmp_path / "planted"
    planted.mkdir()
    server.script(text("done"))
    completed = run_cli("-p", "go", cwd=project, env={"PLANTED": str(planted)})
    assert (completed.returncode, completed.stdout) == (0, "done\n")
    assert completed.stderr.splitlines() == [
        f"code-puppy: plugin pkg: cannot be loaded from {folder / 'pkg'}: ImportError: pkg/__init__.py is not among "
        "the files trust hashed (trust does not look inside a symlinked folder)"
    ]
    assert list(planted.iterdir()) == []
