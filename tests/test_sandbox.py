"""The OS sandbox through the installed console script, with the real bwrap (issue 12): `sandbox check` and
`sandbox run`, and every escape the sandbox must refuse. No skips: a machine without a working bwrap fails here."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import run_cli

CONNECT = "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=3); print('connected')"

PYTHON = os.path.realpath(sys.executable)
"""The interpreter itself: a virtual environment under /tmp is hidden in the sandbox (its /tmp is its own)."""


def sandboxed(project: Path, script: str, *args: str, env: dict[str, str] | None = None, network: bool = False):
    flags = ["--network"] if network else []
    return run_cli("sandbox", "run", *flags, "--", "sh", "-c", script, "sh", *args, cwd=project, env=env)


def test_check_finds_the_sandbox_and_every_probe_holds(code_puppy_home: Path, repo: Path, home: Path) -> None:
    completed = run_cli("sandbox", "check", cwd=repo, env={"HOME": str(home)})
    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0].startswith("sandbox: bubblewrap ")
    assert sum(line.startswith("  ✓ ") for line in lines) == 5 and "✗" not in completed.stdout
    assert "3 denied paths present here are hidden" in completed.stdout  # code-puppy's home, ~/.ssh, ~/.netrc
    read_only = ", ".join(str(repo / name) for name in (".code-puppy", ".git/config", ".git/hooks"))
    assert f"read-only inside: {read_only}" in completed.stdout


def test_a_command_writes_the_project_and_nothing_else(
    code_puppy_home: Path, repo: Path, home: Path, outside: Path
) -> None:
    (repo / "escape").symlink_to(outside)
    script = """
        touch inside.txt && echo created
        touch "$1/outside.txt" || echo refused-outside
        touch "$HOME/at-home.txt" || echo refused-home
        touch escape/through-link.txt || echo refused-link
        echo loosened >> .code-puppy/config.toml || echo refused-config
        echo 'echo planted' > .git/hooks/pre-commit || echo refused-hook
        touch /tmp/scratch && echo private-tmp
    """
    completed = sandboxed(repo, script, str(outside), env={"HOME": str(home)})
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == [
        "created",
        "refused-outside",
        "refused-home",
        "refused-link",
        "refused-config",
        "refused-hook",
        "private-tmp",
    ]
    assert completed.stderr.count("Read-only file system") == 5, completed.stderr
    assert (repo / "inside.txt").exists()
    assert sorted(path.name for path in outside.rglob("*.txt")) == []
    assert (repo / ".code-puppy" / "config.toml").read_text() == "# the project's config\n"
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()


def test_secrets_denied_paths_and_processes_stay_out_of_reach(code_puppy_home: Path, repo: Path, home: Path) -> None:
    (code_puppy_home / "config.toml").write_text("# the user's config\n")
    script = """
        echo "key=${OPENAI_API_KEY:-absent} marker=$HARMLESS_MARKER"
        cat "$HOME/.ssh/id_ed25519" "$HOME/.netrc" "$CODE_PUPPY_HOME/config.toml" 2>/dev/null || echo unreadable
        echo "pid1=$(cat /proc/1/comm)"
    """
    env = {"HOME": str(home), "OPENAI_API_KEY": "sk-sandbox-canary", "HARMLESS_MARKER": "kept"}
    completed = sandboxed(repo, script, env=env)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == ["key=absent marker=kept", "unreadable", "pid1=bwrap"]


def test_the_network_is_off_unless_asked_for(code_puppy_home: Path, repo: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = str(listener.getsockname()[1])
        refused = sandboxed(repo, 'exec "$1" -c "$2" "$3"', PYTHON, CONNECT, port)
        allowed = sandboxed(repo, 'exec "$1" -c "$2" "$3"', PYTHON, CONNECT, port, network=True)
    assert refused.returncode == 1 and "ConnectionRefusedError" in refused.stderr
    assert (allowed.returncode, allowed.stdout) == (0, "connected\n"), allowed.stderr


def test_the_config_widens_writes_adds_denied_paths_and_turns_the_network_on(
    code_puppy_home: Path, repo: Path, home: Path, outside: Path
) -> None:
    (outside / "cache").mkdir()
    (home / "notes.txt").write_text("private notes\n")
    (code_puppy_home / "config.toml").write_text(
        f'[sandbox]\nwritable = ["{outside / "cache"}"]\ndeny_read = ["~/notes.txt"]\nnetwork = true\n'
    )
    with socket.create_server(("127.0.0.1", 0)) as listener:
        script = """
            touch "$1/cache/kept" && echo wrote-cache
            touch "$1/elsewhere" || echo refused-elsewhere
            cat "$HOME/notes.txt"; echo "[end of notes]"
            exec "$2" -c "$3" "$4"
        """
        port = str(listener.getsockname()[1])
        completed = sandboxed(repo, script, str(outside), PYTHON, CONNECT, port, env={"HOME": str(home)})
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split("\n") == ["wrote-cache", "refused-elsewhere", "[end of notes]", "connected", ""]
    assert (outside / "cache" / "kept").exists() and not (outside / "elsewhere").exists()


def test_the_exit_status_is_the_commands(code_puppy_home: Path, repo: Path) -> None:
    assert sandboxed(repo, "exit 7").returncode == 7


def test_a_worktree_can_commit_but_not_touch_the_repositorys_hooks(
    code_puppy_home: Path, repo: Path, outside: Path
) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e"]
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "one"], cwd=repo, check=True)
    worktree = outside / "worktree"
    subprocess.run(["git", "worktree", "add", "-q", str(worktree)], cwd=repo, check=True)
    script = """
        git -c user.name=t -c user.email=t@e commit -q --allow-empty -m two && echo committed
        echo planted > "$1/hooks/pre-commit" || echo refused-hook
    """
    completed = sandboxed(worktree, script, str(repo / ".git"))
    assert completed.stdout.split() == ["committed", "refused-hook"], completed.stderr
    log = subprocess.run(["git", "log", "--format=%s"], cwd=worktree, capture_output=True, text=True, check=True)
    assert log.stdout.split() == ["two", "one"]


def test_no_bwrap_is_one_line(code_puppy_home: Path, repo: Path, tmp_path: Path) -> None:
    (code_puppy_home / "config.toml").write_text(
        f'[sandbox]\nmechanism = "bwrap"\nbwrap = "{tmp_path / "missing" / "bwrap"}"\n'
    )
    checked = run_cli("sandbox", "check", cwd=repo)
    ran = run_cli("sandbox", "run", "--", "true", cwd=repo)
    line = f"code-puppy: sandbox unavailable: no bwrap program at {tmp_path / 'missing' / 'bwrap'} ([sandbox] bwrap)\n"
    assert (checked.returncode, checked.stdout, checked.stderr) == (1, "", line)
    assert (ran.returncode, ran.stderr) == (2, line)


def test_a_bwrap_that_cannot_make_a_sandbox_is_one_line(code_puppy_home: Path, repo: Path, tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    (code_puppy_home / "config.toml").write_text(f'[sandbox]\nmechanism = "bwrap"\nbwrap = "{fake}"\n')
    checked = run_cli("sandbox", "check", cwd=repo)
    assert checked.returncode == 1
    assert checked.stderr.startswith(
        "code-puppy: sandbox unavailable: bwrap cannot make a sandbox here: "
        "bwrap: setting up uid map: Permission denied"
    )
    assert checked.stderr.count("\n") == 1


def test_a_bwrap_that_is_no_program_is_one_line(code_puppy_home: Path, repo: Path, tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_bytes(b"\x00not a program\n")  # executable, but exec(2) refuses it: ENOEXEC
    fake.chmod(0o755)
    (code_puppy_home / "config.toml").write_text(f'[sandbox]\nmechanism = "bwrap"\nbwrap = "{fake}"\n')
    checked = run_cli("sandbox", "check", cwd=repo)
    line = f"code-puppy: sandbox unavailable: {fake} cannot run: [Errno 8] Exec format error: '{fake}'\n"
    assert (checked.returncode, checked.stdout, checked.stderr) == (1, "", line)


def test_sandbox_run_needs_a_command_and_a_known_mechanism(code_puppy_home: Path, repo: Path) -> None:
    missing = run_cli("sandbox", "run", cwd=repo)
    assert missing.returncode == 2 and "Missing argument 'COMMAND...'" in missing.stderr
    (code_puppy_home / "config.toml").write_text('[sandbox]\nmechanism = "seatbelt"\n')
    unknown = run_cli("sandbox", "run", "--", "true", cwd=repo)
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1, unknown.stderr
    assert "sandbox.mechanism" in unknown.stderr and "Traceback" not in unknown.stderr


def test_git_cannot_be_swapped_or_redirected_and_new_agent_config_goes(
    code_puppy_home: Path, project: Path, outside: Path
) -> None:
    subprocess.run(["git", "init", "-q", str(project)], check=True)  # no .code-puppy/ yet: nothing to bind
    script = """
        mv .git .git-old || echo refused-rename
        echo "$1" > .git/commondir && echo wrote-commondir
        mkdir -p .code-puppy && echo '[permissions]' > .code-puppy/config.toml && echo wrote-config
    """
    completed = sandboxed(project, script, str(outside))
    assert completed.stdout.split() == ["refused-rename", "wrote-commondir", "wrote-config"], completed.stderr
    assert (project / ".git" / "HEAD").exists() and not (project / ".git-old").exists()
    assert not (project / ".git" / "commondir").exists() and not (project / ".code-puppy").exists()
    assert "code-puppy: sandbox: The sandbox put back .code-puppy, .code-puppy/config.toml, .git/commondir" in (
        completed.stderr
    )
    runtime = Path(os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}")
    assert "SSH_AUTH_SOCK=" not in sandboxed(project, "env", env={"SSH_AUTH_SOCK": str(runtime / "agent")}).stdout
