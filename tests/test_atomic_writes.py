"""`paths.write_atomically`, the one atomic write of code-puppy's own files (trust, rewind records, `--usage-file`)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from code_puppy.paths import write_atomically, write_json
from tests.unprivileged import unprivileged


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_private_file_is_0600_and_another_follows_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        write_atomically(tmp_path / "secret", "s", private=True)
        write_atomically(tmp_path / "plain", "p")
        write_json(tmp_path / "state" / "trusted.json", {"a": 1})
    finally:
        os.umask(old)
    assert (mode(tmp_path / "secret"), mode(tmp_path / "plain")) == (0o600, 0o640)
    assert mode(tmp_path / "state" / "trusted.json") == 0o600 and mode(tmp_path / "state") == 0o700
    assert (tmp_path / "state" / "trusted.json").read_text() == '{\n "a": 1\n}\n'


def test_a_write_that_fails_keeps_the_old_file_and_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "usage.json"
    write_atomically(target, "old\n")
    with pytest.raises(UnicodeEncodeError):
        write_atomically(target, "half \udc80 written")  # fails while the new content is being written
    assert target.read_text() == "old\n" and sorted(path.name for path in tmp_path.iterdir()) == ["usage.json"]
    with pytest.raises(FileNotFoundError):
        write_atomically(tmp_path / "missing" / "usage.json", "x")


def test_a_folder_that_can_be_written_but_not_read_still_takes_the_file() -> None:
    """Syncing the folder needs to open it for reading; the file is written whether or not that works. Root reads
    any folder, so this runs as an unprivileged user."""
    runner = unprivileged()
    with runner.workdir() as home:
        folder = home / "drop"
        folder.mkdir()
        os.chown(folder, runner.uid, runner.gid)
        folder.chmod(0o300)  # write and search, no read
        written = subprocess.run(
            [*runner.prefix, sys.executable, "-c", WRITE, str(folder / "usage.json")],
            cwd=home,
            capture_output=True,
            text=True,
            timeout=60,
        )
        folder.chmod(0o700)
        assert (written.returncode, written.stderr) == (0, "")
        assert (folder / "usage.json").read_text() == "{}\n"


WRITE = "import sys; from pathlib import Path; from code_puppy.paths import write_atomically; " + (
    "write_atomically(Path(sys.argv[1]), '{}\\n')"
)
