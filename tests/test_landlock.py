"""The Landlock mechanism (`[sandbox] mechanism = "landlock"`), forced, with the kernel's real Landlock: what it
confines, what it puts back, and what `sandbox check` says it cannot do. No skips: a kernel without Landlock fails
here (this machine's has ABI 7)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from code_puppy.sandbox._landlock_exec import SOCKET_VARIABLES
from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.test_mcp import tool_results
from tests.test_sandbox import CONNECT, PYTHON, sandboxed


@pytest.fixture(autouse=True)
def landlock(code_puppy_home: Path) -> None:
    force_landlock(code_puppy_home)


def force_landlock(home: Path) -> None:
    config = home / "config.toml"
    config.write_text((config.read_text() if config.exists() else "") + '[sandbox]\nmechanism = "landlock"\n')


def test_check_says_landlock_and_every_probe_holds(repo: Path, home: Path) -> None:
    completed = run_cli("sandbox", "check", cwd=repo, env={"HOME": str(home)})
    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0].startswith("sandbox: Landlock ABI ")
    assert sum(line.startswith("  ✓ ") for line in lines) == 6 and "✗" not in completed.stdout
    assert "3 denied paths present here are hidden" in completed.stdout
    assert "  ✓ signals to processes outside the sandbox are refused" in lines
    unconfined = [line.split(":")[1].split(",")[0].strip() for line in lines if line.startswith("  not confined: ")]
    assert unconfined == [  # nothing the kernel (ABI 7) confines: signals are refused, TCP is
        "inside the project",
        "a command that detaches itself into a new session outlives the run",
        "Unix sockets of other programs (the session bus",
        "UDP and other non-TCP traffic",
    ]
    assert any(line.startswith("  limit: /tmp is the host's and read-only") for line in lines)


def test_a_command_writes_the_project_and_its_tmpdir_and_nothing_else(repo: Path, home: Path, outside: Path) -> None:
    (repo / "escape").symlink_to(outside)
    script = """
        touch inside.txt && echo created
        touch "$1/outside.txt" || echo refused-outside
        touch "$HOME/at-home.txt" || echo refused-home
        touch escape/through-link.txt || echo refused-link
        touch /tmp/scratch-$$ || echo refused-tmp
        touch "$TMPDIR/scratch" && echo private-tmp
        echo loosened >> .code-puppy/config.toml && echo wrote-config
        echo 'echo planted' > .git/hooks/pre-commit && echo wrote-hook
    """
    completed = sandboxed(repo, script, str(outside), env={"HOME": str(home)})
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == [
        "created",
        "refused-outside",
        "refused-home",
        "refused-link",
        "refused-tmp",
        "private-tmp",
        "wrote-config",  # Landlock cannot refuse these…
        "wrote-hook",
    ]
    assert completed.stderr.count("Permission denied") == 4, completed.stderr
    assert (repo / "inside.txt").exists() and list(outside.rglob("*.txt")) == []
    # …so they are put back once the command is over, and the user is told.
    assert (repo / ".code-puppy" / "config.toml").read_text() == "# the project's config\n"
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    (note,) = [line for line in completed.stderr.splitlines() if line.startswith("code-puppy: sandbox:")]
    assert note.startswith(
        "code-puppy: sandbox: The sandbox put back .code-puppy/config.toml, .git/hooks/pre-commit: commands may not "
        "change the files that configure code-puppy, other agents or git. The changed versions are in "
    )
    backup = Path(note.rsplit(" ", 1)[1].rstrip("."))  # what was put back is kept
    assert (backup / ".code-puppy" / "config.toml").read_text() == "# the project's config\nloosened\n"
    assert (backup / ".git" / "hooks" / "pre-commit").read_text() == "echo planted\n"


def test_secrets_denied_paths_and_other_processes_stay_out_of_reach(
    code_puppy_home: Path, repo: Path, home: Path
) -> None:
    sleeper = subprocess.Popen(["sleep", "30"], env={"OPENAI_API_KEY": "sk-in-another-process"})
    try:
        script = """
            echo "key=${OPENAI_API_KEY:-absent} marker=$HARMLESS_MARKER"
            cat "$HOME/.ssh/id_ed25519" "$HOME/.netrc" "$CODE_PUPPY_HOME/config.toml" 2>/dev/null || echo unreadable
            ls "$HOME/.ssh" 2>/dev/null || echo unlisted
            cat "/proc/$1/environ" "/proc/$PPID/environ" 2>/dev/null || echo no-environ
            kill -0 "$1" 2>/dev/null || echo no-signal
            echo "sockets=${SSH_AUTH_SOCK-}${DBUS_SESSION_BUS_ADDRESS-}${GPG_AGENT_INFO-}${DOCKER_HOST-}"
        """
        env = {"HOME": str(home), "OPENAI_API_KEY": "sk-sandbox-canary", "HARMLESS_MARKER": "kept"}
        env |= {name: f"/run/{name.lower()}" for name in SOCKET_VARIABLES}
        completed = sandboxed(repo, script, str(sleeper.pid), env=env)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert completed.returncode == 0, completed.stderr
    expected = ["key=absent marker=kept", "unreadable", "unlisted", "no-environ", "no-signal", "sockets="]
    assert completed.stdout.splitlines() == expected


def test_tcp_is_off_unless_asked_for(repo: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = str(listener.getsockname()[1])
        refused = sandboxed(repo, 'exec "$1" -c "$2" "$3"', PYTHON, CONNECT, port)
        allowed = sandboxed(repo, 'exec "$1" -c "$2" "$3"', PYTHON, CONNECT, port, network=True)
    assert refused.returncode == 1 and "PermissionError" in refused.stderr, refused.stderr
    assert (allowed.returncode, allowed.stdout) == (0, "connected\n"), allowed.stderr


def test_auto_falls_back_to_landlock_when_bwrap_cannot_work(code_puppy_home: Path, repo: Path) -> None:
    (code_puppy_home / "config.toml").write_text('[sandbox]\nbwrap = "/nonexistent/bwrap"\n')  # mechanism = "auto"
    completed = run_cli("sandbox", "check", cwd=repo)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("sandbox: Landlock ABI ")


def test_headless_auto_under_landlock_confines_commands_and_puts_the_config_back(
    server: FakeLLMServer, code_puppy_home: Path, outside: Path
) -> None:
    force_landlock(code_puppy_home)  # again: the server's fixture wrote its own config
    project = outside / "project"
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / ".code-puppy").mkdir()
    (project / ".code-puppy" / "config.toml").write_text('model = "fake"\n')
    server.script(
        tool_calls(
            call("shell", {"command": "touch inside.txt && touch ../outside.txt"}),
            call("shell", {"command": "echo '[x]' >> .code-puppy/config.toml; echo x > .git/hooks/post-merge"}),
        ),
        text("done"),
    )
    completed = run_cli("-p", "try", "--permission-mode", "auto", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "done\n"), completed.stderr
    escape, loosen = tool_results(server.requests[1].body)
    assert "Permission denied" in escape and not (outside / "outside.txt").exists()
    assert (project / "inside.txt").exists()
    assert "\n[The sandbox put back .code-puppy/config.toml, .git/hooks/post-merge: commands may not change" in loosen
    assert (project / ".code-puppy" / "config.toml").read_text() == 'model = "fake"\n'
    assert not (project / ".git" / "hooks" / "post-merge").exists()


def test_a_denied_path_among_thousands_of_entries_stays_hidden_from_the_models_commands(
    server: FakeLLMServer, code_puppy_home: Path, outside: Path
) -> None:
    """Each other entry of a folder on the way to a denied path is a rule of its own: thousands of them (a busy /tmp,
    a home folder) once made the shell tool's command line longer than the kernel takes, and every command failed."""
    crowd = outside / "crowd"
    crowd.mkdir()
    for index in range(3000):
        (crowd / f"{index:04}-{'an-entry-with-a-name-long-enough-to-matter' * 2}").touch()
    (crowd / "secret").write_text("the secret\n")
    force_landlock(code_puppy_home)
    with (code_puppy_home / "config.toml").open("a") as config:
        config.write(f'deny_read = ["{crowd / "secret"}"]\n')
    project = outside / "project"
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / ".code-puppy").mkdir()
    (project / ".code-puppy" / "config.toml").write_text('model = "fake"\n')
    sibling = next(crowd.glob("0001-*"))
    read = f"cat {crowd / 'secret'} || echo refused; ls {sibling} && echo listed; touch inside && echo wrote"
    server.script(tool_calls(call("shell", {"command": read})), text("done"))
    completed = run_cli("-p", "try", "--permission-mode", "auto", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "done\n"), completed.stderr
    (result,) = tool_results(server.requests[1].body)
    assert "Permission denied" in result and "the secret" not in result, result
    assert ["refused", str(sibling), "listed", "wrote"] == [
        line for line in result.splitlines() if line in ("refused", str(sibling), "listed", "wrote")
    ], result


def test_a_project_at_home_keeps_credentials_and_code_puppys_own_files_out_of_reach(home: Path) -> None:
    """The project root is the home folder, which holds ~/.ssh and code-puppy's own config: a Landlock rule on the
    root would cover them, so they stay neither readable nor writable, and the rest of the home folder is writable."""
    own = home / ".config" / "code-puppy"
    own.mkdir(parents=True)
    (own / "config.toml").write_text('[sandbox]\nmechanism = "landlock"\n')
    (home / ".ssh" / "authorized_keys").write_text("ssh-ed25519 AAAA the-users-key\n")
    (home / "work").mkdir()
    script = """
        echo '[permissions]' >> "$1/config.toml" 2>/dev/null || echo config-refused
        cat "$1/config.toml" >/dev/null 2>&1 || echo config-unreadable
        echo 'ssh-ed25519 AAAA attacker' >> .ssh/authorized_keys 2>/dev/null || echo keys-refused
        cat .ssh/id_ed25519 >/dev/null 2>&1 || echo key-unreadable
        touch work/inside.txt && echo wrote-inside
        cat .netrc >/dev/null 2>&1 || echo netrc-unreadable
    """
    env = {"HOME": str(home), "CODE_PUPPY_HOME": str(own)}
    completed = sandboxed(home, script, str(own), env=env)
    assert completed.stdout.split() == [
        "config-refused",
        "config-unreadable",
        "keys-refused",
        "key-unreadable",
        "wrote-inside",
        "netrc-unreadable",
    ], completed.stderr
    assert (own / "config.toml").read_text() == '[sandbox]\nmechanism = "landlock"\n'
    assert (home / ".ssh" / "authorized_keys").read_text() == "ssh-ed25519 AAAA the-users-key\n"
    assert (home / "work" / "inside.txt").exists()

    check = run_cli("sandbox", "check", cwd=home, env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    limit = f"  limit: in {home}, {home / '.config'} (they hold denied paths) commands cannot create, remove or rename"
    assert any(line.startswith(limit) for line in check.stdout.splitlines()), check.stdout


def test_every_kind_of_entry_can_be_made_changed_and_removed_inside_the_project_and_none_outside(
    repo: Path, outside: Path
) -> None:
    """Each right the project gets is used once (a wrong bit in the launcher's table refuses one of these), and none
    of them reaches a folder outside."""
    script = """
        mkdir work && cd work || exit 9
        mkdir d && echo mkdir
        rmdir d && echo rmdir
        echo x > f && echo create
        echo y >> f && echo append
        truncate -s 1 f && echo truncate
        : > f && echo open-truncating
        printf '#!/bin/sh\\necho ran\\n' > run.sh && chmod +x run.sh && ./run.sh
        ln -s f l && echo symlink
        ln f h && echo hardlink
        mkfifo p && echo fifo
        "$2" -c 'import socket; socket.socket(socket.AF_UNIX).bind("s")' && echo socket
        if [ "$(id -u)" = 0 ]; then mknod c c 1 3 && echo char; mknod b b 7 0 && echo block; fi
        mv f g && echo rename
        mkdir sub && mv g sub/g && echo move-between-folders
        ls sub && cd .. && rm -r work && echo removed
        touch "$1/file" 2>/dev/null || echo refused-file
        mkdir "$1/dir" 2>/dev/null || echo refused-dir
        mkfifo "$1/fifo" 2>/dev/null || echo refused-fifo
        ln -s / "$1/link" 2>/dev/null || echo refused-link
        "$2" -c 'import os, sys; os.truncate(sys.argv[1], 0)' "$1/kept" 2>/dev/null || echo refused-truncate
    """
    (outside / "kept").write_text("the user's\n")
    completed = sandboxed(repo, script, str(outside), PYTHON)
    made = ["mkdir", "rmdir", "create", "append", "truncate", "open-truncating", "ran", "symlink", "hardlink", "fifo"]
    made += ["socket", *(["char", "block"] if os.geteuid() == 0 else []), "rename", "move-between-folders", "g"]
    refused = ["refused-file", "refused-dir", "refused-fifo", "refused-link", "refused-truncate"]
    assert completed.stdout.split() == [*made, "removed", *refused], completed.stderr
    assert list(outside.iterdir()) == [outside / "kept"] and not (repo / "work").exists()
    assert (outside / "kept").read_text() == "the user's\n"


def test_abstract_unix_sockets_outside_are_out_of_reach(repo: Path) -> None:
    """An abstract socket has no path for a rule to refuse (the session bus and X11 listen on some): from Landlock ABI 6
    they are scoped to the sandbox."""
    name = f"code-puppy-test-{os.getpid()}"
    connect = "import socket, sys; socket.socket(socket.AF_UNIX).connect('\\0' + sys.argv[1]); print('reached')"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind("\0" + name)
        listener.listen()
        completed = sandboxed(repo, 'exec "$1" -c "$2" "$3"', PYTHON, connect, name)
    assert completed.returncode == 1 and "PermissionError" in completed.stderr, completed.stdout + completed.stderr


IOCTL = """
import errno, fcntl, sys, termios
for path in sys.argv[1:]:
    with open(path, "rb") as device:
        try:
            fcntl.ioctl(device, termios.TCGETS, bytes(64))
        except OSError as error:
            print(path, errno.errorcode[error.errno])
"""


def test_device_ioctls_reach_dev_and_no_device_node_in_the_project(repo: Path) -> None:
    """ioctl on a device is a right of its own (Landlock ABI 5): /dev has it (the terminal), the project does not, so a
    device node made there (root can) cannot be driven. /dev/null answers TCGETS with ENOTTY once it is let through."""
    paths = ["/dev/null"]
    if os.geteuid() == 0:
        os.mknod(repo / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        paths.append("null")
    completed = sandboxed(repo, 'p=$1 c=$2; shift 2; exec "$p" -c "$c" "$@"', PYTHON, IOCTL, *paths)
    expected = ["/dev/null ENOTTY", *(["null EACCES"] if os.geteuid() == 0 else [])]
    assert completed.stdout.splitlines() == expected, completed.stderr


def test_proc_is_readable_but_for_the_other_processes_folders(repo: Path) -> None:
    """/proc stays readable (`ps`-free tools read /proc/cpuinfo, a shell its own /proc/self), but no other process's
    folder is: their environments hold the user's keys."""
    script = """
        head -c 1 /proc/cpuinfo >/dev/null && echo cpuinfo
        read -r line < /proc/self/status && echo self
        cat /proc/1/environ >/dev/null 2>&1 || echo refused-other
    """
    completed = sandboxed(repo, script)
    assert completed.stdout.split() == ["cpuinfo", "self", "refused-other"], completed.stderr
