"""Sessions from the command line: saved every run, -c/-r, list/show/export/delete, custody on failure and kill -9."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, ToolReturnPart, UserPromptPart

from code_puppy.sessions.store import SqliteConversationStore
from tests.conftest import CODE_PUPPY, run_cli
from tests.fake_llm import call, error, text, tool_calls


def headless_json(*args: str, cwd: Path) -> dict[str, Any]:
    completed = run_cli(*args, "--output-format", "json", cwd=cwd)
    return {"exit": completed.returncode, **json.loads(completed.stdout)}


def export(session_id: str, cwd: Path) -> dict[str, Any]:
    completed = run_cli("sessions", "export", session_id, cwd=cwd)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def user_prompts(document: dict[str, Any]) -> list[str]:
    messages = ModelMessagesTypeAdapter.validate_python(document["messages"])
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


def test_continue_resumes_the_latest_session_of_this_project(server: Any, project: Path) -> None:
    server.script(text("first answer"), text("second answer"))
    first = headless_json("-p", "first question", cwd=project)
    second = headless_json("-c", "-p", "second question", cwd=project)
    assert first["session_id"] == second["session_id"]
    sent = [m["content"] for m in server.requests[1].body["messages"] if m["role"] in ("user", "assistant")]
    assert sent == ["first question", "first answer", "second question"]
    assert user_prompts(export(first["session_id"], project)) == ["first question", "second question"]


def test_resume_by_unique_prefix_and_errors(server: Any, project: Path, tmp_path: Path, code_puppy_home: Path) -> None:
    server.script(text("a"), text("b"), text("c"))
    first = headless_json("-p", "one", cwd=project)
    headless_json("-p", "two", cwd=project)
    resumed = headless_json("-r", first["session_id"][:13], "-p", "three", cwd=project)
    assert resumed["session_id"] == first["session_id"]
    unknown = run_cli("-r", "ffffffff", "-p", "x", cwd=project)
    assert (unknown.returncode, unknown.stderr) == (
        2,
        "code-puppy: error: no session matches 'ffffffff' (code-puppy sessions list --all shows them)\n",
    )
    with SqliteConversationStore(code_puppy_home / "sessions.db") as store:
        store.sessions.create(project, session_id="abc-1")
        store.sessions.create(project, session_id="abc-2")
    ambiguous = run_cli("-r", "abc", "-p", "x", cwd=project)
    assert (ambiguous.returncode, ambiguous.stderr) == (
        2,
        "code-puppy: error: 'abc' matches 2 sessions: abc-2 (untitled), abc-1 (untitled)\n",  # newest first
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    nothing = run_cli("-c", "-p", "x", cwd=elsewhere)
    assert (nothing.returncode, nothing.stderr) == (
        2,
        f"code-puppy: error: no session to continue in {elsewhere.resolve()}; start one without -c\n",
    )
    assert len(server.requests) == 3  # the errors sent nothing


def test_list_show_export_delete(server: Any, project: Path, tmp_path: Path) -> None:
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("It is a demo."), text("other"))
    first = headless_json("-p", "what is this project about, in a few words please?", cwd=project)
    other_project = tmp_path / "other"
    other_project.mkdir()
    headless_json("-p", "other project", cwd=other_project)

    listed = run_cli("sessions", "list", cwd=project).stdout.splitlines()
    assert listed[0].split() == ["ID", "AGE", "TURNS", "PROJECT", "COST", "NAME/TITLE"]
    assert len(listed) == 2 and listed[1].startswith(first["session_id"][:8])
    assert listed[1].split()[2:5] == ["1", f"…{str(project.resolve())[-22:]}", "unknown"]
    assert listed[1].endswith("what is this project about, in a few words please?")
    assert len(run_cli("sessions", "list", "--all", cwd=project).stdout.splitlines()) == 3

    shown = run_cli("sessions", "show", first["session_id"][:8], cwd=project).stdout
    assert "› what is this project about" in shown
    assert '⚙ read_file({"path":"README.md"})' in shown
    assert "It is a demo." in shown

    document = export(first["session_id"], project)
    assert document["session"]["id"] == first["session_id"]
    assert document["session"]["message_count"] == 4
    assert document["session"]["requests"] == 2
    assert len(ModelMessagesTypeAdapter.validate_python(document["messages"])) == 4

    refused = run_cli("sessions", "delete", first["session_id"], cwd=project)
    assert refused.returncode == 2 and "without --yes" in refused.stderr
    deleted = run_cli("sessions", "delete", first["session_id"], "--yes", cwd=project)
    assert (deleted.returncode, deleted.stdout) == (0, f"deleted session {first['session_id']}\n")
    assert run_cli("sessions", "list", cwd=project).stdout == f"no sessions in {project.resolve()}\n"


def test_a_failed_run_keeps_the_prompt_and_the_finished_tool_exchange(server: Any, project: Path) -> None:
    server.script(tool_calls(call("read_file", {"path": "README.md"})), *[error(500, "down") for _ in range(3)])
    failed = headless_json("-p", "read the readme", cwd=project)
    assert (failed["exit"], failed["status"]) == (1, "error")
    messages = ModelMessagesTypeAdapter.validate_python(export(failed["session_id"], project)["messages"])
    assert user_prompts({"messages": ModelMessagesTypeAdapter.dump_python(messages, mode="json")}) == [
        "read the readme"
    ]
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [(r.tool_name, r.outcome) for r in returns] == [("read_file", "success")]
    server.script(text("recovered"))
    resumed = headless_json("-c", "-p", "try again", cwd=project)
    assert (resumed["exit"], resumed["output"]) == (0, "recovered")


def test_a_session_whose_runs_all_failed_before_the_model_answered_is_listed_only_with_all(
    server: Any, project: Path
) -> None:
    server.script(text("an answer"), error(401, "bad key"), error(401, "bad key"), text("answered at last"))
    answered = headless_json("-p", "a real session", cwd=project)["session_id"]
    failed = headless_json("-p", "hi", cwd=project)
    assert (failed["exit"], failed["status"]) == (1, "error")
    again = headless_json("-c", "-p", "hi again", cwd=project)
    assert (again["exit"], again["session_id"]) == (1, failed["session_id"])

    listed = run_cli("sessions", "list", cwd=project).stdout.splitlines()
    assert [line.split()[::2][:2] for line in listed[1:-1]] == [[answered[:8], "1"]]
    assert listed[-1] == (
        "(1 session whose every run failed before the model answered is not listed: "
        "`code-puppy sessions list --all` lists it)"
    )
    every = run_cli("sessions", "list", "--all", cwd=project).stdout.splitlines()
    assert [(line.split()[0], line.split()[2], line.split()[-1]) for line in every[1:]] == [
        (failed["session_id"][:8], "failed", "hi"),
        (answered[:8], "1", "session"),
    ]
    # What the user typed is kept: `sessions show` has it, and the session goes on once the model answers.
    assert "› hi again" in run_cli("sessions", "show", failed["session_id"], cwd=project).stdout
    assert headless_json("-r", failed["session_id"], "-p", "once more", cwd=project)["output"] == "answered at last"
    listed = run_cli("sessions", "list", cwd=project).stdout.splitlines()
    assert [line.split()[::2][:2] for line in listed[1:]] == [[failed["session_id"][:8], "1"], [answered[:8], "1"]]


def test_sigint_during_a_tool_checkpoints_with_the_dangling_call_repaired(server: Any, project: Path) -> None:
    server.script(tool_calls(call("shell", {"command": "touch started && sleep 30"})))
    process = subprocess.Popen(
        [str(CODE_PUPPY), "-p", "run the slow thing", "--permission-mode", "yolo", "--output-format", "json"],
        cwd=project,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not (project / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    session_id = json.loads(stdout)["session_id"]
    messages = ModelMessagesTypeAdapter.validate_python(export(session_id, project)["messages"])
    assert user_prompts({"messages": ModelMessagesTypeAdapter.dump_python(messages, mode="json")}) == [
        "run the slow thing"
    ]
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [(r.tool_name, r.outcome) for r in returns] == [("shell", "interrupted")]
    server.script(text("continuing"))
    assert headless_json("-c", "-p", "go on", cwd=project)["output"] == "continuing"
    tool_messages = [m for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 1  # the strict provider sees the call answered


def test_kill_9_mid_run_leaves_a_consistent_resumable_database(
    server: Any, project: Path, code_puppy_home: Path
) -> None:
    server.script(text("done once"))
    completed = headless_json("-p", "first run completes", cwd=project)
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("never", delay=30))
    process = subprocess.Popen(
        [str(CODE_PUPPY), "-c", "-p", "second run gets killed"],
        cwd=project,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while len(server.requests) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    process.kill()
    process.wait(timeout=10)
    with sqlite3.connect(code_puppy_home / "sessions.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    server.script(text("resumed fine"))
    resumed = headless_json("-c", "-p", "still there?", cwd=project)
    assert (resumed["exit"], resumed["session_id"], resumed["output"]) == (0, completed["session_id"], "resumed fine")
    prompts = user_prompts(export(completed["session_id"], project))
    assert prompts[0] == "first run completes" and prompts[-1] == "still there?"


def test_an_invocation_that_fails_before_its_first_save_leaves_no_session(server: Any, project: Path) -> None:
    server.script(text("saved"))
    first = headless_json("-p", "a real session", cwd=project)
    failed = run_cli("-c", "-p", "x", "-m", "unknown-model-name", cwd=project)
    assert failed.returncode == 2
    (project / ".code-puppy").mkdir()
    (project / ".code-puppy" / "config.toml").write_text('[history]\nprocessors = ["no_such_module:fn"]\n')
    run_cli("trust", cwd=project)
    broken = run_cli("-p", "x", cwd=project)
    assert broken.returncode == 2 and "no_such_module:fn" in broken.stderr
    listed = run_cli("sessions", "list", "--all", cwd=project).stdout.splitlines()
    assert [line[:8] for line in listed[1:]] == [first["session_id"][:8]]
    info = export(first["session_id"], project)["session"]
    assert info["model"] == "fake"


def test_turns_count_each_answered_prompt_after_continuing_a_run_that_never_reached_the_model(
    server: Any, project: Path, code_puppy_home: Path
) -> None:
    config = code_puppy_home / "config.toml"
    working = config.read_text()
    config.write_text(working.replace(server.base_url, "http://127.0.0.1:9/v1"))  # nothing listens: refused
    refused = headless_json("-p", "first", cwd=project)
    assert (refused["exit"], refused["status"]) == (1, "error")
    config.write_text(working)
    server.script(text("answer two"), text("answer three"), text("answer four"))
    turns: list[str] = []
    for prompt in ("two", "three", "four"):
        run = headless_json("-p", prompt, "-c", cwd=project)
        assert (run["exit"], run["session_id"]) == (0, refused["session_id"])
        listed = run_cli("sessions", "list", "--all", cwd=project).stdout.splitlines()
        assert [line.split()[0] for line in listed[1:]] == [refused["session_id"][:8]]
        turns.append(listed[1].split()[2])
    import shutil

    shutil.copy(code_puppy_home / "sessions.db", "/tmp/fixchat-s.db")
    assert turns == ["1", "2", "3"]
    # The run that merged the failed prompt into its request rewrote the stored history: what it added is indexed.
    found = json.loads(run_cli("sessions", "search", "three", "--output-format", "json", cwd=project).stdout)
    assert [hit["session_id"] for hit in found] == [refused["session_id"]]
    assert sorted((match["role"], match["line"]) for match in found[0]["matches"]) == [
        ("model", "answer three"),
        ("user", "three"),
    ]
