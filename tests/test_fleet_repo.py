"""`code-puppy queue add --repo URL [--ref REF]`, end to end through the installed console script: a local `file://`
bare repository, a worker that clones it into its cache and leaves the run's branch in that clone."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

from tests.conftest import run_cli, wait_for
from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.fleet_support import Workers, fleet_server, git, repository, runs, shown, workers  # noqa: F401  (fixtures)


def test_a_repo_run_is_cloned_into_the_workers_cache_from_its_ref_and_its_branch_is_fetched_from_there(
    fleet_server: FakeLLMServer,  # noqa: F811
    repository: Path,  # noqa: F811
    workers: Workers,  # noqa: F811
    tmp_path: Path,
    code_puppy_home: Path,
) -> None:
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    git(repository, "switch", "-q", "-c", "feature")
    (repository / "feature.txt").write_text("feature\n")
    git(repository, "add", "-A")
    git(repository, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "feature")
    git(repository, "push", "-q", str(origin), "main", "feature")
    git(repository, "switch", "-q", "main")
    url = f"file://{origin}"

    for args, error in [
        (("--ref", "nope"), f"--ref: {url} has no branch or tag nope"),
        (("--project", str(repository)), "give --project DIR or --repo URL, not both"),
    ]:
        refused = run_cli("queue", "add", "-p", "x", "--repo", url, *args, cwd=tmp_path)
        assert (refused.returncode, refused.stdout, refused.stderr) == (2, "", f"code-puppy: error: {error}\n")
    refused = run_cli("queue", "add", "-p", "x", "--ref", "feature", cwd=repository)
    assert (refused.returncode, refused.stderr) == (
        2,
        "code-puppy: error: --ref needs --repo URL (a --project run starts from the project's HEAD)\n",
    )
    missing = run_cli("queue", "add", "-p", "x", "--repo", f"file://{tmp_path / 'missing.git'}", cwd=tmp_path)
    assert (missing.returncode, missing.stdout, missing.stderr.count("\n")) == (2, "", 1)
    assert missing.stderr.startswith("code-puppy: error: git ls-remote failed: ")
    assert runs(tmp_path) == {}

    added = run_cli("queue", "add", "-p", "on feature", "--repo", url, "--ref", "feature", cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    run_id = added.stdout.splitlines()[-1]
    workers.start("--permission-mode", "yolo")
    wait_for(lambda: runs(tmp_path, pause=0.5)[run_id]["status"] == "succeeded", what="the run")
    record = shown(run_id, tmp_path)
    clone = Path(record["clone"])
    assert (record["output"], record["branch"], record["diff_stat"]) == (
        "changed",
        f"code-puppy/{run_id}",
        "1 file changed, 1 insertion(+)",
    )
    assert clone.parent == code_puppy_home / "fleet" / "repos"  # the worker's data directory
    assert clone.name.startswith("origin-")
    branch = f"code-puppy/{run_id}"
    assert git(clone, "log", "--format=%an|%s", f"origin/feature..{branch}") == "code-puppy|on feature\n"
    assert git(clone, "show", f"{branch}:feature.txt") == "feature\n"  # started from --ref
    assert git(origin, "branch", "--list", "code-puppy/*") == ""  # nothing pushed
    git(repository, "fetch", "-q", str(clone), f"{branch}:{branch}")  # the user fetches it from the worker's cache
    assert git(repository, "show", f"{branch}:change.txt") == "done\n"
    worktree = clone / ".code-puppy" / "worktrees" / run_id
    assert not worktree.exists()  # removed once the run succeeded
    from code_puppy.checkpoints.shadow import shadow_directory

    # and its checkpoints' copy of the project with it: a worker's data directory does not grow by a project a run
    assert (code_puppy_home / "checkpoints").is_dir() and not shadow_directory(worktree, code_puppy_home).exists()
    followed = run_cli("runs", "show", run_id, "--follow", cwd=tmp_path)  # an ended run, on SQLite: its events at once
    assert (followed.returncode, followed.stderr) == (0, "")
    lines = [json.loads(line) for line in followed.stdout.splitlines()]
    assert [line["type"] for line in lines] == [
        "session",
        "request",
        "tool_call",
        "tool_result",
        "text_delta",
        "request",
        "result",
    ]
    assert (lines[-1]["status"], lines[-1]["output"], lines[-1]["usage"]["requests"]) == ("success", "changed", 2)
    unknown = run_cli("runs", "show", "nope", "--follow", cwd=tmp_path)
    assert (unknown.returncode, unknown.stdout, unknown.stderr.count("\n")) == (2, "", 1)


def test_a_repo_run_taken_over_without_its_worktree_fails_in_one_line_instead_of_starting_again(
    server: FakeLLMServer,
    workers: Workers,  # noqa: F811
    tmp_path: Path,
    code_puppy_home: Path,
) -> None:
    """A worker killed mid-run on a machine that went with it: the run's worktree (in that worker's clone) is gone, so
    the worker taking it over cannot continue its finished steps there: it fails, its first request not sent again."""
    from code_puppy.fleet.run import lost_worktree

    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    seed = tmp_path / "seed"
    git(tmp_path, "clone", "-q", str(origin), str(seed))
    (seed / "README.md").write_text("# demo\n")
    git(seed, "add", "-A")
    git(seed, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "start")
    git(seed, "push", "-q", "origin", "main")
    started = tmp_path / "started"
    server.per_conversation = True
    server.script(tool_calls(call("shell", {"command": f"touch {started}; sleep 60"})), text("changed"))
    added = run_cli("queue", "add", "-p", "lost", "--repo", f"file://{origin}", cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    run_id = added.stdout.splitlines()[-1]
    doomed = workers.start("--permission-mode", "yolo")
    wait_for(started.exists, what="the tool call")
    [worktree] = code_puppy_home.glob(f"**/.code-puppy/worktrees/{run_id}") or [None]
    assert worktree is not None and worktree.is_dir()
    os.killpg(doomed.pid, signal.SIGKILL)  # the worker, its run and (below) its disk, as a machine that goes down
    doomed.communicate(timeout=10)
    shutil.rmtree(worktree)
    heir = workers.start("--permission-mode", "yolo")
    wait_for(lambda: runs(tmp_path, pause=0.5)[run_id]["status"] == "failed", what="the run taken over, failed")
    record = shown(run_id, tmp_path)
    assert (record["status"], record["error"], record["exit_code"], record["diff_stat"], record["worker"]) == (
        "failed",
        lost_worktree(str(worktree)),
        1,
        "",
        f"{os.uname().nodename}:{heir.pid}",
    )
    assert len(server.requests) == 1  # the finished first request was not sent again: the run did not start afresh


def test_a_queued_repository_linking_its_worktrees_folder_elsewhere_gets_no_worktree_there(
    fleet_server: FakeLLMServer,  # noqa: F811
    repository: Path,  # noqa: F811
    workers: Workers,  # noqa: F811
    tmp_path: Path,
) -> None:
    # The repository is the queuer's (or anyone's, by url): its files must not choose where the worker writes.
    outside = tmp_path / "outside"
    outside.mkdir()
    (repository / ".code-puppy").mkdir(exist_ok=True)
    (repository / ".code-puppy" / "worktrees").symlink_to(outside)
    git(repository, "add", "-A")
    git(repository, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "link")
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))  # its HEAD: the clone checks main out
    git(repository, "push", "-q", str(origin), "main")

    added = run_cli("queue", "add", "-p", "x", "--repo", f"file://{origin}", cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    run_id = added.stdout.splitlines()[-1]
    workers.start("--permission-mode", "yolo")
    wait_for(lambda: runs(tmp_path, pause=0.5)[run_id]["status"] not in ("queued", "running"), what="the run")

    assert runs(tmp_path)[run_id]["status"] == "failed"
    assert (
        "is a symbolic link (or under one): worktrees are made only in the repository's own folder"
        in (shown(run_id, tmp_path)["error"])
    )
    assert list(outside.iterdir()) == []
    assert fleet_server.requests == []
