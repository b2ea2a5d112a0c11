"""The `Checkpoints` capability on a real agent (FunctionModel), real git, and a turn recorded through `run_turn`."""

from __future__ import annotations

import sys
from itertools import pairwise
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ToolCallPart
from pydantic_ai.models.function import AgentInfo

from code_puppy.checkpoints.capability import Checkpoints
from code_puppy.checkpoints.shadow import ShadowRepo
from code_puppy.config import Settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent
from code_puppy.core.turn import run_turn
from code_puppy.run.deps import RunDeps
from code_puppy.sessions.checkpoints import CheckpointLog
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore
from tests.scripted_model import Reply, scripted


class Quiet:
    def start(self, session_id: str) -> None: ...
    def run_started(self, index: int) -> None: ...
    def event(self, event: object) -> None: ...
    def request(self, cost: object) -> None: ...
    def warning(self, text: str) -> None: ...
    def finish(self, outcome: object) -> None: ...


async def test_the_turn_holds_the_agents_changes_and_never_the_users_between_calls(
    project: Path, store: SqliteConversationStore, code_puppy_home: Path
) -> None:
    (project / "a.txt").write_text("a0\n")
    (project / "mine.txt").write_text("mine0\n")
    shadow = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)

    def user_edits_between_calls(messages: list[ModelMessage], info: AgentInfo) -> Reply:
        (project / "mine.txt").write_text("mine1\n")  # the user, while the turn runs
        return [ToolCallPart("edit_file", {"path": "a.txt", "old_text": "a1", "new_text": "a2"}, tool_call_id="e")]

    script = scripted(
        [ToolCallPart("write_file", {"path": "a.txt", "content": "a1\n"}, tool_call_id="w")],
        user_edits_between_calls,
        [ToolCallPart("shell", {"command": "rm -f README.md"}, tool_call_id="s")],
        [ToolCallPart("read_file", {"path": "a.txt"}, tool_call_id="r")],
        "done",
    )
    agent = build_pydantic_agent(
        Settings(),
        AgentOptions(model=script.model, project_root=project, permission_mode="yolo", checkpoints=shadow),
    )
    session = await Session.start(store, project, model="test")

    async with agent:
        outcome = await run_turn(agent, RunDeps(session), "edit a", Quiet())

    assert outcome.error is None and outcome.checkpoint is not None
    (checkpoint,) = CheckpointLog(store.database).of_session(session.id)
    assert (checkpoint.prompt, checkpoint.run_ids) == ("edit a", (outcome.result.run_id,))  # type: ignore[union-attr]
    assert sorted(checkpoint.changes) == ["README.md", "a.txt"]  # not mine.txt
    before, after = checkpoint.changes["a.txt"]
    assert before is not None and after is not None
    blobs = shadow.read_blobs([before[1], after[1]])
    assert (blobs[before[1]], blobs[after[1]]) == (b"a0\n", b"a2\n")  # before its first change, after its last
    assert checkpoint.changes["README.md"][1] is None


async def test_a_turn_that_changes_nothing_makes_no_checkpoint(
    project: Path, store: SqliteConversationStore, code_puppy_home: Path
) -> None:
    shadow = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)
    script = scripted(
        [ToolCallPart("shell", {"command": "ls"}, tool_call_id="s")],
        [ToolCallPart("write_file", {"path": "t.txt", "content": "t"}, tool_call_id="w")],
        [ToolCallPart("shell", {"command": "rm t.txt"}, tool_call_id="r")],  # made and removed: no net change
        "nothing changed",
    )
    agent = build_pydantic_agent(
        Settings(),
        AgentOptions(model=script.model, project_root=project, permission_mode="yolo", checkpoints=shadow),
    )
    session = await Session.start(store, project, model="test")

    async with agent:
        outcome = await run_turn(agent, RunDeps(session), "look", Quiet())

    assert (outcome.error, outcome.checkpoint, outcome.checkpoint_note) == (None, None, None)
    assert CheckpointLog(store.database).of_session(session.id) == []


async def test_the_calls_of_one_response_share_a_snapshot_before_and_the_next_response_takes_its_own(
    project: Path, store: SqliteConversationStore, code_puppy_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "mine.txt").write_text("mine0\n")
    shadow = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)
    taken: list[str] = []
    snapshot = shadow.snapshot

    def counted() -> str:
        taken.append(snapshot())
        return taken[-1]

    monkeypatch.setattr(shadow, "snapshot", counted)

    def user_edits_while_the_model_thinks(messages: list[ModelMessage], info: AgentInfo) -> Reply:
        (project / "mine.txt").write_text("mine1\n")
        return [ToolCallPart("shell", {"command": "rm b.txt"}, tool_call_id="s")]

    script = scripted(
        [
            ToolCallPart("shell", {"command": "echo a > a.txt"}, tool_call_id="s1"),
            ToolCallPart("shell", {"command": "echo b > b.txt"}, tool_call_id="s2"),
            ToolCallPart("shell", {"command": "echo c > c.txt"}, tool_call_id="s3"),
        ],
        user_edits_while_the_model_thinks,
        "done",
    )
    agent = build_pydantic_agent(
        Settings(),
        AgentOptions(model=script.model, project_root=project, permission_mode="yolo", checkpoints=shadow),
    )
    session = await Session.start(store, project, model="test")

    async with agent:
        outcome = await run_turn(agent, RunDeps(session), "three at once", Quiet())

    assert outcome.error is None and outcome.checkpoint is not None
    # The first response: one snapshot before its three calls, one after each; the second: its own before, one after.
    assert len(taken) == 4 + 2
    (checkpoint,) = CheckpointLog(store.database).of_session(session.id)
    assert sorted(checkpoint.changes) == ["a.txt", "c.txt"]  # b.txt made and removed; mine.txt is the user's
    assert checkpoint.changes["a.txt"][0] is None and checkpoint.changes["c.txt"][0] is None


async def test_a_call_right_after_another_of_its_response_starts_from_its_snapshot_but_not_after_a_pause(
    project: Path, code_puppy_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shadow = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)
    taken: list[str] = []
    snapshot = shadow.snapshot

    def counted() -> str:
        taken.append(snapshot())
        return taken[-1]

    monkeypatch.setattr(shadow, "snapshot", counted)
    checkpoints = Checkpoints(shadow)
    checkpoints.begin_turn()
    for name in ("a.txt", "b.txt"):  # one after the other, in one response
        async with checkpoints.tracked(response=("run", 1)):
            (project / name).write_text(name)
    assert len(taken) == 3
    (project / "mine.txt").write_text("mine")  # the user, while the model thinks
    async with checkpoints.tracked(response=("run", 2)):  # a new response: the user may have edited meanwhile
        (project / "c.txt").write_text("c")
    assert len(taken) == 5
    monkeypatch.setattr("code_puppy.checkpoints.capability.REUSE_WITHIN", 0.0)  # a slow call of the response in between
    (project / "mine.txt").write_text("mine, again")
    async with checkpoints.tracked(response=("run", 2)):
        (project / "d.txt").write_text("d")
    assert len(taken) == 7
    assert sorted(checkpoints.take().changes) == ["a.txt", "b.txt", "c.txt", "d.txt"]


async def test_after_a_file_editor_only_its_file_is_looked_at_and_what_else_changed_meanwhile_is_not_the_calls(
    project: Path, code_puppy_home: Path, outside: Path
) -> None:
    (project / "real.txt").write_text("r0\n")
    (project / "link.txt").symlink_to("real.txt")
    shadow = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)
    statuses: list[str] = []
    git = shadow.git

    def counted(*args: str, **options: object) -> bytes:
        statuses.extend(args[:1] if args[0] == "status" else [])
        return git(*args, **options)  # type: ignore[arg-type]

    shadow.git = counted  # type: ignore[method-assign]
    checkpoints = Checkpoints(shadow)
    checkpoints.begin_turn()
    edits = checkpoints._edited("link.txt")  # pyright: ignore[reportPrivateUsage]
    assert edits == ("link.txt", "real.txt")
    assert checkpoints._edited(str(outside / "x.txt")) is None  # pyright: ignore[reportPrivateUsage]
    async with checkpoints.tracked(response=("run", 1), edits=edits):
        (project / "real.txt").write_text("r1\n")  # the editor, through the link
        (project / "mine.txt").write_text("the user's, meanwhile\n")
    assert len(statuses) == 1  # before the call only
    async with checkpoints.tracked(response=("run", 2), edits=("new.txt",)):  # a new file: a full snapshot after
        (project / "new.txt").write_text("n\n")
    assert len(statuses) == 3

    assert sorted(checkpoints.take().changes) == ["new.txt", "real.txt"]


async def test_a_command_after_a_file_editor_of_its_response_still_looks_at_everything_before_it(
    project: Path, code_puppy_home: Path
) -> None:
    (project / "a.txt").write_text("a0\n")
    shadow = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)
    checkpoints = Checkpoints(shadow)
    checkpoints.begin_turn()
    async with checkpoints.tracked(response=("run", 1)):
        (project / "b.txt").write_text("b\n")
    (project / "mine.txt").write_text("the user's, while the model thought\n")
    async with checkpoints.tracked(response=("run", 2), edits=("a.txt",)):  # looks at a.txt alone
        (project / "a.txt").write_text("a1\n")
    async with checkpoints.tracked(response=("run", 2)):  # a command: mine.txt is seen before it, so not its change
        (project / "c.txt").write_text("c\n")

    assert sorted(checkpoints.take().changes) == ["a.txt", "b.txt", "c.txt"]


def test_a_repaired_database_keeps_its_checkpoints(project: Path, db_path: Path) -> None:
    from code_puppy.sessions.repair import repair

    with SqliteConversationStore(db_path) as store:
        CheckpointLog(store.database).add(
            "s1", project, kind="turn", changes={"a.txt": (None, ("100644", "a" * 40))}, prompt="p", run_ids=["r"]
        )
    repair(db_path)
    with SqliteConversationStore(db_path) as store:
        (kept,) = CheckpointLog(store.database).of_session("s1")
    assert (kept.prompt, dict(kept.changes), kept.run_ids) == ("p", {"a.txt": (None, ("100644", "a" * 40))}, ("r",))


class SavingEditor:
    """An editor over ACP's fs methods that saves what it is given, as `fs/write_text_file` asks."""

    reads = writes = True

    def __init__(self, buffers: dict[Path, str]) -> None:
        self.buffers = buffers

    async def read(self, path: Path) -> str:
        return self.buffers.get(path, path.read_text())

    async def write(self, path: Path, content: str) -> None:
        self.buffers[path] = content
        path.write_text(content)


async def test_an_editors_write_is_checkpointed_from_the_disk_it_saved_to(
    project: Path, store: SqliteConversationStore, code_puppy_home: Path
) -> None:
    """The snapshot after the call follows the editor's answer: an unsaved buffer the edit started from is not the
    "before" (the disk is), the saved result is the "after"."""
    (project / "a.txt").write_text("a0\n")
    shadow = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)
    script = scripted(
        [ToolCallPart("edit_file", {"path": "a.txt", "old_text": "unsaved", "new_text": "saved"}, tool_call_id="e")],
        "done",
    )
    agent = build_pydantic_agent(
        Settings(),
        AgentOptions(model=script.model, project_root=project, permission_mode="yolo", checkpoints=shadow),
    )
    session = await Session.start(store, project, model="test")
    editor = SavingEditor({(project / "a.txt").resolve(): "a0 unsaved\n"})
    async with agent:
        outcome = await run_turn(agent, RunDeps(session, files=editor), "edit a", Quiet())
    assert outcome.error is None
    assert (project / "a.txt").read_text() == "a0 saved\n"
    (checkpoint,) = CheckpointLog(store.database).of_session(session.id)
    before, after = checkpoint.changes["a.txt"]
    assert before is not None and after is not None
    blobs = shadow.read_blobs([before[1], after[1]])
    assert (blobs[before[1]], blobs[after[1]]) == (b"a0\n", b"a0 saved\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the folder watcher is Linux's")
async def test_between_shell_calls_the_users_edit_is_seen_and_without_one_the_latest_snapshot_is_reused(
    project: Path, store: SqliteConversationStore, code_puppy_home: Path
) -> None:
    (project / "mine.txt").write_text("mine0\n")
    shadow = ShadowRepo.open(project, code_puppy_home, max_file_mb=1)
    walks: list[int] = []

    def user_edits_while_the_model_thinks(messages: list[ModelMessage], info: AgentInfo) -> Reply:
        walks.append(shadow.walks)
        (project / "mine.txt").write_text("mine1\n")
        return [ToolCallPart("shell", {"command": "mkdir -p out/deep && echo b > out/deep/b.txt"}, tool_call_id="s2")]

    def nothing_changes_meanwhile(messages: list[ModelMessage], info: AgentInfo) -> Reply:
        walks.append(shadow.walks)
        return [ToolCallPart("shell", {"command": "echo c > out/deep/c.txt"}, tool_call_id="s3")]

    def the_user_writes_in_the_agents_new_folder(messages: list[ModelMessage], info: AgentInfo) -> Reply:
        walks.append(shadow.walks)
        (project / "out" / "deep" / "mine.txt").write_text("the user's\n")
        return [ToolCallPart("shell", {"command": "echo d > d.txt"}, tool_call_id="s4")]

    def done(messages: list[ModelMessage], info: AgentInfo) -> Reply:
        walks.append(shadow.walks)
        return "done"

    script = scripted(
        [ToolCallPart("shell", {"command": "echo a > a.txt"}, tool_call_id="s1")],
        user_edits_while_the_model_thinks,
        nothing_changes_meanwhile,
        the_user_writes_in_the_agents_new_folder,
        done,
    )
    agent = build_pydantic_agent(
        Settings(),
        AgentOptions(model=script.model, project_root=project, permission_mode="yolo", checkpoints=shadow),
    )
    session = await Session.start(store, project, model="test")
    async with agent:
        outcome = await run_turn(agent, RunDeps(session), "four commands", Quiet())

    assert outcome.error is None and outcome.checkpoint is not None
    # Each command's snapshot after it walks; the one before walks when the user changed something meanwhile (s2, s4)
    # and reuses the latest when nothing did (s3). The first, before s1, starts the watcher.
    assert [after - before for before, after in pairwise(walks)] == [2, 1, 2]
    (checkpoint,) = CheckpointLog(store.database).of_session(session.id)
    assert sorted(checkpoint.changes) == ["a.txt", "d.txt", "out/deep/b.txt", "out/deep/c.txt"]
