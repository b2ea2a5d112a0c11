"""Process hardening at start (DESIGN §5 "Secrets"), as Codex does it.

The provider keys live in code-puppy's own environment and memory. The shell tool's children never get them
(`SECRET_ENV_PATTERNS`), but a child running as the same user could still read `/proc/<code-puppy>/environ` or
`/proc/<code-puppy>/mem`, or find them in a core file. `LD_LIBRARY_PATH`-style variables are deliberately left in
the children's environment: Codex stripped them and withdrew it, since it broke CUDA, MKL and conda setups.
"""

from __future__ import annotations

import sys

PR_SET_DUMPABLE = 4
"""From <linux/prctl.h>: 0 makes `/proc/PID/environ`, `/proc/PID/mem` and ptrace unavailable to other processes of
the same user (root keeps access), until the next `execve`, so children are unaffected."""


def harden_process() -> str | None:
    """Make this process non-dumpable and disable its core dumps; returns why that failed, or None.

    A no-op on platforms without either (Windows; macOS has no `prctl`, core limits only).
    """
    if sys.platform == "win32":
        return None
    import resource

    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (OSError, ValueError) as exc:
        return f"cannot disable core dumps: {exc}"
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import os

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        return f"cannot make the process non-dumpable: prctl: {os.strerror(ctypes.get_errno())}"
    return None
