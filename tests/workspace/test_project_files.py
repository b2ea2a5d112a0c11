"""The file tools' writes (atomic replace: hard links, symlinks, modes, a write that fails half way, a folder swapped
for a link meanwhile) and reads (the harness's output, streamed: bounded memory for a huge one-line file), in process
and through the console script."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import AgentStreamEvent, ToolCallPart
from pydantic_ai_harness.filesystem import FileChangeRequestEvent, FileSystem

from code_puppy.config import Settings
from code_puppy.core.builder import MAX_READ_CHARS, AgentOptions, build_pydantic_agent
from code_puppy.run.deps import RunDeps
from code_puppy.sessions.session import Session
from code_puppy.workspace.project_files import READ_CHUNK_BYTES, ProjectFileSystem
from tests.conftest import CODE_PUPPY, run_cli
from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.scripted_model import scripted, tool_returns
from tests.unprivileged import unprivileged


def tool_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def test_a_hard_linked_file_is_replaced_not_written_through(
    server: FakeLLMServer, project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "notes.txt").write_text("outside notes\n")
    (outside / "config.txt").write_text("outside = true\n")
    os.link(outside / "notes.txt", project / "notes.txt")
    os.link(outside / "config.txt", project / "config.txt")
    server.script(
        tool_calls(
            call("write_file", {"path": "notes.txt", "content": "project notes\n"}),
            call("edit_file", {"path": "config.txt", "old_text": "true", "new_text": "false"}),
        ),
        text("done"),
    )
    completed = run_cli("-p", "edit", "--permission-mode", "accept-edits", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "done\n"), completed.stderr
    assert tool_messages(server.requests[1].body) == ["Wrote 14 chars (1 lines) to notes.txt.", "Edited config.txt."]
    assert (project / "notes.txt").read_text() == "project notes\n"
    assert (project / "config.txt").read_text() == "outside = false\n"
    assert (outside / "notes.txt").read_text() == "outside notes\n"
    assert (outside / "config.txt").read_text() == "outside = true\n"
    assert [(project / name).stat().st_nlink for name in ("notes.txt", "config.txt")] == [1, 1]


async def test_a_symlink_inside_the_project_stays_a_link_and_its_target_is_replaced(project: Path) -> None:
    (project / "AGENTS.md").write_text("# agents\nbe brief\n")
    (project / "CLAUDE.md").symlink_to("AGENTS.md")
    inode = (project / "AGENTS.md").stat().st_ino
    files = ProjectFileSystem(root_dir=project).get_toolset()
    assert (await files.edit_file("CLAUDE.md", "brief", "thorough")).startswith("Edited CLAUDE.md.")
    assert os.readlink(project / "CLAUDE.md") == "AGENTS.md"
    assert (project / "AGENTS.md").read_text() == "# agents\nbe thorough\n"
    assert (project / "AGENTS.md").stat().st_ino != inode  # replaced by rename, not rewritten in place
    await files.write_file("CLAUDE.md", "# agents\n")
    assert (os.readlink(project / "CLAUDE.md"), (project / "AGENTS.md").read_text()) == ("AGENTS.md", "# agents\n")
    assert sorted(p.name for p in project.iterdir()) == ["AGENTS.md", "CLAUDE.md", "README.md"]  # no temporary left


async def test_a_replaced_file_keeps_its_mode_and_a_new_one_gets_the_umask(project: Path) -> None:
    script = project / "run.sh"
    script.write_text("echo hi\n")
    script.chmod(0o750)
    files = ProjectFileSystem(root_dir=project).get_toolset()
    await files.edit_file("run.sh", "hi", "ho")
    await files.write_file("new.txt", "new\n")
    umask = os.umask(0)
    os.umask(umask)
    assert (script.stat().st_mode & 0o7777, script.read_text()) == (0o750, "echo ho\n")
    assert (project / "new.txt").stat().st_mode & 0o7777 == 0o666 & ~umask


SWAPPER = """
import ctypes, os, sys
folder, link, stop = (os.fsencode(argument) for argument in sys.argv[1:])
libc = ctypes.CDLL(None, use_errno=True)
swaps = 0
while not os.path.exists(stop):
    for _ in range(2):  # so that the folder is back in its place whenever the loop ends
        if libc.renameat2(-100, folder, -100, link, 2) != 0:  # AT_FDCWD, RENAME_EXCHANGE
            raise OSError(ctypes.get_errno(), "renameat2")
    swaps += 2
print(swaps)
"""
"""Swaps a folder with a link to outside the project, atomically and in a tight loop, until told to stop."""


async def test_a_folder_swapped_for_a_link_to_outside_never_takes_a_write_there(project: Path, outside: Path) -> None:
    """A command in the background swaps `sub` with a link to a folder outside the project while the file tools write,
    edit and make folders in it: whatever each call's outcome, nothing outside changes and no temporary is left."""
    calls = 200
    (project / "sub").mkdir()
    (project / "link").symlink_to(outside)
    for index in range(calls):
        # The same file outside too, so that an edit taken outside would match and go through.
        (project / "sub" / f"e{index}.txt").write_text("a\n")
        (outside / f"e{index}.txt").write_text("a\n")
    before = {path: path.read_bytes() for path in outside.rglob("*")}
    files = ProjectFileSystem(root_dir=project).get_toolset()
    stop = project.parent / "stop"
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(project / "sub"), str(project / "link"), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    written: str | None = None
    edited: set[int] = set()
    made: set[int] = set()
    try:
        for index in range(calls):
            with contextlib.suppress(ModelRetry):
                await files.write_file("sub/w.txt", f"write {index}\n")
                written = f"write {index}\n"
            with contextlib.suppress(ModelRetry):
                await files.edit_file(f"sub/e{index}.txt", "a", "b")
                edited.add(index)
            with contextlib.suppress(ModelRetry):
                await files.create_directory(f"sub/made/{index}")
                made.add(index)
    finally:
        stop.touch()
        swaps, _ = swapper.communicate(timeout=60)
    assert (swapper.returncode, int(swaps) > 0) == (0, True)
    assert {path: path.read_bytes() for path in outside.rglob("*")} == before
    assert [path for root in (project, outside) for path in root.rglob("*.tmp")] == []
    # What a call reported done is in the folder it checked.
    assert not (project / "sub").is_symlink()
    assert written is not None and (project / "sub" / "w.txt").read_text() == written
    assert [(project / "sub" / f"e{index}.txt").read_text() for index in range(calls)] == [
        "b\n" if index in edited else "a\n" for index in range(calls)
    ]
    assert all((project / "sub" / "made" / str(index)).is_dir() for index in made)


def test_a_write_through_a_folder_that_became_a_link_after_its_check_is_refused(project: Path, outside: Path) -> None:
    """The harness checks a path, then hands the resolved path to `open_write`/`open_read`: a folder or the file itself
    turned into a link to outside in between is refused there, and nothing outside is touched."""
    files = ProjectFileSystem(root_dir=project).get_toolset()
    root = project.resolve()
    (outside / "notes.txt").write_text("outside\n")
    (project / "sub").symlink_to(outside)  # `sub` was a folder when `sub/notes.txt` was checked
    (project / "notes.txt").symlink_to(outside / "notes.txt")  # and `notes.txt` a file
    refusals: list[str] = []
    for resolved in (root / "sub" / "notes.txt", root / "sub" / "new.txt"):
        for read_back, create in ((True, False), (False, True)):
            with pytest.raises(ModelRetry) as refused:
                files.open_write(resolved, read_back=read_back, create=create)
            refusals.append(str(refused.value))
        with pytest.raises(ModelRetry):
            files.open_read(resolved)
    for read_back, create in ((True, False), (False, True)):
        with pytest.raises(ModelRetry) as refused:
            files.open_write(root / "notes.txt", read_back=read_back, create=create)
        refusals.append(str(refused.value))
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        files.open_read(root / "notes.txt")
    (project / "folder").mkdir()  # was a file
    for read_back, create in ((True, False), (False, True)):
        with pytest.raises(ModelRetry) as refused:
            files.open_write(root / "folder", read_back=read_back, create=create)
        refusals.append(str(refused.value))
        with pytest.raises(ModelRetry) as refused:
            files.open_write(root / "gone" / "notes.txt", read_back=read_back, create=create)  # a folder removed
        refusals.append(str(refused.value))
    moved = "A folder on {!r} was moved, removed or replaced by a link while it was opened, so nothing was done. Retry."
    assert refusals == [
        *[moved.format("sub")] * 4,
        *["Path 'notes.txt' changed to a symlink before opening."] * 2,
        *["Path 'folder' exists and is not a regular file.", moved.format("gone")] * 2,
    ]
    assert sorted(p.name for p in outside.iterdir()) == ["notes.txt"]
    assert (outside / "notes.txt").read_text() == "outside\n"


@dataclass
class Meddler(AbstractCapability[Any]):
    """Changes the project while a file tool announces its change: after the tool's checks, before its write."""

    meddle: Callable[[], object]

    async def on_event(self, ctx: RunContext[Any], *, event: AgentStreamEvent) -> None:
        if isinstance(event, FileChangeRequestEvent):
            self.meddle()


async def announced(project: Path, meddle: Callable[[], object], *calls: ToolCallPart) -> list[tuple[str, str, str]]:
    """Run `calls` through an agent with the file tools, `meddle` running while each change is announced."""
    script = scripted(list(calls), "done")
    agent = Agent(script.model, capabilities=[ProjectFileSystem(root_dir=project), Meddler(meddle)], retries=5)
    result = await agent.run("go")
    return tool_returns(result.all_messages())


@pytest.mark.parametrize(
    "call",
    [
        ToolCallPart("write_file", {"path": "sub/notes.txt", "content": "new\n"}),
        ToolCallPart("edit_file", {"path": "sub/notes.txt", "old_text": "old", "new_text": "new"}),
        ToolCallPart("create_directory", {"path": "sub/made/deeper"}),
    ],
    ids=lambda call: call.tool_name,
)
async def test_a_folder_swapped_for_a_link_while_a_change_is_announced_gets_nothing_outside(
    project: Path, outside: Path, call: ToolCallPart
) -> None:
    (project / "sub").mkdir()
    (project / "sub" / "notes.txt").write_text("old\n")
    (outside / "notes.txt").write_text("old\n")

    def swap() -> None:
        (project / "sub").rename(project / "elsewhere")
        (project / "sub").symlink_to(outside)

    [(name, outcome, _)] = await announced(project, swap, call)
    assert (name, outcome) == (call.tool_name, "retried")
    assert sorted(p.name for p in outside.iterdir()) == ["notes.txt"]
    assert (outside / "notes.txt").read_text() == "old\n"
    assert sorted(p.name for p in (project / "elsewhere").iterdir()) == ["notes.txt"]
    assert (project / "elsewhere" / "notes.txt").read_text() == "old\n"


@pytest.mark.parametrize("existing", [True, False], ids=["existing file", "new file"])
async def test_a_file_changed_while_its_write_is_announced_is_not_overwritten(project: Path, existing: bool) -> None:
    if existing:
        (project / "notes.txt").write_text("before\n")
    returns = await announced(
        project,
        lambda: (project / "notes.txt").write_text("the user's\n"),
        ToolCallPart("write_file", {"path": "notes.txt", "content": "the agent's\n"}),
    )
    assert [(name, outcome) for name, outcome, _ in returns] == [("write_file", "retried")]
    assert "Conflict: file 'notes.txt' has changed" in returns[0][2]
    assert (project / "notes.txt").read_text() == "the user's\n"
    assert sorted(p.name for p in project.iterdir()) == ["README.md", "notes.txt"]


async def test_create_directory_makes_every_missing_folder_and_follows_only_links_inside(
    project: Path, outside: Path
) -> None:
    (project / "docs").mkdir()
    (project / "manual").symlink_to("docs")
    (project / "away").symlink_to(outside)
    (project / "file.txt").write_text("text\n")
    returns = await announced(
        project,
        lambda: None,
        *(
            ToolCallPart("create_directory", {"path": path}, tool_call_id=path)
            for path in ("a/b/c", "a/b", "manual/guide/part", "away/x", "file.txt", "file.txt/x")
        ),
    )
    assert returns == [
        ("create_directory", "success", "Created directory: a/b/c"),
        ("create_directory", "success", "Created directory: a/b"),
        ("create_directory", "success", "Created directory: manual/guide/part"),
        ("create_directory", "retried", "Path 'away/x' resolves outside the root directory."),
        ("create_directory", "retried", "Path 'file.txt' exists and is not a directory."),
        ("create_directory", "retried", "Path 'file.txt/x' has a parent that is not a directory."),
    ]
    assert (project / "a" / "b" / "c").is_dir()
    assert (project / "docs" / "guide" / "part").is_dir() and (project / "manual").is_symlink()
    assert list(outside.iterdir()) == []


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_no_descriptor_is_left_open_whatever_the_outcome(project: Path, outside: Path) -> None:
    files = ProjectFileSystem(root_dir=project).get_toolset()
    (project / "sub").mkdir()
    (project / "away").symlink_to(outside)
    (project / "link.txt").symlink_to("README.md")
    os.mkfifo(project / "fifo")
    before = open_descriptors()
    for _ in range(20):
        await files.write_file("sub/notes.txt", "one\n")
        await files.edit_file("sub/notes.txt", "one", "two")
        await files.create_directory("sub/made")
        await files.read_file("sub/notes.txt")
        for failing in (
            files.edit_file("sub/notes.txt", "absent", "x"),
            files.write_file("sub/notes.txt", "x", expected_hash="stale"),
            files.write_file("missing/notes.txt", "x"),
        ):
            with pytest.raises(ModelRetry):
                await failing
        for read_back, create in ((True, False), (False, True)):
            for resolved in ("away/x.txt", "link.txt", "sub", "fifo"):  # refused before, at and after the open
                with pytest.raises(ModelRetry):
                    files.open_write(project.resolve() / resolved, read_back=read_back, create=create)
    assert open_descriptors() == before


def test_root_editing_someone_elses_file_keeps_it_theirs(project: Path) -> None:
    """As root (CI, containers) the file is the unprivileged test user's; as anyone else it is one's own."""
    runner = unprivileged()
    notes = project / "notes.txt"
    notes.write_text("one\n")
    notes.chmod(0o640)
    runner.own(notes)
    files = ProjectFileSystem(root_dir=project).get_toolset()
    asyncio.run(files.edit_file("notes.txt", "one", "two"))
    status = notes.stat()
    assert (status.st_uid, status.st_gid, stat.S_IMODE(status.st_mode)) == (runner.uid, runner.gid, 0o640)
    assert notes.read_text() == "two\n"


def test_a_read_only_file_is_not_replaced_though_its_folder_is_writable() -> None:
    """Root writes any file, so the write is made as an unprivileged user, as a real user's code-puppy makes it."""
    runner = unprivileged()
    script = textwrap.dedent(
        """
        import asyncio, sys
        from code_puppy.workspace.project_files import ProjectFileSystem

        files = ProjectFileSystem(root_dir=sys.argv[1]).get_toolset()
        try:
            asyncio.run(files.write_file("locked.txt", "changed\\n"))
        except Exception as error:
            print(type(error).__name__, error)
        """
    )
    with runner.workdir() as project:
        locked = project / "locked.txt"
        locked.write_text("keep\n")
        locked.chmod(0o444)
        runner.own(locked)
        completed = subprocess.run(
            [*runner.prefix, sys.executable, "-c", script, str(project)],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": os.environ["PATH"]},
        )
        assert "Permission denied" in completed.stdout, completed.stdout + completed.stderr
        assert locked.read_text() == "keep\n"
        assert sorted(p.name for p in project.iterdir()) == ["locked.txt"]  # no temporary left


def test_an_edit_that_fails_half_way_leaves_the_file_whole(project: Path) -> None:
    """A file-size limit makes the write fail after 1 MiB, as a full disk would: the file stays as it was. The
    temporary file holding the new content meanwhile is readable by its owner alone."""
    original = "start\n" + "a" * 600_000 + "\nend\n"
    (project / "big.txt").write_text(original)
    script = textwrap.dedent(
        """
        import asyncio, pathlib, resource, signal, stat, sys
        from code_puppy.workspace.project_files import ProjectFileSystem

        def failed(signum, frame):  # runs after the failed write, before the temporary file is removed
            for temporary in pathlib.Path(sys.argv[1]).glob(".big.txt.*.tmp"):
                status = temporary.stat()
                print(oct(stat.S_IMODE(status.st_mode)), status.st_size)

        signal.signal(signal.SIGXFSZ, failed)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))
        files = ProjectFileSystem(root_dir=sys.argv[1]).get_toolset()
        try:
            asyncio.run(files.edit_file("big.txt", "start", "b" * 2_000_000))
        except OSError as error:
            print(error.strerror)
        """
    )
    completed = subprocess.run(
        [sys.executable, "-c", script, str(project)], capture_output=True, text=True, timeout=60, check=True
    )
    assert completed.stdout == f"0o600 {1 << 20}\nFile too large\n"
    assert (project / "big.txt").read_text() == original
    assert sorted(p.name for p in project.iterdir()) == ["README.md", "big.txt"]


def test_a_path_with_a_nul_byte_is_refused_to_the_model_and_the_run_goes_on(
    server: FakeLLMServer, project: Path
) -> None:
    server.script(
        tool_calls(
            call("write_file", {"path": "notes\0.txt", "content": "x"}),
            call("edit_file", {"path": "README.md\0", "old_text": "demo", "new_text": "x"}),
            call("create_directory", {"path": "new\0folder"}),
            call("read_file", {"path": "README.md\0"}),
        ),
        text("done"),
    )
    completed = run_cli("-p", "edit", "--permission-mode", "accept-edits", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "done\n"), completed.stderr
    assert [json.loads(message) for message in tool_messages(server.requests[1].body)] == [
        {"error": f"Path {path!r} holds a NUL byte, which no file name can hold."}
        for path in ("notes\0.txt", "README.md\0", "new\0folder", "README.md\0")
    ]
    assert sorted(p.name for p in project.iterdir()) == ["README.md"]
    assert (project / "README.md").read_text() == "# demo project\n"


READ_CASES: dict[str, bytes] = {
    "empty": b"",
    "no final newline": b"hello",
    "lines": b"a\nb\n",
    "crlf": b"a\r\nb\r\nc",
    "crlf across a chunk boundary": b"x" * (READ_CHUNK_BYTES - 1) + b"\r\nnext\n",
    "a final cr": b"abc\r",
    "every line separator": "a\u2028b\x0bc\x1cd\u0085e\x0cf\rg\n".encode(),
    "invalid utf-8": b"ok\xff\xfe\nbad \xe2\x82\n",
    "a character across a chunk boundary": b"x" * (READ_CHUNK_BYTES - 1) + "€\n".encode() + b"y\n",
    "binary": b"abc\0def" * 10,
    "many lines": b"".join(b"line %d\n" % i for i in range(5000)),
    "a long first line": b"z" * 70_000 + b"\nshort\n",
    "a long line later": b"a\n" + b"z" * 70_000 + b"\nshort\n",
    "lines past the window": b"".join(b"%05d " % i + b"w" * 200 + b"\n" for i in range(1000)),
}


@pytest.mark.parametrize("content_hashes", [True, False])
@pytest.mark.parametrize("window", [(0, None), (1, None), (3, 2), (0, 0), (999, None), (4999, 3), (10**6, None)])
async def test_a_streamed_read_returns_what_the_harness_returns(
    project: Path, window: tuple[int, int | None], content_hashes: bool
) -> None:
    for index, data in enumerate(READ_CASES.values()):
        (project / f"case{index}").write_bytes(data)
    options: dict[str, Any] = {"root_dir": project, "content_hashes": content_hashes, "max_read_chars": MAX_READ_CHARS}
    ours, harness = ProjectFileSystem(**options).get_toolset(), FileSystem(**options).get_toolset()
    offset, limit = window

    async def read(files: Any, path: str) -> str:
        try:
            return await files.read_file(path, offset=offset, limit=limit)
        except Exception as error:
            return f"{type(error).__name__}: {error}"

    for index, name in enumerate(READ_CASES):
        assert await read(ours, f"case{index}") == await read(harness, f"case{index}"), name
    for path in ("missing.txt", ".", "../outside"):
        assert await read(ours, path) == await read(harness, path)


PEAK_RSS = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def test_reading_a_huge_one_line_file_is_prompt_and_bounded_in_memory(server: FakeLLMServer, project: Path) -> None:
    size = 50 * 1024 * 1024
    with (project / "bundle.min.js").open("wb") as bundle:
        for _ in range(size // (1 << 20)):
            bundle.write(b"x" * (1 << 20))

    def peak_kib(path: str) -> int:
        server.script(tool_calls(call("read_file", {"path": path})), text("read"))
        completed = subprocess.run(
            [sys.executable, "-c", PEAK_RSS, str(CODE_PUPPY), "-p", "read it"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return int(completed.stdout)

    small = peak_kib("README.md")
    huge = peak_kib("bundle.min.js")
    assert tool_messages(server.requests[-1].body) == [
        "[bundle.min.js | 1 lines]\n... (Line 1 is 52,428,800 characters and does not fit the read window. "
        "Use offset=1 to skip it, or a shell byte range to inspect it.)\n"
    ]
    assert huge - small < 16 * 1024, f"reading a 50 MiB line took {(huge - small) // 1024} MiB more"


@dataclass
class Editor:
    """`EditorFiles` over a dict of buffers; a write it refuses raises as a client's error does."""

    buffers: dict[Path, str]
    reads: bool = True
    writes: bool = True
    refuse: bool = False
    written: list[tuple[Path, str]] = field(default_factory=list[tuple[Path, str]])

    async def read(self, path: Path) -> str:
        return self.buffers[path]

    async def write(self, path: Path, content: str) -> None:
        if self.refuse:
            raise OSError("the buffer is read-only")
        self.written.append((path, content))


async def edit_through(project: Path, editor: Editor, *calls: ToolCallPart) -> list[tuple[str, str, str]]:
    script = scripted(list(calls), "done")
    agent = build_pydantic_agent(
        Settings(), AgentOptions(model=script.model, project_root=project, permission_mode="yolo")
    )
    async with agent:
        result = await agent.run("edit", deps=RunDeps(Session.in_memory(), files=editor))
    return tool_returns(result.all_messages())


async def test_an_editor_that_refuses_the_write_leaves_the_disk_and_the_model_is_told(project: Path) -> None:
    readme = (project / "README.md").resolve()
    editor = Editor({readme: "# demo buffer\n"}, refuse=True)
    returns = await edit_through(
        project, editor, ToolCallPart("edit_file", {"path": "README.md", "old_text": "buffer", "new_text": "x"})
    )
    assert returns == [
        (
            "edit_file",
            "retried",
            "The editor did not write 'README.md': the buffer is read-only",
        )
    ]
    assert (project / "README.md").read_text() == "# demo project\n"


async def test_an_editor_that_only_reads_leaves_writes_to_the_disk_computed_from_it(project: Path) -> None:
    readme = (project / "README.md").resolve()
    editor = Editor({readme: "# demo buffer\n"}, writes=False)
    returns = await edit_through(
        project,
        editor,
        ToolCallPart("read_file", {"path": "README.md"}, tool_call_id="r"),
        ToolCallPart("edit_file", {"path": "README.md", "old_text": "project", "new_text": "app"}, tool_call_id="e"),
    )
    assert [(name, outcome) for name, outcome, _ in returns] == [("read_file", "success"), ("edit_file", "success")]
    assert "# demo buffer" in returns[0][2]
    assert (project / "README.md").read_text() == "# demo app\n"
    assert editor.written == []


async def test_a_binary_file_is_read_from_the_disk_not_asked_of_the_editor(project: Path) -> None:
    (project / "logo.png").write_bytes(b"\x89PNG\x00\x01")
    editor = Editor({})  # it holds no buffer of it: asking would fail the read
    returns = await edit_through(project, editor, ToolCallPart("read_file", {"path": "logo.png"}))
    assert returns == [("read_file", "success", "[Binary file: 6 bytes. Use a binary-aware tool to inspect.]")]
