"""`Rewinder` in-process on real git and real SQLite: turns recorded as a run records them (`record_turn`), then
rewound, with every field of the result checked; and the pieces the command line and the chat print."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from code_puppy.checkpoints.capability import TurnChanges
from code_puppy.checkpoints.rewind import (
    RECORD,
    Rewinder,
    RewindResult,
    Turn,
    describe_rewind,
    finish_interrupted_rewind,
    interrupted_line,
    open_shadow,
    record_turn,
    user_turns,
)
from code_puppy.checkpoints.shadow import ShadowRepo
from code_puppy.config import ConfigError
from code_puppy.sessions.checkpoints import Checkpoint, CheckpointLog
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore


class Project:
    """A project with a shadow repository and a session whose turns are recorded as a run records them."""

    def __init__(self, root: Path, store: SqliteConversationStore, shadow: ShadowRepo, session: Session) -> None:
        self.root, self.store, self.shadow, self.session = root, store, shadow, session
        self.log = CheckpointLog(store.database)
        self.rewinder = Rewinder(store, root, shadow)

    async def turn(self, prompt: str, change: Callable[[Path], object] | None = None) -> int | None:
        """A user turn of one run: its prompt and answer join the history; what `change` does to the files is its
        checkpoint (none when it changes nothing)."""
        run_id = f"run-{len(self.session.messages)}"
        before = self.shadow.snapshot()
        await self.session.set_message_history(
            [
                *self.session.messages,
                ModelRequest(parts=[UserPromptPart(prompt)], run_id=run_id),
                ModelResponse(parts=[TextPart(f"{prompt}: done")], run_id=run_id),
            ]
        )
        if change is not None:
            change(self.root)
        changes = self.shadow.changes(before, self.shadow.snapshot())
        checkpoint, note = record_turn(TurnChanges(changes), self.session, prompt, [run_id])
        assert note is None
        return checkpoint

    def files(self) -> dict[str, str]:
        return {
            str(path.relative_to(self.root)): path.read_text()
            for path in sorted(self.root.rglob("*"))
            if path.is_file()
        }

    def kinds(self) -> list[tuple[str, bool]]:
        return [(item.kind, item.rewound_at is not None) for item in self.log.of_session(self.session.id)]


@pytest.fixture
async def project_(project: Path, store: SqliteConversationStore, code_puppy_home: Path) -> Project:
    (project / "app.py").write_text("version = 1\n")
    (project / "doomed.txt").write_text("keep me\n")
    shadow = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)
    session = await Session.start(store, project, model="test")
    return Project(project, store, shadow, session)


def prompts(messages: list[ModelMessage]) -> list[str]:
    return [turn.prompt for turn in user_turns(messages)]


def agent_changes(root: Path) -> None:
    (root / "app.py").write_text("version = 2\n")
    (root / "doomed.txt").unlink()
    (root / "made").mkdir()
    (root / "made" / "new.py").write_text("new\n")


async def test_a_rewind_puts_every_file_back_branches_the_conversation_and_is_a_checkpoint_itself(
    project_: Project,
) -> None:
    original = project_.files()
    await project_.turn("just talk")
    turn = await project_.turn("change things", agent_changes)
    assert turn is not None
    changed = project_.files()
    session = project_.session

    result = await project_.rewinder.rewind(session)

    assert project_.files() == original
    assert not (project_.root / "made").exists()  # the folder its file left empty goes too
    assert [checkpoint.id for checkpoint in result.checkpoints] == [turn]
    assert (result.conflicts, result.unrestorable, result.applied) == ([], [], True)
    assert result.turn is not None and (result.turn.index, result.turn.prompt) == (2, "change things")
    assert (result.messages_before, result.messages_after) == (4, 2)
    assert prompts(session.messages) == ["just talk"]
    assert result.rewind_checkpoint is not None
    assert project_.kinds() == [("turn", True), ("rewind", False)]
    rewind = project_.log.get(result.rewind_checkpoint)
    assert rewind is not None and (rewind.kind, rewind.prompt, rewind.run_ids) == ("rewind", "", ())
    assert sorted(rewind.changes) == ["app.py", "doomed.txt", "made/new.py"]
    assert result.writes["made/new.py"] is None and result.current["doomed.txt"] is None
    blobs = project_.shadow.read_blobs(
        entry[1] for change in rewind.changes.values() for entry in change if entry is not None
    )
    assert {path: tuple(blobs[e[1]] if e else None for e in change) for path, change in rewind.changes.items()} == {
        "app.py": (b"version = 2\n", b"version = 1\n"),
        "doomed.txt": (None, b"keep me\n"),
        "made/new.py": (b"new\n", None),
    }
    assert not (project_.shadow.directory / RECORD).exists()

    again = await project_.rewinder.rewind(session)  # the rewind is undoable: the agent's changes come back

    assert project_.files() == changed
    assert [checkpoint.id for checkpoint in again.checkpoints] == [result.rewind_checkpoint]
    assert again.turn is None and prompts(session.messages) == ["just talk"]  # undoing a rewind keeps the history
    assert project_.kinds() == [("turn", True), ("rewind", True), ("rewind", False)]


async def test_two_turns_over_one_file_go_back_to_before_the_first(project_: Project) -> None:
    first = await project_.turn("one", lambda root: (root / "app.py").write_text("version = 2\n"))
    second = await project_.turn("two", lambda root: (root / "app.py").write_text("version = 3\n"))
    third = await project_.turn("three", lambda root: (root / "other.txt").write_text("other\n"))
    expected = project_.shadow.entries(project_.shadow.snapshot(), ["other.txt"])

    result = await project_.rewinder.rewind(project_.session, turns=2)

    assert [checkpoint.id for checkpoint in result.checkpoints] == [third, second]  # newest first
    assert (project_.root / "app.py").read_text() == "version = 2\n"  # before the earlier of the two: `two`'s
    assert not (project_.root / "other.txt").exists()
    assert result.current["other.txt"] == expected["other.txt"] and result.writes["other.txt"] is None
    assert prompts(project_.session.messages) == ["one"]
    assert project_.kinds() == [("turn", False), ("turn", True), ("turn", True), ("rewind", False)]
    assert first is not None


async def test_a_file_the_user_changed_since_is_a_conflict_and_force_keeps_their_version_to_rewind_to(
    project_: Project,
) -> None:
    await project_.turn("change things", agent_changes)
    (project_.root / "app.py").write_text("version = 2\nmine = True\n")  # the user
    (project_.root / "made" / "new.py").unlink()  # and this one the user put back as it was before the turn
    theirs = project_.files()

    refused = await project_.rewinder.rewind(project_.session)

    assert (refused.conflicts, refused.applied) == (["app.py"], False)
    assert sorted(refused.writes) == ["app.py", "doomed.txt"]  # new.py is already as the rewind would leave it
    assert project_.files() == theirs and len(project_.session.messages) == 2
    assert project_.kinds() == [("turn", False)]
    assert refused.to_json(dry_run=False)["status"] == "conflict"

    forced = await project_.rewinder.rewind(project_.session, force=True)

    assert (forced.conflicts, forced.applied) == (["app.py"], True)
    assert forced.to_json(dry_run=False)["status"] == "ok"
    assert (project_.root / "app.py").read_text() == "version = 1\n"
    assert project_.session.messages == []
    back = await project_.rewinder.rewind(project_.session, only="code")
    assert back.applied and project_.files() == theirs


async def test_a_dry_run_says_what_it_would_do_and_changes_nothing(project_: Project) -> None:
    await project_.turn("change things", agent_changes)
    changed = project_.files()
    expected = project_.shadow.entries(project_.shadow.snapshot(), ["app.py"])

    result = await project_.rewinder.rewind(project_.session, dry_run=True)

    assert project_.files() == changed and len(project_.session.messages) == 2
    assert sorted(result.writes) == ["app.py", "doomed.txt", "made/new.py"]
    assert result.current["app.py"] == expected["app.py"]
    assert result.turn is not None and (result.applied, result.rewind_checkpoint) == (False, None)
    assert (result.messages_before, result.messages_after) == (2, 2)
    assert project_.kinds() == [("turn", False)]
    assert describe_rewind(result, dry_run=True)[0] == f"would rewind 1 checkpoint of session {result.session_id[:8]}"


async def test_only_code_keeps_the_conversation_and_only_conversation_keeps_the_files(project_: Project) -> None:
    await project_.turn("one", lambda root: (root / "app.py").write_text("version = 2\n"))
    await project_.turn("two")
    await project_.turn("three", lambda root: (root / "app.py").write_text("version = 3\n"))

    code = await project_.rewinder.rewind(project_.session, only="code")

    assert (project_.root / "app.py").read_text() == "version = 2\n"
    assert code.turn is None and prompts(project_.session.messages) == ["one", "two", "three"]

    talk = await project_.rewinder.rewind(project_.session, only="conversation", turns=2)

    assert talk.checkpoints == [] and talk.turn is not None and talk.turn.prompt == "two"
    assert (talk.applied, talk.messages_before, talk.messages_after) == (True, 6, 2)
    assert prompts(project_.session.messages) == ["one"]
    assert (project_.root / "app.py").read_text() == "version = 2\n"
    assert (await project_.rewinder.rewind(project_.session, only="conversation", turns=2)).nothing


async def test_to_turn_undoes_every_checkpoint_since_that_turn_began(project_: Project) -> None:
    await project_.turn("one", lambda root: (root / "app.py").write_text("version = 2\n"))
    second = await project_.turn("two", lambda root: (root / "app.py").write_text("version = 3\n"))
    await project_.turn("three")
    fourth = await project_.turn("four", lambda root: (root / "four.txt").write_text("4\n"))

    result = await project_.rewinder.rewind(project_.session, to_turn=3)  # the third last: "two"

    assert [checkpoint.id for checkpoint in result.checkpoints] == [fourth, second]
    assert result.turn is not None and result.turn.prompt == "two"
    assert (project_.root / "app.py").read_text() == "version = 2\n" and not (project_.root / "four.txt").exists()
    assert prompts(project_.session.messages) == ["one"]
    assert (await project_.rewinder.rewind(project_.session, to_turn=2)).nothing  # one turn left
    first = await project_.rewinder.rewind(project_.session, to_turn=1)  # as many as there are: to before the first
    assert first.turn is not None and first.turn.prompt == "one" and project_.session.messages == []
    assert (project_.root / "app.py").read_text() == "version = 1\n"


async def test_to_turn_code_only_keeps_the_conversation(project_: Project) -> None:
    await project_.turn("one", lambda root: (root / "app.py").write_text("version = 2\n"))
    await project_.turn("two", lambda root: (root / "app.py").write_text("version = 3\n"))

    result = await project_.rewinder.rewind(project_.session, to_turn=1, only="code")

    assert result.turn is None and len(result.checkpoints) == 1 and prompts(project_.session.messages) == ["one", "two"]
    assert (project_.root / "app.py").read_text() == "version = 2\n"


async def test_a_file_grown_too_big_to_checkpoint_is_left_as_it_is_and_listed(project_: Project) -> None:
    await project_.turn("change", lambda root: ((root / "data.bin").write_text("small\n"), agent_changes(root)))
    big = "x" * (2 * 1024 * 1024)
    (project_.root / "data.bin").write_text(big)  # over max_file_mb now: the rewind cannot know what it holds

    result = await project_.rewinder.rewind(project_.session)

    assert result.unrestorable == ["data.bin"] and "data.bin" not in result.writes and result.conflicts == []
    assert (project_.root / "data.bin").read_text() == big and (project_.root / "app.py").read_text() == "version = 1\n"
    assert "  not restorable (too big to checkpoint): data.bin" in describe_rewind(result)


async def test_without_git_only_the_conversation_rewinds(project_: Project) -> None:
    await project_.turn("one", lambda root: (root / "app.py").write_text("version = 2\n"))
    without_git = Rewinder(project_.store, project_.root, None)

    with pytest.raises(ConfigError, match="git is not installed, so files cannot be restored"):
        await without_git.rewind(project_.session)

    result = await without_git.rewind(project_.session, only="conversation")
    assert result.applied and project_.session.messages == []
    assert (project_.root / "app.py").read_text() == "version = 2\n"


async def test_nothing_to_rewind(project_: Project) -> None:
    result = await project_.rewinder.rewind(project_.session)
    assert result.nothing and not result.applied
    assert result.to_json(dry_run=False)["status"] == "nothing"


def test_user_turns_are_the_prompts_that_begin_a_run_not_the_steers_inside_one() -> None:
    sent = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    messages: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("first")], run_id="r1", timestamp=sent),
        ModelResponse(parts=[TextPart("answer")], run_id="r1"),
        ModelRequest(parts=[UserPromptPart("a steer")], run_id="r1"),  # sent into the running run
        ModelResponse(parts=[TextPart("answer")], run_id="r1"),
        ModelRequest(parts=[UserPromptPart("second")], run_id="r2"),
        ModelResponse(parts=[TextPart("answer")], run_id="r2"),
        ModelRequest(parts=[UserPromptPart("imported")]),  # no run id: every prompt begins a turn
        ModelRequest(parts=[UserPromptPart("imported too")]),
    ]
    turns = user_turns(messages)
    assert [(turn.index, turn.prompt, turn.run_id) for turn in turns] == [
        (0, "first", "r1"),
        (4, "second", "r2"),
        (6, "imported", None),
        (7, "imported too", None),
    ]
    assert turns[0].started == sent


def result_with(**fields: object) -> RewindResult:
    result = RewindResult("0123456789abcdef")
    for name, value in fields.items():
        setattr(result, name, value)
    return result


ENTRY = ("100644", "a" * 40)


def checkpoint(number: int) -> Checkpoint:
    return Checkpoint(number, "s", "/p", "turn", "p", (), {}, (), datetime.now(UTC), None)


def test_describe_a_rewind_line_by_line() -> None:
    turn = Turn(4, "  fix   the\nbug " + "x" * 80, "r1")
    result = result_with(
        checkpoints=[checkpoint(3), checkpoint(2)],
        writes={"b.py": ENTRY, "a.py": None, "c.py": ENTRY},
        current={"b.py": ENTRY, "a.py": ENTRY, "c.py": None},
        unrestorable=["big.bin", "huge.bin"],
        conflicts=["b.py"],
        turn=turn,
        messages_before=9,
        applied=True,
    )
    assert describe_rewind(result) == [
        "rewound 2 checkpoints of session 01234567",
        "  files: 3 files: a.py (deleted), b.py, c.py (restored)",
        "  not restorable (too big to checkpoint): big.bin, huge.bin",
        "  your edits to b.py were overwritten; rewind again to get them back",
        "  conversation: back to before “fix the bug " + "x" * 48 + "” (9 → 4 messages; the old branch is kept)",
    ]
    assert describe_rewind(result_with(checkpoints=[checkpoint(1)]), dry_run=True) == [
        "would rewind 1 checkpoint of session 01234567",
        "  files: already as they were before",
    ]
    one = result_with(checkpoints=[checkpoint(1)], writes={"a.py": ENTRY}, current={"a.py": ENTRY})
    assert describe_rewind(one)[1] == "  files: 1 file: a.py"
    assert describe_rewind(result_with(turn=turn)) == [
        "rewound the conversation of session 01234567",
        "  conversation: back to before “fix the bug " + "x" * 48 + "” (0 → 4 messages; the old branch is kept)",
    ]
    finished = result_with(interrupted=True, writes={"a.py": ENTRY})
    assert interrupted_line(finished) == "finished a rewind that was interrupted: 1 file restored"
    assert interrupted_line(result_with(interrupted=True), dry_run=True) == (
        "would finish a rewind that was interrupted: 0 files to restore"
    )
    assert describe_rewind(finished) == [
        "finished a rewind that was interrupted: 1 file restored, and nothing more (rewind again to go further back)"
    ]


def test_a_rewinds_json() -> None:
    result = result_with(
        checkpoints=[checkpoint(3)],
        writes={"b.py": ENTRY, "a.py": None},
        conflicts=["b.py"],
        unrestorable=["big.bin"],
        turn=Turn(2, "fix it", "r1"),
        messages_before=5,
        messages_after=2,
        applied=True,
        rewind_checkpoint=7,
    )
    assert result.to_json(dry_run=True) == {
        "session_id": "0123456789abcdef",
        "status": "ok",
        "dry_run": True,
        "checkpoints": [3],
        "restored": ["b.py"],
        "deleted": ["a.py"],
        "conflicts": ["b.py"],
        "unrestorable": ["big.bin"],
        "conversation": {"prompt": "fix it", "messages_before": 5, "messages_after": 2},
        "rewind_checkpoint": 7,
    }
    assert result_with().to_json(dry_run=False)["conversation"] is None
    assert result_with(interrupted=True).to_json(dry_run=False)["status"] == "finished"
    assert not result_with(interrupted=True).nothing


async def test_record_turn_keeps_a_checkpoint_only_of_changes_and_says_what_it_could_not_keep(
    project_: Project,
) -> None:
    session = project_.session
    none = record_turn(TurnChanges({}), session, "p", ["r"])
    assert none == (None, None)
    failed = record_turn(TurnChanges({}, ("big.bin",), "git status failed"), session, "p", ["r"])
    assert failed == (
        None,
        "the checkpoint of this turn may be incomplete: git status failed; not checkpointed (over [checkpoints] "
        "max_file_mb, cannot be rewound): big.bin",
    )
    kept, note = record_turn(TurnChanges({"a.py": (None, ENTRY)}, ("big.bin",)), session, "p", ["r"])
    assert kept is not None and note is not None and note.startswith("not checkpointed")
    recorded = project_.log.get(kept)
    assert recorded is not None and (recorded.prompt, recorded.run_ids, recorded.skipped) == ("p", ("r",), ("big.bin",))
    assert recorded.project_dir == str(project_.root.resolve()) and recorded.changes == {"a.py": (None, ENTRY)}
    with project_.store.database.write() as db:
        db.execute("CREATE TRIGGER refuse BEFORE INSERT ON checkpoints BEGIN SELECT RAISE(ABORT, 'disk full'); END")
    assert record_turn(TurnChanges({"a.py": (None, ENTRY)}), session, "p", ["r"]) == (
        None,
        "the checkpoint of this turn could not be saved: disk full",
    )


def test_without_git_checkpoints_are_off_in_one_line(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    assert open_shadow(project, max_file_mb=1) == (None, "checkpoints are off: git is not installed")
    monkeypatch.undo()
    shadow, note = open_shadow(project, max_file_mb=1)
    assert note is None and shadow is not None and shadow.root == project.resolve()


async def test_a_record_that_does_not_parse_was_never_a_rewind(project_: Project) -> None:
    assert await finish_interrupted_rewind(project_.shadow, project_.store) is None  # no record at all
    record = project_.shadow.directory / RECORD
    record.write_text('{"session_id": ')  # cut short: never written whole, since records are written atomically
    assert await finish_interrupted_rewind(project_.shadow, project_.store, dry_run=True) is None
    assert record.exists()  # a dry run changes nothing
    assert await finish_interrupted_rewind(project_.shadow, project_.store) is None
    assert not record.exists()
