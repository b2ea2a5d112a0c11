"""`code-puppy -w NAME` and `code-puppy worktrees list|remove`, through the installed console script and real git."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from code_puppy.checkpoints.shadow import ShadowRepo
from code_puppy.permissions.policy import PermissionPolicy
from code_puppy.sandbox.guard import ProtectedFiles
from code_puppy.trust import project_trust, trust_project
from tests.conftest import run_cli, start_cli, wait_for
from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.pty_chat import PtyChat


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def committed(repo: Path) -> Path:
    """A git repository with one commit (README.md and the project's config)."""
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "start")
    return repo


def test_the_agent_edits_the_worktree_not_the_main_checkout(committed: Path, server: FakeLLMServer) -> None:
    server.script(tool_calls(call("write_file", {"path": "fix.txt", "content": "fixed\n"})), text("Done."))

    done = run_cli(
        "-w", "fix-x", "-p", "fix it", "--permission-mode", "accept-edits", "--output-format", "json", cwd=committed
    )

    assert done.returncode == 0, done.stderr
    worktree = committed / ".code-puppy" / "worktrees" / "fix-x"
    assert (worktree / "fix.txt").read_text() == "fixed\n"
    assert not (committed / "fix.txt").exists()
    assert git(worktree, "branch", "--show-current").strip() == "code-puppy/fix-x"
    # The main checkout's git leaves the worktrees out.
    assert git(committed, "status", "--porcelain") == ""
    session = json.loads(done.stdout)["session_id"]

    listed = run_cli("worktrees", "list", "--output-format", "json", cwd=committed)

    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [
        {
            "name": "fix-x",
            "path": str(worktree.resolve()),
            "branch": "code-puppy/fix-x",
            "dirty": True,
            "changes": ["fix.txt"],
            "session": session,
        }
    ]
    text_listing = run_cli("worktrees", "list", cwd=committed)
    # A header over aligned columns, as `sessions list` has (tab-separated rows with no header before).
    assert text_listing.stdout.splitlines() == [
        "NAME   BRANCH            CHANGES        SESSION   PATH",
        f"fix-x  code-puppy/fix-x  1 uncommitted  {session[:8]}  {worktree.resolve()}",
    ]


def test_w_reuses_the_worktree_and_its_branch(committed: Path, server: FakeLLMServer) -> None:
    server.script(text("one"), text("two"))
    first = run_cli("-w", "again", "-p", "hi", cwd=committed)
    (committed / ".code-puppy" / "worktrees" / "again" / "kept.txt").write_text("mine\n")

    second = run_cli("-w", "again", "-p", "hi", cwd=committed)

    assert (first.returncode, second.returncode) == (0, 0), second.stderr
    assert (committed / ".code-puppy" / "worktrees" / "again" / "kept.txt").read_text() == "mine\n"
    assert git(committed, "worktree", "list").count("code-puppy/again") == 1


def test_remove_refuses_a_dirty_worktree_and_force_keeps_the_change_as_a_commit(committed: Path) -> None:
    git(committed, "worktree", "add", "-q", "-b", "code-puppy/wip", ".code-puppy/worktrees/wip")
    worktree = committed / ".code-puppy" / "worktrees" / "wip"
    (worktree / "draft.py").write_text("print('draft')\n")

    refused = run_cli("worktrees", "remove", "wip", cwd=committed)

    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1
    assert "uncommitted changes: draft.py" in refused.stderr
    assert (worktree / "draft.py").exists()

    forced = run_cli("worktrees", "remove", "wip", "--force", cwd=committed)

    assert forced.returncode == 0, forced.stderr
    assert not worktree.exists()
    assert git(committed, "show", "code-puppy/wip:draft.py") == "print('draft')\n"
    assert "removed worktree wip; its changes are commit" in forced.stdout
    assert run_cli("worktrees", "list", "--output-format", "json", cwd=committed).stdout.strip() == "[]"


def test_remove_takes_a_clean_worktree_and_keeps_its_branch(committed: Path) -> None:
    git(committed, "worktree", "add", "-q", "-b", "code-puppy/clean", ".code-puppy/worktrees/clean")

    done = run_cli("worktrees", "remove", "clean", cwd=committed)

    assert (done.returncode, done.stdout) == (0, "removed worktree clean\n")
    assert not (committed / ".code-puppy" / "worktrees" / "clean").exists()
    assert git(committed, "branch", "--list", "code-puppy/clean").strip() == "code-puppy/clean"


def test_remove_is_not_stopped_by_another_worktree_git_is_still_making(committed: Path) -> None:
    """A fleet worker finishing a run removes its worktree while another worker makes one in the same repository."""
    git(committed, "worktree", "add", "-q", "-b", "code-puppy/clean", ".code-puppy/worktrees/clean")
    git(committed, "worktree", "add", "-q", "-b", "code-puppy/young", ".code-puppy/worktrees/young")
    (committed / ".git" / "worktrees" / "young" / "HEAD").write_text("0" * 40 + "\n")  # as `git worktree add` starts

    done = run_cli("worktrees", "remove", "clean", cwd=committed)

    assert (done.returncode, done.stdout, done.stderr) == (0, "removed worktree clean\n", "")
    assert not (committed / ".code-puppy" / "worktrees" / "clean").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-w", "a/b", "-p", "hi"), "bad worktree name 'a/b'"),
        (("-w", "..", "-p", "hi"), "bad worktree name '..'"),
        (("worktrees", "remove", "x..y"), "bad worktree name 'x..y'"),
        (("-w", "a.lock", "-p", "hi"), "bad worktree name 'a.lock'"),
        (("-w", "a.", "-p", "hi"), "bad worktree name 'a.'"),
        (("-w", "x" * 300, "-p", "hi"), f"bad worktree name '{'x' * 64}…'"),
        (("-w", "ä\x1b[2J", "-p", "hi"), "bad worktree name 'ä\\x1b[2J'"),
    ],
)
def test_a_bad_name_is_one_line_and_exit_2(committed: Path, args: tuple[str, ...], message: str) -> None:
    done = run_cli(*args, cwd=committed)

    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr
    assert not (committed / ".code-puppy" / "worktrees").exists()


@pytest.mark.parametrize("args", [("-w", "x", "-p", "hi"), ("worktrees", "list"), ("worktrees", "remove", "x")])
def test_outside_a_git_repository_is_one_line_and_exit_2(project: Path, args: tuple[str, ...]) -> None:
    done = run_cli(*args, cwd=project)

    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "is not in a git repository" in done.stderr


def test_removing_an_unknown_worktree_fails(committed: Path) -> None:
    done = run_cli("worktrees", "remove", "nope", cwd=committed)

    assert done.returncode == 1
    assert "no worktree named 'nope'" in done.stderr


def test_the_repository_trust_carries_over_to_its_worktrees(committed: Path) -> None:
    git(committed, "worktree", "add", "-q", "-b", "code-puppy/t", ".code-puppy/worktrees/t")
    worktree = committed / ".code-puppy" / "worktrees" / "t"
    assert not project_trust(worktree).listed

    trust_project(committed)

    assert project_trust(worktree).trusts(".code-puppy/config.toml")
    (worktree / ".code-puppy" / "config.toml").write_text("model = 'other'\n")  # the branch changed it
    assert not project_trust(worktree).trusts(".code-puppy/config.toml")


def test_the_main_checkout_treats_worktrees_as_outside_and_a_worktree_as_its_own_project(committed: Path) -> None:
    main = PermissionPolicy(committed.resolve(), mode="yolo")
    inside = PermissionPolicy((committed / ".code-puppy" / "worktrees" / "t").resolve(), mode="accept-edits")

    decision, reason = main.decide("write_file", {"path": ".code-puppy/worktrees/t/a.py"})

    assert (decision, reason) == (
        "deny",
        "`.code-puppy/worktrees/t/a.py` is outside the project (in .code-puppy/worktrees/, other agents' worktrees); "
        "it cannot be changed.",
    )
    assert main.decide("write_file", {"path": "a.py"})[0] == "allow"
    assert inside.decide("write_file", {"path": "a.py"}) == ("allow", "")
    assert inside.decide("write_file", {"path": ".code-puppy/config.toml"})[0] == "ask"


def test_checkpoints_of_the_main_checkout_leave_worktrees_out(committed: Path, tmp_path: Path) -> None:
    git(committed, "worktree", "add", "-q", "-b", "code-puppy/c", ".code-puppy/worktrees/c")
    (committed / ".code-puppy" / "worktrees" / "c" / "theirs.py").write_text("x = 1\n")
    (committed / "ours.py").write_text("y = 2\n")
    shadow = ShadowRepo.open(committed.resolve(), tmp_path / "data", max_file_mb=5)

    tree = shadow.snapshot()

    files = shadow.git("ls-tree", "-r", "--name-only", tree).decode().split()
    assert sorted(files) == [".code-puppy/config.toml", "README.md", "ours.py"]


def test_the_main_checkouts_sandbox_guard_leaves_worktrees_to_their_agents(committed: Path) -> None:
    git(committed, "worktree", "add", "-q", "-b", "code-puppy/g", ".code-puppy/worktrees/g")
    theirs = committed / ".code-puppy" / "worktrees" / "g" / "work.py"
    root = committed.resolve()
    guard = ProtectedFiles(root, [root / ".code-puppy"])
    saved = guard.snapshot()

    theirs.write_text("written by the worktree's agent meanwhile\n")
    (committed / ".code-puppy" / "config.toml").write_text("model = 'planted'\n")
    note = guard.restore(saved)
    guard.close()

    assert theirs.read_text() == "written by the worktree's agent meanwhile\n"
    assert (committed / ".code-puppy" / "config.toml").read_text() == "# the project's config\n"
    assert note is not None and note.startswith("The sandbox put back .code-puppy/config.toml: ")


def test_the_chat_runs_in_the_worktree(committed: Path, server: FakeLLMServer) -> None:
    server.script(text("Hello from the worktree."))
    chat = PtyChat(committed, "-w", "chat")
    try:
        chat.wait_for("session ")
        chat.type("hi\r")
        chat.wait_turn("Hello from the worktree.")
        chat.type("/exit\r")
        assert chat.wait_exit() == 0
    finally:
        chat.close()

    [listed] = json.loads(run_cli("worktrees", "list", "--output-format", "json", cwd=committed).stdout)
    assert (listed["name"], listed["branch"], listed["dirty"]) == ("chat", "code-puppy/chat", False)
    assert listed["session"] is not None  # the chat's session belongs to the worktree, not to the main checkout
    assert run_cli("sessions", "list", cwd=committed).stdout.startswith("no sessions")


def test_remove_refuses_a_worktree_an_agent_is_running_in(committed: Path, server: FakeLLMServer) -> None:
    server.script(text("done", delay=30))
    busy = start_cli("-w", "busy", "-p", "hi", cwd=committed)
    try:
        wait_for(lambda: server.requests, what="the agent's request")

        refused = run_cli("worktrees", "remove", "busy", "--force", cwd=committed)

        assert refused.returncode == 1
        assert refused.stderr.startswith("code-puppy: error: an agent is running in worktree busy (session ")
        assert refused.stderr.count("\n") == 1
        assert (committed / ".code-puppy" / "worktrees" / "busy").is_dir()
    finally:
        busy.terminate()
        busy.communicate(timeout=20)

    assert run_cli("worktrees", "remove", "busy", cwd=committed).returncode == 0


def test_remove_never_loses_a_nested_repository_or_commits_on_no_branch(committed: Path) -> None:
    git(committed, "worktree", "add", "-q", "-b", "code-puppy/nest", ".code-puppy/worktrees/nest")
    worktree = committed / ".code-puppy" / "worktrees" / "nest"
    inner = worktree / "sub"
    inner.mkdir()
    git(inner, "init", "-q")
    (inner / "work.txt").write_text("only here\n")
    git(inner, "add", "-A")
    git(inner, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "inner work")

    refused = run_cli("worktrees", "remove", "nest", "--force", cwd=committed)

    assert refused.returncode == 1
    assert "holds git repositories of its own (sub)" in refused.stderr and refused.stderr.count("\n") == 1
    assert git(inner, "log", "--format=%s") == "inner work\n"
    assert git(worktree, "status", "--porcelain") == "?? sub/\n"  # nothing staged or committed on its behalf

    git(committed, "worktree", "add", "-q", "--detach", ".code-puppy/worktrees/loose")
    loose = committed / ".code-puppy" / "worktrees" / "loose"
    (loose / "more.txt").write_text("more\n")
    git(loose, "add", "-A")
    git(loose, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "on no branch")

    refused = run_cli("worktrees", "remove", "loose", "--force", cwd=committed)

    assert refused.returncode == 1
    assert "has a detached HEAD with commits on no branch" in refused.stderr
    assert loose.is_dir()
    git(loose, "checkout", "-q", "--detach", "main" if git(committed, "branch", "--list", "main") else "master")
    assert run_cli("worktrees", "remove", "loose", cwd=committed).returncode == 0  # detached at a branch's commit


def test_remove_force_refuses_a_nested_folder_with_a_git_file(committed: Path, tmp_path: Path) -> None:
    git(committed, "worktree", "add", "-q", "-b", "code-puppy/host", ".code-puppy/worktrees/host")
    worktree = committed / ".code-puppy" / "worktrees" / "host"
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    (other / "base.txt").write_text("base\n")
    git(other, "add", "-A")
    git(other, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "base")
    # Another repository's worktree inside this one: its `.git` is a file pointing back to `other`.
    git(other, "worktree", "add", "-q", "-b", "side", str(worktree / "linked"))
    (worktree / "linked" / "unsaved.txt").write_text("work of the other repository, not committed\n")
    assert (worktree / "linked" / ".git").is_file()

    refused = run_cli("worktrees", "remove", "host", "--force", cwd=committed)

    assert refused.returncode == 1
    assert "holds git repositories of its own (linked)" in refused.stderr and refused.stderr.count("\n") == 1
    assert (worktree / "linked" / "unsaved.txt").read_text() == "work of the other repository, not committed\n"
    assert git(worktree, "status", "--porcelain") == "?? linked/\n"  # nothing staged or committed on its behalf
    assert git(worktree, "log", "--format=%s") == "start\n"


def test_listing_worktrees_never_writes_another_worktrees_index(committed: Path) -> None:
    """`worktrees list` (and a fleet worker finding the worktree it finishes) runs `git status` in each worktree: that
    must not take the index lock a `git add` in that worktree needs at the same moment (a fleet run then failed with
    "index.lock: File exists"). Measured on the index file: a refreshing `git status` would rewrite it."""
    import os
    import time

    from code_puppy.worktrees import ensure, find, listed

    busy = ensure(committed, "busy")
    ensure(committed, "other")
    index = Path(git(busy, "rev-parse", "--path-format=absolute", "--git-path", "index").strip())
    tracked = next(path for path in busy.iterdir() if path.is_file())
    later = time.time() + 5
    os.utime(tracked, (later, later))  # same content, newer stat: a plain `git status` refreshes and rewrites the index
    before = index.stat()
    assert [worktree.name for worktree in listed(committed)] == ["busy", "other"]
    assert find(committed, "other").changes == ()
    after = index.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    subprocess.run(["git", "status", "--porcelain"], cwd=busy, check=True, capture_output=True)
    assert index.stat().st_ino != before.st_ino  # the check can fail: git's own refresh does rewrite it


def _churn(repo: str, worker: int) -> list[str]:
    """Make and remove 40 worktrees of `repo`, as a fleet worker's runs do: the errors met."""
    from code_puppy.worktrees import WorktreeError, ensure, find, remove

    errors: list[str] = []
    for n in range(40):
        name = f"run-{worker}-{n}"
        try:
            ensure(Path(repo), name)
            remove(Path(repo), find(Path(repo), name), force=True)
        except WorktreeError as exc:
            errors.append(str(exc))
    return errors


def test_processes_making_and_removing_worktrees_of_one_repository_at_once_never_fail(committed: Path) -> None:
    """`git worktree add` and `list` read every worktree's record in `.git/worktrees/` and failed on one another
    process was making or removing ("failed to read .git/worktrees/NAME/commondir"): fleet runs starting and finishing
    in one repository lost a run to it now and then (about 1 in 25 here before the lock)."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(4) as pool:
        errors = [error for found in pool.map(_churn, [str(committed)] * 4, range(4)) for error in found]
    assert errors == []
    assert git(committed, "worktree", "list", "--porcelain").count("worktree ") == 1  # the main checkout alone


def test_a_worktrees_folder_that_is_a_symbolic_link_is_refused(
    repo: Path, tmp_path: Path, server: FakeLLMServer
) -> None:
    # A repository (a queued --repo one, say) may commit .code-puppy/worktrees as a link to anywhere on the machine:
    # git would make the worktree there, outside the project.
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / ".code-puppy").mkdir(exist_ok=True)
    (repo / ".code-puppy" / "worktrees").symlink_to(outside)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "start")

    done = run_cli("-w", "x", "-p", "hi", cwd=repo)

    assert done.returncode == 1
    assert done.stderr == (
        f"code-puppy: error: -w: {repo.resolve() / '.code-puppy' / 'worktrees'} is a symbolic link (or under one): "
        "worktrees are made only in the repository's own folder\n"
    )
    assert list(outside.iterdir()) == []


def test_a_lock_file_that_cannot_be_opened_does_not_stop_worktrees(committed: Path, server: FakeLLMServer) -> None:
    # A .git this user cannot write (a shared, read-only repository) is the real case; the tests run as root, so a
    # folder in the lock file's place stands in for it. The listing used to work there; nothing here may traceback.
    (committed / ".git" / "code-puppy-worktrees.lock").mkdir()
    server.script(text("Done."))

    made = run_cli("-w", "x", "-p", "hi", cwd=committed)
    listed = run_cli("worktrees", "list", "--output-format", "json", cwd=committed)

    assert (made.returncode, made.stdout, made.stderr) == (0, "Done.\n", "")
    assert listed.returncode == 0, listed.stderr
    assert [worktree["name"] for worktree in json.loads(listed.stdout)] == ["x"]
