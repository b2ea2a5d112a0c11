"""Runs one command under Landlock:

    python -I -S _landlock_exec.py ABI NETWORK TMPDIR CWD [write PATH]… [deny PATH]… -- COMMAND ARGS…

ABI is the kernel's Landlock ABI, NETWORK 1 or 0 (0: no TCP connect or bind, from ABI 4), TMPDIR the private
temporary directory, CWD where the command runs; each `write PATH` may be written (but what is denied under it), each
`deny PATH` (resolved) is neither read nor written, and everything else may be read. The rules that say so are worked
out here, just before the command starts (`readable_around`, `writable_around`): a folder on the way to a denied path
can hold any number of entries, each a rule, and a command line of them could grow past what the kernel takes. The
restriction is the kernel's and is inherited by everything the command starts; nothing here can lift it. If it cannot
be put in place, the command does not run (exit 125).

Standard library modules written in C only, and run without `site`: the launcher adds a few milliseconds to a
command's start. This file is also where code-puppy reads the rights from.
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct
import sys

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5

READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
WRITE = (
    READ
    | FS_WRITE_FILE
    | FS_REMOVE_DIR
    | FS_REMOVE_FILE
    | FS_MAKE_CHAR
    | FS_MAKE_DIR
    | FS_MAKE_REG
    | FS_MAKE_SOCK
    | FS_MAKE_FIFO
    | FS_MAKE_BLOCK
    | FS_MAKE_SYM
    | FS_REFER
    | FS_TRUNCATE
)
DEVICES = FS_READ_FILE | FS_WRITE_FILE | FS_IOCTL_DEV
"""For /dev: `> /dev/null` and the terminal."""
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
"""The rights a rule on a file (not a directory) may carry."""
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same number on every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
_SIGKILL = 9
SOCKET_VARIABLES = ("DBUS_SESSION_BUS_ADDRESS", "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "DOCKER_HOST")
"""Variables that point a command at another program's socket (the session bus can start processes outside the
sandbox; the agents sign as the user): unset in every sandbox."""
REFUSED = 125
"""The exit status when the sandbox could not be made (the command did not run)."""


_libc = ctypes.CDLL(None, use_errno=True)


def _syscall(number: int, *args: object) -> int:
    """`syscall(number, args…)`, integers passed as C longs and None as NULL."""
    return _libc.syscall(ctypes.c_long(number), *(ctypes.c_long(a) if isinstance(a, int) else a for a in args))


def _prctl(option: int, value: int) -> int:
    return _libc.prctl(ctypes.c_int(option), ctypes.c_long(value), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or disabled."""
    return max(_syscall(_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION), 0)


def handled_fs(abi: int) -> int:
    """The filesystem rights the kernel with Landlock `abi` controls."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def _under(path: str, folder: str) -> bool:
    """Whether `path` lies beneath `folder` (both resolved), not `folder` itself."""
    return path != folder and path.startswith(folder if folder.endswith("/") else folder + "/")


def readable_around(denied: list[str]) -> list[str]:
    """Paths whose trees together hold everything but `denied` (all resolved) and the other processes' folders in
    /proc: Landlock only allows, so a path is left out by allowing, in each folder on the way to it, every other
    entry.

    Landlock does not stop a command from reading another process's /proc/PID/environ (where the user's shell and
    code-puppy keep their API keys), so /proc is allowed but for the numbered folders; `/proc/self` is the launcher's,
    which becomes the command's.
    """
    allowed: list[str] = []

    def cover(directory: str) -> None:
        try:
            entries = sorted(os.scandir(directory), key=lambda item: item.name)
        except OSError:
            return
        for item in entries:
            entry = item.path
            if directory == "/proc" and item.name.isdigit():
                continue
            if entry == "/proc":
                cover(entry)
                continue
            target = os.path.realpath(entry) if item.is_symlink() else entry
            if any(target == path or _under(path, target) for path in denied):
                if target == entry and target not in denied:
                    cover(entry)
                # A link to (or above) a denied path: what is allowed of it is reachable by its real path.
                continue
            if any(_under(target, path) for path in denied):
                continue  # a link into a denied folder
            allowed.append(entry)

    cover("/")
    return allowed


def writable_around(writable: list[str], denied: list[str]) -> list[str]:
    """Paths whose trees together hold everything under `writable` but `denied` (all resolved).

    A Landlock rule covers a whole tree, so a writable folder that holds a denied path (the project is the home folder,
    holding ~/.ssh and code-puppy's own config) is not allowed itself: every entry of each folder on the way to the
    denied path is, but the one leading there. Links are left out: a rule follows them, and their targets inside are
    entries of their own.
    """
    allowed: list[str] = []

    def cover(directory: str) -> None:
        if directory in denied:
            return
        if not any(_under(path, directory) for path in denied):
            allowed.append(directory)
            return
        try:
            entries = sorted(os.scandir(directory), key=lambda item: item.name)
        except OSError:
            return
        for item in entries:
            if not item.is_symlink():
                cover(item.path)

    for folder in writable:
        cover(folder)
    return allowed


def rules_for(writable: list[str], denied: list[str], tmp: str) -> list[tuple[str, int]]:
    """Each path with the rights a rule gives it: read everywhere but `denied`, write in `writable` but `denied` and
    in `tmp`, and the devices."""
    allowed = [(path, READ) for path in readable_around(denied)]
    allowed += [(path, WRITE) for path in (*writable_around(writable, denied), tmp)]
    return [*allowed, ("/dev", DEVICES)]


def _fail(what: str) -> None:
    error = ctypes.get_errno()
    print(f"code-puppy sandbox: landlock: {what}: {os.strerror(error)}", file=sys.stderr)
    sys.exit(REFUSED)


def _restrict(abi: int, rules: list[tuple[str, int]], network: bool) -> None:
    handled = handled_fs(abi)
    fields = [handled]
    if abi >= 4:
        fields.append(0 if network else _NET_BIND_TCP | _NET_CONNECT_TCP)
    if abi >= 6:
        fields.append(_SCOPE_SIGNAL | _SCOPE_ABSTRACT_UNIX_SOCKET)
    packed = struct.pack(f"={len(fields)}Q", *fields)
    ruleset = _syscall(_CREATE_RULESET, ctypes.create_string_buffer(packed, len(packed)), len(packed), 0)
    if ruleset < 0:
        _fail("cannot create a ruleset")
    for path, access in rules:
        try:
            parent = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue  # gone since the rules were computed: nothing to allow
        try:
            if not stat.S_ISDIR(os.fstat(parent).st_mode):
                access &= _FILE_RIGHTS
            rule = struct.pack("=Qi", access & handled, parent)
            if _syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.create_string_buffer(rule, len(rule)), 0) < 0:
                _fail(f"cannot allow {path}")
        finally:
            os.close(parent)
    if _prctl(_PR_SET_NO_NEW_PRIVS, 1):
        _fail("cannot set no_new_privs")
    if _syscall(_RESTRICT_SELF, ruleset, 0) < 0:
        _fail("cannot restrict itself")
    os.close(ruleset)


def _parse(argv: list[str]) -> tuple[int, bool, str, str, list[tuple[str, int]], list[str]]:
    end = argv.index("--")
    pairs = argv[5:end]
    if len(pairs) % 2:
        raise ValueError("a kind without its path")
    paths: dict[str, list[str]] = {"write": [], "deny": []}
    for index in range(0, len(pairs), 2):
        paths[pairs[index]].append(pairs[index + 1])  # KeyError: a kind that is neither
    command = argv[end + 1 :]
    if not command:
        raise ValueError("no command")
    return int(argv[1]), argv[2] == "1", argv[3], argv[4], rules_for(paths["write"], paths["deny"], argv[3]), command


def main(argv: list[str]) -> None:
    try:
        abi, network, tmp, cwd, rules, command = _parse(argv)
    except (ValueError, IndexError, KeyError):
        print(
            "usage: _landlock_exec.py ABI NETWORK TMPDIR CWD [write PATH]… [deny PATH]… -- COMMAND ARGS…",
            file=sys.stderr,
        )
        sys.exit(REFUSED)
    _restrict(abi, rules, network)
    _prctl(_PR_SET_PDEATHSIG, _SIGKILL)  # like bwrap's --die-with-parent: it goes when its starter does
    for name in SOCKET_VARIABLES:
        os.environ.pop(name, None)
    os.environ["TMPDIR"] = tmp
    os.chdir(cwd)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"code-puppy sandbox: {command[0]}: {exc.strerror}", file=sys.stderr)
        sys.exit(127)


if __name__ == "__main__":
    main(sys.argv)
