"""The folder watcher (inotify) that lets the snapshot before a call reuse the latest one: real inotify, real files,
real git, through the `Checkpoints` capability as tool calls use it."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import pytest

from code_puppy.checkpoints import watch
from code_puppy.checkpoints.capability import Checkpoints
from code_puppy.checkpoints.shadow import ShadowRepo
from code_puppy.trust import trust_project

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


@pytest.fixture
def shadow(project: Path, code_puppy_home: Path) -> ShadowRepo:
    (project / "src").mkdir()
    (project / "src" / "app.py").write_text("app0\n")
    (project / "mine.txt").write_text("mine0\n")
    (project / ".gitignore").write_text("node_modules/\nbuild/\n")
    (project / "node_modules" / "dep").mkdir(parents=True)
    (project / "build").mkdir()
    (project / "build" / "out.o").write_text("o0\n")
    shadow = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)
    shadow.snapshot()  # the first, before any turn: the watcher starts after its walk
    return shadow


class Turn:
    """Calls of a turn, each in a model response of its own (a command: anything can change)."""

    def __init__(self, shadow: ShadowRepo) -> None:
        self.shadow = shadow
        self.checkpoints = Checkpoints(shadow)
        self.checkpoints.begin_turn()
        self.responses = 0

    async def call(self, action: Callable[[], object]) -> int:
        """Run `action` as a call; the walks the snapshot before it took."""
        self.responses += 1
        walks = self.shadow.walks
        async with self.checkpoints.tracked(response=("run", self.responses)):
            before = self.shadow.walks - walks
            action()
        assert self.shadow.walks == walks + before + 1  # the snapshot after a call always walks
        return before

    def changes(self) -> list[str]:
        taken = self.checkpoints.take()
        assert taken.failure is None
        return sorted(taken.changes)


async def test_with_nothing_changed_between_calls_the_snapshot_before_is_the_latest_without_a_walk(
    project: Path, shadow: ShadowRepo
) -> None:
    turn = Turn(shadow)
    assert await turn.call(lambda: (project / "a.txt").write_text("a\n")) == 1  # the first walk the watcher knows
    latest = shadow.unchanged()
    assert latest is not None and latest == shadow.snapshot()  # the same tree a walk finds
    assert await turn.call(lambda: (project / "src" / "app.py").write_text("app1\n")) == 0
    assert await turn.call(lambda: (project / "a.txt").unlink()) == 0
    assert turn.changes() == ["src/app.py"]  # a.txt made and removed


async def test_the_users_edit_while_the_model_thinks_is_seen_before_the_next_call_and_is_not_the_agents(
    project: Path, shadow: ShadowRepo
) -> None:
    turn = Turn(shadow)
    await turn.call(lambda: (project / "a.txt").write_text("a\n"))
    await turn.call(lambda: (project / "b.txt").write_text("b\n"))
    (project / "mine.txt").write_text("mine1\n")  # the user, during the model request
    assert await turn.call(lambda: (project / "c.txt").write_text("c\n")) == 1
    (project / "src" / "app.py").touch()  # only its time: still an event, and a walk that finds nothing changed
    assert await turn.call(lambda: None) == 1
    assert await turn.call(lambda: None) == 0
    assert turn.changes() == ["a.txt", "b.txt", "c.txt"]


async def test_a_file_made_in_a_new_folder_between_calls_is_the_users(project: Path, shadow: ShadowRepo) -> None:
    turn = Turn(shadow)
    await turn.call(lambda: (project / "made" / "deep").mkdir(parents=True))  # the command makes folders
    assert await turn.call(lambda: None) == 0  # they are watched from before the walk after the command

    def users() -> None:
        (project / "made" / "deep" / "u.txt").write_text("in the command's new folder\n")
        (project / "new" / "deeper").mkdir(parents=True)
        (project / "new" / "deeper" / "v.txt").write_text("in a folder of the user's\n")

    users()
    assert await turn.call(lambda: (project / "a.txt").write_text("a\n")) == 1
    assert await turn.call(lambda: None) == 0  # the user's new folders are watched now
    (project / "new" / "deeper" / "w.txt").write_text("and one more in it\n")
    assert await turn.call(lambda: None) == 1
    assert turn.changes() == ["a.txt"]


async def test_a_folder_moved_and_an_ignore_rule_changed_between_calls_are_the_users(
    project: Path, shadow: ShadowRepo
) -> None:
    turn = Turn(shadow)
    await turn.call(lambda: None)
    (project / "src").rename(project / "lib")  # the user moves a folder
    assert await turn.call(lambda: None) == 1  # its watches follow it before the walk after the call
    assert await turn.call(lambda: None) == 0
    (project / "lib" / "new.py").write_text("in the moved folder\n")
    assert await turn.call(lambda: None) == 1

    (project / "node_modules" / "dep" / "index.js").write_text("ignored as a whole: not snapshotted, not watched\n")
    assert await turn.call(lambda: None) == 0
    (project / ".gitignore").write_text("build/\n")  # the user un-ignores node_modules
    assert await turn.call(lambda: (project / "a.txt").write_text("a\n")) == 1
    assert await turn.call(lambda: None) == 0  # node_modules is watched from before the walk after that call
    (project / "node_modules" / "dep" / "more.js").write_text("now snapshotted, and watched\n")
    assert await turn.call(lambda: None) == 1
    assert turn.changes() == ["a.txt"]  # not the moved folder, not node_modules/


async def test_at_the_watch_limit_every_snapshot_walks_and_the_users_edits_stay_theirs(
    project: Path, code_puppy_home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for folder in ("a", "b", "c"):
        (project / folder).mkdir()
    monkeypatch.setattr(watch, "MAX_WATCHES", 3)  # the root and two folders: a fourth cannot be watched
    caplog.set_level("DEBUG", logger=watch.__name__)
    shadow = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)
    shadow.snapshot()
    assert "folder watching is off: the watch limit is reached" in caplog.text
    turn = Turn(shadow)
    assert await turn.call(lambda: (project / "a" / "x.txt").write_text("x\n")) == 1
    assert await turn.call(lambda: None) == 1  # no reuse: it cannot know
    (project / "c" / "mine.txt").write_text("the user's\n")
    assert await turn.call(lambda: (project / "b" / "y.txt").write_text("y\n")) == 1
    assert turn.changes() == ["a/x.txt", "b/y.txt"]


async def test_a_limit_reached_by_a_new_folder_later_turns_the_watcher_off_for_good(
    project: Path, shadow: ShadowRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    turn = Turn(shadow)
    await turn.call(lambda: None)
    assert await turn.call(lambda: None) == 0
    monkeypatch.setattr(watch, "MAX_WATCHES", 3)  # root and src are watched; one more folder only
    (project / "one" / "two").mkdir(parents=True)
    (project / "one" / "two" / "mine.txt").write_text("the user's\n")
    assert await turn.call(lambda: (project / "a.txt").write_text("a\n")) == 1
    monkeypatch.setattr(watch, "MAX_WATCHES", None)
    assert await turn.call(lambda: None) == 1
    assert await turn.call(lambda: None) == 1
    assert turn.changes() == ["a.txt"]


async def test_a_closed_repository_walks_before_every_call(project: Path, shadow: ShadowRepo) -> None:
    turn = Turn(shadow)
    await turn.call(lambda: None)
    assert await turn.call(lambda: None) == 0
    shadow.close()
    assert await turn.call(lambda: None) == 1
    assert await turn.call(lambda: None) == 1


async def test_another_process_snapshotting_the_project_means_a_walk(
    project: Path, shadow: ShadowRepo, code_puppy_home: Path
) -> None:
    turn = Turn(shadow)
    await turn.call(lambda: None)
    assert await turn.call(lambda: None) == 0
    other = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)  # as a second code-puppy would
    (project / "mine.txt").write_text("mine1\n")
    other.snapshot()
    other.close()
    assert await turn.call(lambda: None) == 1
    assert turn.changes() == []


async def test_a_deleted_folder_and_a_project_without_folders_left(project: Path, shadow: ShadowRepo) -> None:
    turn = Turn(shadow)
    await turn.call(lambda: None)
    shutil.rmtree(project / "src")  # the user
    assert await turn.call(lambda: (project / "a.txt").write_text("a\n")) == 1
    assert await turn.call(lambda: None) == 0
    assert turn.changes() == ["a.txt"]


async def test_a_checkpointignore_change_in_a_folder_git_ignores_is_seen(project: Path, shadow: ShadowRepo) -> None:
    (project / ".code-puppy").mkdir()
    (project / ".code-puppy" / "checkpointignore").write_text("private/\n")
    (project / "private").mkdir()
    (project / "private" / "notes.txt").write_text("the user's\n")
    (project / ".gitignore").write_text("node_modules/\nbuild/\n.code-puppy/\n")  # its folder: not watched
    trust_project(project)
    turn = Turn(shadow)
    await turn.call(lambda: None)
    assert await turn.call(lambda: None) == 0
    (project / ".code-puppy" / "checkpointignore").write_text("")  # private/ is snapshotted from now on
    assert await turn.call(lambda: (project / "a.txt").write_text("a\n")) == 1
    assert turn.changes() == ["a.txt"]  # not private/notes.txt


async def test_a_filesystem_not_known_to_be_local_is_not_watched(
    project: Path, code_puppy_home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(watch, "_LOCAL", frozenset())  # as if the project were on NFS: statfs says what it is
    caplog.set_level("DEBUG", logger=watch.__name__)
    shadow = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)
    shadow.snapshot()
    assert "is not on a local filesystem" in caplog.text
    turn = Turn(shadow)
    await turn.call(lambda: None)
    assert await turn.call(lambda: None) == 1


async def test_more_new_folders_at_once_than_a_drain_watches_are_left_to_the_walk_and_the_next_sync(
    project: Path, shadow: ShadowRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "NEW_FOLDERS_AT_ONCE", 2)
    turn = Turn(shadow)
    await turn.call(lambda: (project / "one" / "two" / "three" / "four").mkdir(parents=True))
    assert await turn.call(lambda: None) == 1  # not all were watched before the walk after the command
    assert await turn.call(lambda: None) == 0  # they are since the sync after it
    (project / "one" / "two" / "three" / "four" / "mine.txt").write_text("the user's\n")
    assert await turn.call(lambda: (project / "a.txt").write_text("a\n")) == 1
    assert turn.changes() == ["a.txt"]


async def test_a_change_to_the_users_global_ignore_file_is_seen(
    project: Path, code_puppy_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config"
    (config / "git").mkdir(parents=True)
    (config / "git" / "ignore").write_text("scratch/\n")  # outside the project: no folder watch sees it
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    (project / "scratch").mkdir()
    (project / "scratch" / "notes.txt").write_text("the user's\n")
    shadow = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)
    shadow.snapshot()
    turn = Turn(shadow)
    await turn.call(lambda: None)
    assert await turn.call(lambda: None) == 0
    (config / "git" / "ignore").write_text("")  # scratch/ is snapshotted from now on
    assert await turn.call(lambda: (project / "a.txt").write_text("a\n")) == 1
    assert turn.changes() == ["a.txt"]  # not scratch/notes.txt


async def test_a_folder_moved_in_from_outside_between_calls_is_watched_and_an_edit_in_it_is_the_users(
    project: Path, shadow: ShadowRepo, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere" / "brought"
    (elsewhere / "deep").mkdir(parents=True)
    (elsewhere / "deep" / "kept.txt").write_text("k0\n")
    turn = Turn(shadow)
    await turn.call(lambda: None)
    elsewhere.rename(project / "brought")  # the user moves a folder in from outside the project
    assert await turn.call(lambda: None) == 1
    assert await turn.call(lambda: None) == 0  # its folders are watched: nothing changed since
    (project / "brought" / "deep" / "kept.txt").write_text("k1, the user's\n")
    assert await turn.call(lambda: (project / "a.txt").write_text("a\n")) == 1
    assert turn.changes() == ["a.txt"]


async def test_a_write_right_after_a_walks_git_status_is_never_lost_to_a_reused_snapshot(
    project: Path, shadow: ShadowRepo
) -> None:
    turn = Turn(shadow)
    await turn.call(lambda: None)
    written: list[str] = []

    def user_saves_after_status(frame: FrameType, event: str, arg: object) -> None:
        # The moment `git status` of the walk after the call returns, before the snapshot is finished: a write there
        # is not in that snapshot, and only the watcher can tell.
        status = event == "return" and frame.f_code is ShadowRepo.git.__code__ and frame.f_locals["args"][0] == "status"
        if status and not written:
            (project / "mine.txt").write_text("mine1\n")
            written.append("mine.txt")

    sys.setprofile(user_saves_after_status)
    try:
        assert await turn.call(lambda: (project / "a.txt").write_text("a\n")) == 0
    finally:
        sys.setprofile(None)
    assert written == ["mine.txt"]
    assert shadow.unchanged() is None
    assert await turn.call(lambda: None) == 1
    assert await turn.call(lambda: None) == 0
    assert turn.changes() == ["a.txt"]  # not mine.txt


async def test_as_many_new_folders_as_a_drain_watches_are_all_watched_at_once(
    project: Path, shadow: ShadowRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "NEW_FOLDERS_AT_ONCE", 2)
    turn = Turn(shadow)
    await turn.call(lambda: (project / "one" / "two").mkdir(parents=True))
    assert await turn.call(lambda: None) == 0  # both watched before the walk after the command: no doubt left
    (project / "one" / "two" / "mine.txt").write_text("the user's\n")
    assert await turn.call(lambda: (project / "a.txt").write_text("a\n")) == 1
    assert turn.changes() == ["a.txt"]


async def test_an_edit_of_the_users_inside_folders_a_command_made_is_seen(project: Path, shadow: ShadowRepo) -> None:
    def command() -> None:  # two folders: their events are read together, the second after the first
        (project / "also").mkdir()
        (project / "made" / "deep").mkdir(parents=True)

    turn = Turn(shadow)
    await turn.call(command)
    assert await turn.call(lambda: None) == 0
    (project / "made" / "deep" / "mine.txt").write_text("the user's, in the command's folder\n")  # no other event
    assert await turn.call(lambda: (project / "a.txt").write_text("a\n")) == 1
    assert turn.changes() == ["a.txt"]


async def test_another_processs_snapshot_of_a_change_no_event_shows_means_a_walk(
    project: Path, shadow: ShadowRepo, code_puppy_home: Path, tmp_path: Path
) -> None:
    link = tmp_path / "outside-link"
    os.link(project / "mine.txt", link)  # the same file, through a folder the watcher does not see
    turn = Turn(shadow)
    await turn.call(lambda: None)
    assert await turn.call(lambda: None) == 0
    link.write_text("mine1, written through the link\n")  # the user: no event in the project's folders
    other = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)  # a second code-puppy's walk sees it
    other.snapshot()
    other.close()
    assert await turn.call(lambda: None) == 1
    assert turn.changes() == []  # the user's change, not the call's
