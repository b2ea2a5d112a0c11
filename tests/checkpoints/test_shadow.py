"""The shadow repository against real git: what a snapshot keeps and leaves out, byte for byte, and its lock."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from code_puppy.checkpoints.rewind import write_file
from code_puppy.checkpoints.shadow import CheckpointError, ShadowRepo
from code_puppy.trust import trust_project


@pytest.fixture
def shadow(project: Path, code_puppy_home: Path) -> ShadowRepo:
    return ShadowRepo.open(project, code_puppy_home, max_file_mb=1)


def files_in(shadow: ShadowRepo, tree: str) -> list[str]:
    return shadow.git("ls-tree", "-r", "--name-only", "-z", tree).decode().split("\0")[:-1]


def test_whole_ignored_folders_are_left_out_small_ignored_files_kept(project: Path, shadow: ShadowRepo) -> None:
    (project / ".gitignore").write_text("node_modules/\n.env\n*.log\n")
    (project / "node_modules" / "left-pad").mkdir(parents=True)
    (project / "node_modules" / "left-pad" / "index.js").write_text("module.exports = 1\n")
    (project / ".env").write_text("SECRET=1\n")
    (project / "debug.log").write_text("log\n")
    (project / "src").mkdir()
    (project / "src" / "app.py").write_text("x = 1\n")

    tree = shadow.snapshot()

    assert files_in(shadow, tree) == [".env", ".gitignore", "README.md", "debug.log", "src/app.py"]


def test_checkpointignore_and_the_size_limit_leave_files_out_and_list_the_big_ones(
    project: Path, shadow: ShadowRepo
) -> None:
    (project / ".gitignore").write_text("*.secret\n.env\n")
    (project / ".code-puppy").mkdir()
    (project / ".code-puppy" / "checkpointignore").write_text("data/\n*.secret\n")
    (project / "data").mkdir()
    (project / "data" / "set.csv").write_text("1,2\n")
    (project / "key.secret").write_text("k\n")
    (project / ".env").write_text("ignored by git, not by checkpointignore: kept\n")
    (project / "big.bin").write_bytes(b"x" * (1024 * 1024 + 1))
    trust_project(project)  # the checkpointignore is project config: it applies only as trusted

    tree = shadow.snapshot()

    assert files_in(shadow, tree) == [".code-puppy/checkpointignore", ".env", ".gitignore", "README.md"]
    assert shadow.skipped == {"big.bin"}
    (project / ".code-puppy" / "checkpointignore").write_text("*\n")  # changed since trusted: ignored
    assert files_in(shadow, shadow.snapshot()) == [
        ".code-puppy/checkpointignore",
        ".env",
        ".gitignore",
        "README.md",
        "data/set.csv",
        "key.secret",
    ]


def test_the_projects_own_git_state_is_never_touched(repo: Path, shadow: ShadowRepo) -> None:
    subprocess.run(["git", "-C", str(repo), "add", "README.md"], check=True)
    index = (repo / ".git" / "index").read_bytes()
    before = sorted(str(path.relative_to(repo)) for path in (repo / ".git").rglob("*"))
    (repo / "new.txt").write_text("n\n")

    first = shadow.snapshot()
    (repo / "README.md").write_text("changed\n")
    changes = shadow.changes(first, shadow.snapshot())

    assert list(changes) == ["README.md"]
    assert ".git/HEAD" not in files_in(shadow, first)
    assert (repo / ".git" / "index").read_bytes() == index
    assert sorted(str(path.relative_to(repo)) for path in (repo / ".git").rglob("*")) == before


def test_crlf_executable_and_symlink_come_back_exactly(project: Path, shadow: ShadowRepo, outside: Path) -> None:
    # The project's attributes would make git normalise line endings; the shadow repository's own override them.
    (project / ".gitattributes").write_text("* text=auto eol=lf\n")
    (project / "win.txt").write_bytes(b"one\r\ntwo\r\n")
    (project / "run.sh").write_text("#!/bin/sh\n")
    (project / "run.sh").chmod(0o755)
    (outside / "target.txt").write_text("outside\n")
    (project / "link").symlink_to(outside / "target.txt")
    before = shadow.snapshot()
    for name in ("win.txt", "run.sh", "link"):
        (project / name).unlink()
    changes = shadow.changes(before, shadow.snapshot())
    blobs = shadow.read_blobs(old[1] for old, _ in changes.values() if old is not None)

    for path, (old, _) in changes.items():
        assert old is not None
        write_file(project, path, old, blobs[old[1]])

    assert (project / "win.txt").read_bytes() == b"one\r\ntwo\r\n"
    assert os.access(project / "run.sh", os.X_OK)
    assert os.readlink(project / "link") == str(outside / "target.txt")
    assert changes["link"][0] is not None and changes["link"][0][0] == "120000"  # the link, not its target's text


def test_a_write_through_a_symlinked_folder_out_of_the_project_is_refused(project: Path, outside: Path) -> None:
    (project / "escape").symlink_to(outside)
    with pytest.raises(Exception, match="leads outside the project"):
        write_file(project, "escape/x.txt", ("100644", "0" * 40), b"x")
    assert not (outside / "x.txt").exists()


def test_a_second_process_waits_for_the_lock(project: Path, shadow: ShadowRepo) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from code_puppy.checkpoints.shadow import ShadowRepo\n"
            "repo = ShadowRepo.open(Path(sys.argv[1]), Path(sys.argv[2]), max_file_mb=1)\n"
            "with repo.lock():\n    print('held', flush=True); time.sleep(1.5)\n",
            str(project),
            str(shadow.directory.parents[1]),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    started = time.monotonic()
    shadow.snapshot()
    waited = time.monotonic() - started
    holder.communicate()
    assert waited > 0.5 and holder.returncode == 0


def test_opening_while_another_process_is_still_creating_the_repository_waits_for_it(
    project: Path, code_puppy_home: Path
) -> None:
    # Sixteen runs started at once in a new project: one makes the repository while the others open it. They saw
    # git init's HEAD before its config existed and failed reading the config (FileNotFoundError, CI stop 34).
    creator = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from code_puppy.checkpoints.shadow import ShadowRepo\n"
            "repo = ShadowRepo(Path(sys.argv[1]).resolve(), Path(sys.argv[2]), git='git', max_file_bytes=1 << 20)\n"
            "repo.directory.parent.mkdir(parents=True)\n"
            "with repo.lock():\n"
            "    (repo.directory / 'HEAD').write_text('ref: refs/heads/master\\n')  # git init, half way\n"
            "    print('creating', flush=True); time.sleep(1.5)\n"
            "    repo._create()\n",
            str(project),
            str(_shadow_directory(project, code_puppy_home)),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert creator.stdout is not None and creator.stdout.readline() == "creating\n"

    opened = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)

    creator.communicate()
    assert creator.returncode == 0
    assert opened.git("config", "core.splitIndex") == b"true\n"
    assert files_in(opened, opened.snapshot()) == sorted(p.name for p in project.iterdir())


def _shadow_directory(project: Path, code_puppy_home: Path) -> Path:
    return code_puppy_home / "checkpoints" / hashlib.sha256(str(project.resolve()).encode()).hexdigest()[:16]


def test_a_snapshot_after_one_killed_midway_still_works(project: Path, shadow: ShadowRepo) -> None:
    first = shadow.snapshot()
    (shadow.directory / "code-puppy-index.lock").write_text("")  # what git leaves when killed while it writes
    (project / "README.md").write_text("changed\n")

    assert list(shadow.changes(first, shadow.snapshot())) == ["README.md"]


def test_changes_known_from_the_snapshot_are_what_git_finds_between_the_trees(
    project: Path, shadow: ShadowRepo, code_puppy_home: Path, outside: Path
) -> None:
    (project / "edit.txt").write_text("e0\n")
    (project / "same.txt").write_text("s\n")
    (project / "gone.txt").write_text("g\n")
    (project / "run.sh").write_text("#!/bin/sh\n")
    (project / "becomes_dir").write_text("file\n")
    (project / "was_dir").mkdir()
    (project / "was_dir" / "inner.txt").write_text("i\n")
    (project / "link").symlink_to("edit.txt")
    (project / ".gitignore").write_text("*.log\n")
    before = shadow.snapshot()
    (project / "edit.txt").write_bytes(b"e1\r\n")
    os.utime(project / "same.txt", (1, 1))  # touched, same content: no change
    (project / "gone.txt").unlink()
    (project / "run.sh").chmod(0o755)
    (project / "becomes_dir").unlink()
    (project / "becomes_dir").mkdir()
    (project / "becomes_dir" / "x.txt").write_text("x\n")
    (project / "was_dir" / "inner.txt").unlink()
    (project / "was_dir").rmdir()
    (project / "was_dir").write_text("now a file\n")
    (project / "link").unlink()
    (project / "link").symlink_to(outside)
    (project / "new.txt").write_text("n\n")
    (project / "debug.log").write_text("ignored, small: kept\n")
    after = shadow.snapshot()

    known = shadow.changes(before, after)
    from_git = ShadowRepo.open(project, code_puppy_home, max_file_mb=1).changes(before, after)  # a diff-tree

    assert known == from_git
    assert sorted(known) == [
        "becomes_dir", "becomes_dir/x.txt", "debug.log", "edit.txt", "gone.txt", "link", "new.txt", "run.sh",
        "was_dir", "was_dir/inner.txt",
    ]  # fmt: skip
    assert known["run.sh"][1] is not None and known["run.sh"][1][0] == "100755"
    assert known["link"][1] is not None and known["link"][1][0] == "120000"
    blobs = shadow.read_blobs(entry[1] for _, entry in known.values() if entry is not None)
    assert blobs[known["edit.txt"][1][1]] == b"e1\r\n"  # type: ignore[index]
    assert blobs[known["link"][1][1]] == os.fsencode(str(outside))
    # The objects written without git are sound, and the index agrees with the files and the snapshot.
    shadow.git("fsck", "--strict", "--no-dangling")  # raises if git finds anything wrong
    assert shadow.snapshot() == after
    assert shadow.git("status", "--porcelain=v2", "-uall") == b""


def test_a_snapshot_cut_short_after_the_index_is_finished_by_the_next(
    project: Path, shadow: ShadowRepo, code_puppy_home: Path
) -> None:
    (project / "a.txt").write_text("a0\n")
    before = shadow.snapshot()
    (project / "a.txt").write_text("a1\n")
    (project / "b.txt").write_text("b\n")
    shadow.git("update-index", "--add", "a.txt", "b.txt")  # killed before its tree and commit were written

    after = shadow.snapshot()

    known = shadow.changes(before, after)
    assert known == ShadowRepo.open(project, code_puppy_home, max_file_mb=1).changes(before, after)
    assert sorted(known) == ["a.txt", "b.txt"] and known["b.txt"][0] is None
    assert shadow.git("status", "--porcelain=v2", "-uall") == b""


def test_a_snapshot_of_named_files_only_when_the_latest_snapshot_holds_them_and_nobody_else_changed_the_index(
    project: Path, shadow: ShadowRepo, code_puppy_home: Path
) -> None:
    (project / "a.txt").write_text("a0\n")
    before = shadow.snapshot()
    (project / "a.txt").write_text("a1\n")
    (project / "other.txt").write_text("not looked at\n")

    after = shadow.snapshot_files(["a.txt"])

    assert after is not None and after != before
    assert shadow.changes(before, after) == ShadowRepo.open(project, code_puppy_home, max_file_mb=1).changes(
        before, after
    )
    assert list(shadow.changes(before, after)) == ["a.txt"]
    assert shadow.snapshot_files(["new.txt"]) is None  # not in the latest snapshot: only git status knows if ignored
    ShadowRepo.open(project, code_puppy_home, max_file_mb=1).snapshot()  # another process's snapshot
    assert shadow.snapshot_files(["a.txt"]) is None
    assert list(shadow.changes(after, shadow.snapshot())) == ["other.txt"]
    assert shadow.snapshot_files(["a.txt"]) is not None  # its own latest snapshot again


def test_git_variables_of_the_callers_environment_never_reach_the_shadow_repository(
    project: Path, code_puppy_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "users-objects"
    elsewhere.mkdir()
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(elsewhere))  # as inside a git hook or a script of the user's
    shadow = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)
    (project / "a.txt").write_text("a\n")

    tree = shadow.snapshot()

    assert files_in(shadow, tree) == ["README.md", "a.txt"]
    assert list(elsewhere.iterdir()) == []


def test_a_git_failure_is_one_line_naming_the_command_and_git_s_first_line(project: Path, shadow: ShadowRepo) -> None:
    shadow.snapshot()
    with pytest.raises(CheckpointError) as failed:
        shadow.entries("0" * 40, ["README.md"])
    assert str(failed.value) == (
        f"git ls-tree failed in the checkpoints of {project.resolve()}: fatal: not a tree object"
    )


def test_changes_between_any_two_snapshots_not_only_the_latest_pair(project: Path, shadow: ShadowRepo) -> None:
    first = shadow.snapshot()
    (project / "a.txt").write_text("a\n")
    second = shadow.snapshot()
    (project / "b.txt").write_text("b\n")
    third = shadow.snapshot()

    assert sorted(shadow.changes(first, third)) == ["a.txt", "b.txt"]
    assert sorted(shadow.changes(second, third)) == ["b.txt"]
    assert sorted(shadow.changes(first, second)) == ["a.txt"]
    assert shadow.changes(third, third) == {}


def test_a_first_snapshot_of_many_files_stores_them_all_in_one_pack(project: Path, shadow: ShadowRepo) -> None:
    names = [f"src/file{number:03}.py" for number in range(100)]  # more than one snapshot stores file by file
    (project / "src").mkdir()
    for name in names:
        (project / name).write_text(f"# {name}\n")

    first = shadow.snapshot()

    assert files_in(shadow, first) == ["README.md", *names]
    assert len(list((shadow.directory / "objects" / "pack").glob("*.pack"))) == 1
    (project / names[7]).write_text("changed\n")
    second = shadow.snapshot()
    (before, after) = shadow.changes(first, second)[names[7]]
    assert before is not None and after is not None
    assert list(shadow.changes(first, second)) == [names[7]]
    assert shadow.read_blobs([before[1], after[1]]) == {before[1]: f"# {names[7]}\n".encode(), after[1]: b"changed\n"}
    assert shadow.git("status", "--porcelain=v2", "-uall") == b""


def test_maintain_packs_what_the_turn_wrote_and_keeps_every_snapshot(project: Path, shadow: ShadowRepo) -> None:
    first = shadow.snapshot()
    (project / "a.txt").write_text("a\n")
    second = shadow.snapshot()
    assert shadow.git("count-objects").split()[0] != b"0"  # the snapshot's objects are loose

    shadow.maintain()

    assert shadow.git("count-objects").split()[0] == b"0"
    assert list(shadow.changes(first, second)) == ["a.txt"] and files_in(shadow, second) == ["README.md", "a.txt"]
    packs = sorted((shadow.directory / "objects" / "pack").glob("*.pack"))
    shadow.maintain()  # nothing loose: nothing to do
    assert sorted((shadow.directory / "objects" / "pack").glob("*.pack")) == packs


def test_a_repository_made_by_an_earlier_version_is_configured_when_opened(
    project: Path, shadow: ShadowRepo, code_puppy_home: Path
) -> None:
    assert shadow.git("config", "gc.auto") == b"0\n"  # set when it was made: nothing is ever pruned
    shadow.git("config", "--unset", "core.splitIndex")  # as versions before the split index left it
    shadow.git("config", "--remove-section", "splitIndex")

    again = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)

    assert again.git("config", "core.splitIndex") == b"true\n"
    assert again.git("config", "splitIndex.sharedIndexExpire") == b"now\n"


def test_a_temporary_file_a_killed_rewind_left_is_never_written_through(project: Path, outside: Path) -> None:
    (outside / "precious.txt").write_text("the user's, outside the project\n")
    (project / ".app.py.code-puppy-rewind").symlink_to(outside / "precious.txt")  # left behind, or planted
    (project / ".link.code-puppy-rewind").write_text("left behind\n")

    write_file(project, "app.py", ("100644", "0" * 40), b"restored\n")
    write_file(project, "link", ("120000", "0" * 40), b"app.py")

    assert (outside / "precious.txt").read_text() == "the user's, outside the project\n"
    assert (project / "app.py").read_text() == "restored\n" and not (project / "app.py").is_symlink()
    assert os.readlink(project / "link") == "app.py"
    assert sorted(path.name for path in project.iterdir()) == ["README.md", "app.py", "link"]


def test_a_file_of_exactly_the_size_limit_is_kept_one_byte_more_is_skipped(project: Path, shadow: ShadowRepo) -> None:
    limit = 1024 * 1024
    (project / "exact.bin").write_bytes(b"x" * limit)
    (project / "over.bin").write_bytes(b"x" * (limit + 1))

    tree = shadow.snapshot()

    assert files_in(shadow, tree) == ["README.md", "exact.bin"] and shadow.skipped == {"over.bin"}
    (project / "exact.bin").write_bytes(b"y" * limit)  # a file editor's snapshot, of its file alone
    (project / "over.bin").write_bytes(b"y" * (limit + 1))
    edited = shadow.snapshot_files(["exact.bin", "over.bin"])
    assert edited is None  # over.bin is not in the latest snapshot: only a walk knows what it is
    edited = shadow.snapshot_files(["exact.bin"])
    assert edited is not None and list(shadow.changes(tree, edited)) == ["exact.bin"]


def test_a_repository_never_snapshotted_closes_cleanly(project: Path, code_puppy_home: Path) -> None:
    shadow = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)
    shadow.close()
    assert files_in(shadow, shadow.snapshot()) == ["README.md"]  # still usable, each snapshot a walk
    assert shadow.unchanged() is None
