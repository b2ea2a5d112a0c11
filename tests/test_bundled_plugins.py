"""The bundled plugins end to end: the installed `code-puppy` against the fake server, configured in config.toml."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pexpect  # pyright: ignore[reportMissingTypeStubs]

from tests.conftest import CODE_PUPPY, run_cli
from tests.fake_llm import call, text, tool_calls
from tests.test_plugins_cli import configure, table, tool_messages

REPO = Path(__file__).resolve().parents[1]


def last_user_message(body: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")


SHELL_HOOKS = """
[[plugins.shell_hooks.UserPromptSubmit]]
hooks = [{ command = "cat > prompt-event.json; echo 'Project rule: be brief.'" }]

[[plugins.shell_hooks.PreToolUse]]
matcher = "Bash"
hooks = [{ type = "command", command = "cat > pre-event.json; echo 'shell is off limits' >&2; exit 2" }]

[[plugins.shell_hooks.PreToolUse]]
matcher = "read_file|grep"
hooks = [{ command = "sleep 5", timeout = 0.3 }]

[[plugins.shell_hooks.PostToolUse]]
matcher = "Read"
hooks = [{ command = "cat > post-event.json; exit 1" }]

[[plugins.shell_hooks.Stop]]
hooks = [{ command = '''
event=$(cat); echo "$event" >> stop-events.jsonl
case "$event" in *'"stop_hook_active": false'*) echo 'Also list the files.' >&2; exit 2;; esac
''' }]
"""


def test_shell_hooks_get_each_event_as_json_and_exit_2_blocks(
    server: Any, code_puppy_home: Path, project: Path
) -> None:
    configure(code_puppy_home, SHELL_HOOKS)
    server.script(
        tool_calls(call("shell", {"command": "ls"}), call("read_file", {"path": "README.md"})),
        text("It is a demo."),
        text("Only README.md."),
    )
    completed = run_cli("-p", "what is this?", "--permission-mode", "yolo", "--output-format", "json", cwd=project)
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert (result["output"], result["usage"]["requests"]) == ("Only README.md.", 3)
    assert completed.stderr.splitlines()[0] == (
        "code-puppy: shell_hooks: PreToolUse hook `sleep 5` timed out after 0.3s"
    )
    assert "code-puppy: shell_hooks: PostToolUse hook `cat > post-event.json; exit 1` exited 1: no output" in (
        completed.stderr
    )
    # UserPromptSubmit: stdout goes to the model as context beside the prompt, in a part of its own (it was merged
    # into the prompt, and so into session titles and the search index).
    assert server.requests[0].body["messages"][-1]["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "text", "text": "Project rule: be brief."},
    ]
    base = {"session_id": result["session_id"], "transcript_path": None, "cwd": str(project), "permission_mode": "yolo"}
    assert json.loads((project / "prompt-event.json").read_text()) == base | {
        "hook_event_name": "UserPromptSubmit",
        "prompt": "what is this?",
    }
    # PreToolUse: exit 2 blocks the call and stderr is what the model is told; a timeout changes nothing.
    tool_results = tool_messages(server.requests[1].body)
    assert tool_results[0] == "Blocked by plugin shell_hooks: shell is off limits"
    assert "# demo project" in tool_results[1]
    pre = json.loads((project / "pre-event.json").read_text())
    assert (pre["hook_event_name"], pre["tool_name"], pre["tool_input"]["command"]) == ("PreToolUse", "shell", "ls")
    post = json.loads((project / "post-event.json").read_text())
    assert (post["hook_event_name"], post["tool_name"], post["tool_input"]["path"]) == (
        "PostToolUse",
        "read_file",
        "README.md",
    )
    assert "# demo project" in post["tool_response"]
    # Stop: exit 2 sends stderr to the model as the next prompt; the second Stop knows it is a continuation.
    assert last_user_message(server.requests[2].body) == "Also list the files."
    stops = [json.loads(line) for line in (project / "stop-events.jsonl").read_text().splitlines()]
    assert stops == [base | {"hook_event_name": "Stop", "stop_hook_active": active} for active in (False, True)]


def test_shell_hooks_user_prompt_submit_exit_2_blocks_the_prompt(
    server: Any, code_puppy_home: Path, project: Path
) -> None:
    configure(
        code_puppy_home,
        "[[plugins.shell_hooks.UserPromptSubmit]]\n"
        "hooks = [{ command = \"grep -q deploy && echo 'no deploys on friday' >&2 && exit 2; exit 0\" }]\n",
    )
    completed = run_cli("-p", "deploy it", cwd=project)
    assert (completed.returncode, completed.stdout, server.requests) == (1, "", [])
    assert completed.stderr == "code-puppy: prompt blocked by plugin shell_hooks: no deploys on friday\n"


def test_shell_hooks_config_errors_are_one_line(server: Any, code_puppy_home: Path, project: Path) -> None:
    configure(code_puppy_home, '[[plugins.shell_hooks.PreToolUse]]\nhooks = [{ comand = "x" }]\n')
    server.script(text("fine"))
    completed = run_cli("-p", "hi", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "fine\n")
    assert completed.stderr == (
        "code-puppy: plugin shell_hooks: startup raised ValueError: "
        "[plugins.shell_hooks] PreToolUse.0.hooks.0.command: Field required\n"
    )


def test_verify_loop_sends_the_failing_check_back_until_it_passes(
    server: Any, code_puppy_home: Path, project: Path
) -> None:
    check = "echo run >> checks.log; test -f fixed.txt || { echo 'FAILED test_fix: fixed.txt is missing'; exit 1; }"
    configure(code_puppy_home, f"[plugins.verify_loop]\ncommand = {json.dumps(check)}\n")
    server.script(
        tool_calls(call("write_file", {"path": "wrong.txt", "content": "x"})),
        text("Done."),
        tool_calls(call("write_file", {"path": "fixed.txt", "content": "x"})),
        text("Fixed."),
        text("It is a demo project."),
    )
    completed = run_cli("-p", "fix it", "--permission-mode", "accept-edits", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "Fixed.\n")
    follow_up = last_user_message(server.requests[2].body)
    assert follow_up.startswith(f"The check `{check}` failed (exit 1) after your changes.")
    assert follow_up.endswith("```\nFAILED test_fix: fixed.txt is missing\n```")
    assert len(server.requests) == 4
    assert (project / "checks.log").read_text() == "run\nrun\n"
    # A turn that changed nothing is not checked (when = "changed", the default).
    assert run_cli("-p", "what is this?", "-c", cwd=project).stdout == "It is a demo project.\n"
    assert (project / "checks.log").read_text() == "run\nrun\n"


def test_verify_loop_stops_after_max_attempts(server: Any, code_puppy_home: Path, project: Path) -> None:
    configure(code_puppy_home, '[plugins.verify_loop]\ncommand = "exit 3"\nmax_attempts = 1\nwhen = "always"\n')
    server.script(text("first"), text("second"), text("never"))
    completed = run_cli("-p", "go", cwd=project)
    assert (completed.returncode, completed.stdout, len(server.requests)) == (0, "second\n", 2)
    assert completed.stderr == "code-puppy: verify_loop: `exit 3` still fails after 1 follow-ups; stopping there\n"


def test_verify_loop_runs_its_check_like_the_agents_commands(server: Any, code_puppy_home: Path, outside: Path) -> None:
    project = outside / "project"
    project.mkdir()
    check = f"touch {outside}/from-check.txt; echo key=$OPENAI_API_KEY; exit 1"
    configure(code_puppy_home, f'[plugins.verify_loop]\ncommand = "{check}"\nwhen = "always"\nmax_attempts = 1\n')
    env = {"OPENAI_API_KEY": "sk-verify-canary"}
    for mode, escaped in (("auto", False), ("yolo", True)):
        server.script(text("first"), text("second"))
        completed = run_cli("-p", "go", "--permission-mode", mode, cwd=project, env=env)
        assert completed.returncode == 0, completed.stderr
        follow_up = last_user_message(server.requests[-1].body)
        assert "key=\n" in follow_up or follow_up.endswith("key=\n```"), follow_up  # no secrets, in every mode
        assert ("Read-only file system" in follow_up) is not escaped, follow_up  # in the sandbox in auto
        assert (outside / "from-check.txt").exists() is escaped, mode


def test_notify_shows_a_desktop_notification_only_after_a_long_enough_run(
    server: Any, code_puppy_home: Path, project: Path, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    notify_send = bin_dir / "notify-send"
    notify_send.write_text(
        f'#!/bin/sh\nprintf "%s|" "$@" >> {tmp_path / "notified"}\necho >> {tmp_path / "notified"}\n'
    )
    notify_send.chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    configure(code_puppy_home, '[plugins.notify]\nafter_seconds = 0\nmethod = "desktop"\n')
    server.script(text("All done.\nDetails follow."))
    assert run_cli("-p", "go", cwd=project, env=env).returncode == 0
    assert re.fullmatch(r"code-puppy\|Finished after \d+s: All done\.\|\n", (tmp_path / "notified").read_text())

    (code_puppy_home / "config.toml").write_text(
        (code_puppy_home / "config.toml").read_text().replace("after_seconds = 0", "after_seconds = 60")
    )
    server.script(text("quick"))
    assert run_cli("-p", "go", cwd=project, env=env).returncode == 0
    assert (tmp_path / "notified").read_text().count("\n") == 1


def test_notify_rings_the_bell_on_a_terminal(server: Any, code_puppy_home: Path, project: Path) -> None:
    configure(code_puppy_home, "[plugins.notify]\nafter_seconds = 0\n")
    server.script(text("ding"))
    child = pexpect.spawn(str(CODE_PUPPY), ["-p", "go"], cwd=str(project), env=dict(os.environ), timeout=30)
    child.expect(pexpect.EOF)
    child.close()
    output = child.before.decode()  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    assert (child.exitstatus, output) == (0, "\x07ding\r\n")


def test_the_wheel_ships_the_bundled_plugins_inside_the_package(tmp_path: Path, code_puppy_home: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path / "dist")],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    wheel = next((tmp_path / "dist").glob("*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(tmp_path / "installed")
    assert {
        "code_puppy/bundled_plugins/README.md",
        "code_puppy/bundled_plugins/notify/__init__.py",
        "code_puppy/bundled_plugins/shell_hooks/__init__.py",
        "code_puppy/bundled_plugins/verify_loop/__init__.py",
    } <= set(names)
    assert not [name for name in names if name.startswith("plugins/") or "__pycache__" in name]
    # Installed from the wheel (ahead of the editable checkout), code-puppy finds them inside its package.
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "installed")}
    located = subprocess.run(
        [
            sys.executable,
            "-c",
            "from code_puppy.plugins.discovery import bundled_plugins_dir; print(bundled_plugins_dir())",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert located.stdout == f"{tmp_path / 'installed' / 'code_puppy' / 'bundled_plugins'}\n"
    # Configured, so that listing them imports each one from the installed wheel.
    config = Path(os.environ["CODE_PUPPY_HOME"]) / "config.toml"
    config.write_text("[plugins.notify]\n[plugins.shell_hooks]\n[plugins.verify_loop]\n")
    listed = subprocess.run(
        [sys.executable, "-m", "code_puppy", "plugins", "list"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert table(listed.stdout)[1:] == [
        ["notify", "bundled", "yes"],
        ["shell_hooks", "bundled", "yes"],
        ["verify_loop", "bundled", "yes"],
    ]


def test_a_pre_tool_use_hook_that_crashes_blocks_nothing_and_says_so_in_one_line(
    server: Any, code_puppy_home: Path, project: Path
) -> None:
    configure(
        code_puppy_home,
        "[[plugins.shell_hooks.PreToolUse]]\nmatcher = 'shell'\n"
        "hooks = [{ command = '''\necho 'looking' >&2\necho 'half way' >&2\nexit 1\n''' }]\n",
    )
    (project / ".claude").mkdir()
    (project / ".claude" / "crash.py").write_text("import json, sys\nevent = json.load(sys.stdin)\nevent['nope']\n")
    hooks = [{"type": "command", "command": "python3 .claude/crash.py"}]
    settings = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": hooks}]}}
    (project / ".claude" / "settings.json").write_text(json.dumps(settings))
    assert run_cli("trust", cwd=project).returncode == 0
    server.script(tool_calls(call("shell", {"command": "echo ran > ran.txt"})), text("done"))
    completed = run_cli("-p", "go", "--permission-mode", "yolo", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "done\n")
    assert [line for line in completed.stderr.splitlines() if line.startswith("code-puppy")] == [
        "code-puppy: shell_hooks: PreToolUse hook `echo 'looking' >&2 echo 'half way' >&2 exit 1` exited 1: half way",
        "code-puppy: shell_hooks: PreToolUse hook `python3 .claude/crash.py` exited 1: KeyError: 'nope'",
    ]
    assert (project / "ran.txt").read_text() == "ran\n"
    assert not tool_messages(server.requests[1].body)[0].startswith("Blocked")
