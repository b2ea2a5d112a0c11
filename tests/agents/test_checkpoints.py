"""The `Checkpoints` capability on a real agent (FunctionModel), real git, and a turn recorded through `run_turn`."""

from __future__ import annotations

from pathlib import Path

from pydantic_ai.messages import ModelMessage, ToolCallPart
from pydantic_ai.models.function import AgentInfo

from code_puppy.agents.builder import build_pydantic_agent
from code_puppy.agents.deps import RunDeps
from code_puppy.checkpoints.shadow import ShadowRepo
from code_puppy.config import Settings
from code_puppy.core.run import run_turn
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
        Settings(), model=script.model, project_root=project, permission_mode="yolo", checkpoints=shadow
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
        Settings(), model=script.model, project_root=project, permission_mode="yolo", checkpoints=shadow
    )
    session = await Session.start(store, project, model="test")

    async with agent:
        outcome = await run_turn(agent, RunDeps(session), "look", Quiet())

    assert (outcome.error, outcome.checkpoint, outcome.checkpoint_note) == (None, None, None)
    assert CheckpointLog(store.database).of_session(session.id) == []


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
        Settings(), model=script.model, project_root=project, permission_mode="yolo", checkpoints=shadow
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
