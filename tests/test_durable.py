"""Durable runs (`--durable`, `code-puppy runs`), end to end through the installed console script: killed with kill -9
(the whole process group) at several points, then resumed; the fake server's log shows what was sent again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CODE_PUPPY, run_cli, wait_for
from tests.fake_llm import FakeLLMServer, call, hang, text, tool_calls

GATED = "if [ -f go ]; then echo {word} >> side.txt; else touch started; sleep 5; fi"
"""A shell command that appends `word` once the test allows it (`go`), and before that says it started and waits: the
process can be killed while it is in flight, and its orphaned shell writes nothing."""


def start_durable(*args: str, cwd: Path) -> subprocess.Popen[str]:
    """`code-puppy -p … --durable` in a process group of its own, so that kill -9 takes all of it."""
    return subprocess.Popen(
        [str(CODE_PUPPY), *args, "--durable", "--permission-mode", "yolo"],
        cwd=cwd,
        env=dict(os.environ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def kill_9(process: subprocess.Popen[str]) -> str:
    """SIGKILL the process group; what the process wrote on stderr."""
    os.killpg(process.pid, signal.SIGKILL)
    return process.communicate(timeout=10)[1]


def listed(cwd: Path) -> list[dict[str, Any]]:
    shown = run_cli("runs", "list", "--json", cwd=cwd)
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def roles(server: FakeLLMServer, index: int) -> list[str]:
    """The conversation request `index` sent, as roles (system prompts left out) with tool calls named."""
    shown: list[str] = []
    for message in server.requests[index].body["messages"]:
        if message["role"] == "system":
            continue
        calls = message.get("tool_calls") or []
        shown.append(message["role"] + "".join(f" {c['function']['name']}" for c in calls))
    return shown


def local_databases(home: Path) -> list[str]:
    """The SQLite files (and their -wal, -shm, locks) in the data directory."""
    return sorted(path.name for path in home.rglob("*") if ".db" in path.name or ".sqlite" in path.name)


def test_kill_9_between_two_tool_calls_then_resume_repeats_no_finished_call_or_request(
    server: FakeLLMServer, project: Path, backend: str, code_puppy_home: Path
) -> None:
    config = code_puppy_home / "config.toml"  # its last table is [models.fake]: a dollar a token, to see the costs
    config.write_text(config.read_text() + "input_price = 1000000\noutput_price = 1000000\n")
    server.script(
        tool_calls(
            call("shell", {"command": "echo one >> side.txt"}), call("shell", {"command": GATED.format(word="two")})
        ),
        text("both lines written"),
    )
    process = start_durable("-p", "write two lines", cwd=project)
    wait_for(lambda: (project / "started").exists(), what="the second tool call")
    stderr = kill_9(process)
    assert (project / "side.txt").read_text() == "one\n"
    run_id = stderr.splitlines()[0].removeprefix("code-puppy: durable run ")
    (entry,) = listed(project)
    assert entry["id"] == run_id and entry["status"] == "interrupted"
    assert (entry["pid"], entry["worker"]) == (process.pid, f"{entry['host']}:{process.pid}")
    assert entry["steps"] >= 2  # the model request and the first tool call, at least
    first = server.requests[0]
    assert entry["cost_usd"] == pytest.approx(first.input_tokens + first.output_tokens)

    (project / "go").touch()
    resumed = run_cli("runs", "resume", run_id[:8], cwd=project)
    assert (resumed.returncode, resumed.stdout) == (0, "both lines written\n"), resumed.stderr
    assert (project / "side.txt").read_text() == "one\ntwo\n"  # the finished call ran once, the one in flight again
    assert len(server.requests) == 2  # the finished request was replayed, not sent again
    assert roles(server, 1) == ["user", "assistant shell shell", "tool", "tool"]
    assert "echo one" not in resumed.stderr  # a replayed call is not shown again

    shown = run_cli("runs", "show", run_id, "--json", cwd=project)
    assert shown.returncode == 0, shown.stderr
    result = json.loads(shown.stdout)
    assert {key: result[key] for key in ("status", "output", "session_id", "error")} == {
        "status": "succeeded",
        "output": "both lines written",
        "session_id": entry["session_id"],
        "error": None,
    }
    assert result["steps"] > entry["steps"]
    # Each request priced once, from the costs book of the store: the replayed one not again.
    assert result["cost_usd"] == pytest.approx(sum(r.input_tokens + r.output_tokens for r in server.requests))
    history = run_cli("sessions", "show", entry["session_id"], cwd=project)
    assert history.stdout.count("› write two lines") == 1 and "both lines written" in history.stdout
    if backend == "postgresql":  # the store and DBOS's system database both in the one PostgreSQL database
        assert local_databases(code_puppy_home) == []
    else:
        assert "durable.sqlite" in local_databases(code_puppy_home) and "sessions.db" in local_databases(
            code_puppy_home
        )


def test_kill_9_during_a_model_request_then_resume_sends_only_that_request_again(
    server: FakeLLMServer, project: Path
) -> None:
    server.script(tool_calls(call("shell", {"command": "echo one >> side.txt"})), hang())
    process = start_durable("-p", "append", "--output-format", "json", cwd=project)
    wait_for(lambda: len(server.requests) == 2, what="the second model request")
    (running,) = listed(project)
    assert running["status"] == "running"
    refused = run_cli("runs", "resume", running["id"], cwd=project)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (
        f"code-puppy: error: durable run {running['id']} is running (pid {process.pid}); only an interrupted run can "
        "resume\n"
    )
    kill_9(process)

    server.script(text("appended"))
    resumed = run_cli("runs", "resume", running["id"], cwd=project)
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)  # the output format it started with
    assert (result["status"], result["output"], result["session_id"]) == ("success", "appended", running["session_id"])
    assert (project / "side.txt").read_text() == "one\n"
    assert len(server.requests) == 3  # the first request replayed; the one in flight sent again
    assert server.requests[2].body["messages"] == server.requests[1].body["messages"]

    again = run_cli("runs", "resume", running["id"], cwd=project)
    assert (again.returncode, again.stderr) == (
        2,
        f"code-puppy: error: durable run {running['id']} succeeded; only an interrupted run can resume\n",
    )


def test_an_interrupted_run_blocks_continue_until_cancelled_and_its_steps_join_the_session(
    server: FakeLLMServer, project: Path, tmp_path: Path, code_puppy_home: Path, backend: str
) -> None:
    server.script(tool_calls(call("shell", {"command": "echo one >> side.txt"})), hang())
    process = start_durable("-p", "append", cwd=project)
    wait_for(lambda: len(server.requests) == 2, what="the second model request")
    kill_9(process)
    (run,) = listed(project)

    blocked = run_cli("-c", "-p", "go on", cwd=project)
    assert (blocked.returncode, blocked.stdout) == (2, "")
    assert blocked.stderr == (
        f"code-puppy: error: session {run['session_id'][:8]} has an interrupted durable run: continue it with "
        f"`code-puppy runs resume {run['id']}`, or drop it with `code-puppy runs cancel {run['id']}`\n"
    )
    if backend == "sqlite":  # the refusals that do not depend on the store: once
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        moved = run_cli("runs", "resume", run["id"], cwd=elsewhere)
        assert (moved.returncode, moved.stderr) == (
            2,
            f"code-puppy: error: durable run {run['id']} belongs to the project {project}: resume it there\n",
        )
        unknown = run_cli("runs", "show", "nosuchrun", cwd=project)
        assert (unknown.returncode, unknown.stdout, unknown.stderr) == (
            2,
            "",
            "code-puppy: error: no durable run nosuchrun (code-puppy runs list shows them)\n",
        )
        config = code_puppy_home / "config.toml"
        working = config.read_text()
        config.write_text('model = "fake"\n')  # its model can no longer be set up: refused before anything replays
        broken = run_cli("runs", "resume", run["id"], cwd=project)
        assert (broken.returncode, broken.stdout) == (2, ""), broken.stderr
        assert broken.stderr.startswith("code-puppy: error: ") and len(broken.stderr.splitlines()) == 1, broken.stderr
        config.write_text(working)
    assert [entry["status"] for entry in listed(project)] == ["interrupted"]
    assert len(server.requests) == 2  # none of the refusals sent anything

    cancelled = run_cli("runs", "cancel", run["id"], cwd=project)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout == f"cancelled durable run {run['id']}; recovered an interrupted turn: 3 steps\n"
    assert [entry["status"] for entry in listed(project)] == ["cancelled"]

    server.script(text("went on"))
    continued = run_cli("-c", "-p", "go on", cwd=project)
    assert (continued.returncode, continued.stdout) == (0, "went on\n"), continued.stderr
    assert roles(server, 2) == ["user", "assistant shell", "tool", "user"]
    assert (project / "side.txt").read_text() == "one\n"
    assert (local_databases(code_puppy_home) == []) == (backend == "postgresql")


def test_a_plain_run_imports_no_durable_machinery(server: FakeLLMServer, project: Path) -> None:
    server.script(text("plain"), text("durable"))
    heavy = ("dbos", "sqlalchemy", "psycopg")

    def imported(*args: str) -> set[str]:
        completed = run_cli(*args, cwd=project, env={"PYTHONPROFILEIMPORTTIME": "1"})
        assert completed.returncode == 0, completed.stderr[-2000:]
        lines = [line.rsplit("|", 1)[-1].strip() for line in completed.stderr.splitlines() if "import time:" in line]
        return {name.split(".")[0] for name in lines} & set(heavy)

    assert imported("-p", "hi") == set()
    assert "dbos" in imported("-p", "hi", "--durable")  # the check can fail: a durable run imports it


STALL = """
import asyncio
from pathlib import Path

import code_puppy

@code_puppy.hookimpl
async def agent_run_end(result, error, session):
    if not Path("go").exists():  # the run has its answer; the session's final save comes next
        Path("saving").touch()
        await asyncio.sleep(30)
"""


def test_kill_9_during_the_final_save_then_resume_sends_nothing_and_saves_the_turn_once(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    (code_puppy_home / "plugins").mkdir()
    (code_puppy_home / "plugins" / "stall.py").write_text(STALL)
    server.script(tool_calls(call("shell", {"command": "echo one >> side.txt"})), text("saved"))
    process = start_durable("-p", "append and save", cwd=project)
    wait_for(lambda: (project / "saving").exists(), what="the final save")
    kill_9(process)
    (run,) = listed(project)
    assert run["status"] == "interrupted"

    (project / "go").touch()
    resumed = run_cli("runs", "resume", run["id"], cwd=project)
    assert (resumed.returncode, resumed.stdout) == (0, "saved\n"), resumed.stderr
    assert len(server.requests) == 2  # every request had finished: none is sent again
    assert (project / "side.txt").read_text() == "one\n"
    history = run_cli("sessions", "show", run["session_id"], cwd=project)
    assert history.stdout.count("› append and save") == 1 and history.stdout.count("saved") == 1, history.stdout
    server.script(text("next"))
    continued = run_cli("-c", "-p", "next", cwd=project)
    assert (continued.returncode, continued.stdout) == (0, "next\n"), continued.stderr
    assert roles(server, 2) == ["user", "assistant shell", "tool", "assistant", "user"]


def test_run_durable_in_config_makes_every_headless_run_durable_and_denial_still_applies(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    config = code_puppy_home / "config.toml"
    config.write_text(config.read_text() + "[run]\ndurable = true\n")
    server.script(tool_calls(call("shell", {"command": "echo one >> side.txt"})), text("could not"))
    completed = run_cli("-p", "append", "--output-format", "json", cwd=project)
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert (result["output"], result["denied"]) == ("could not", 1)  # nobody can approve a call in a headless run
    assert not (project / "side.txt").exists()
    (run,) = listed(project)
    assert run["id"] in completed.stderr.splitlines()[0]
    assert (run["status"], run["session_id"]) == ("succeeded", result["session_id"])
    text_list = run_cli("runs", "list", cwd=project)
    assert (
        text_list.stdout
        == f"{run['id']}  succeeded    session {run['session_id'][:8]}  {run['steps']} steps  {run['worker']}\n"
    )
    assert sorted(path.name for path in project.iterdir()) == ["README.md"]  # nothing of DBOS's in the project
    assert (code_puppy_home / "durable.sqlite").stat().st_mode & 0o777 == 0o600


def test_a_run_killed_before_its_first_step_resumes_from_its_prompt(server: FakeLLMServer, project: Path) -> None:
    server.script(text("started late"))
    process = start_durable("-p", "begin", cwd=project)
    assert process.stderr is not None
    line = process.stderr.readline()  # printed once the run is recorded, before the project starts
    kill_9(process)
    run_id = line.removeprefix("code-puppy: durable run ").strip()
    assert [(entry["id"], entry["status"]) for entry in listed(project)] == [(run_id, "interrupted")]
    resumed = run_cli("runs", "resume", run_id, cwd=project)
    assert (resumed.returncode, resumed.stdout) == (0, "started late\n"), resumed.stderr
    assert len(server.requests) == 1


def test_a_run_of_another_host_on_the_shared_store_shows_running_and_only_its_host_resumes_it(
    server: FakeLLMServer, project: Path, postgres_url: str, monkeypatch: Any
) -> None:
    import psycopg

    monkeypatch.setenv("CODE_PUPPY_STORAGE_URL", postgres_url)
    server.script(text("never sent"))
    process = start_durable("-p", "begin", cwd=project)
    assert process.stderr is not None
    run_id = process.stderr.readline().removeprefix("code-puppy: durable run ").strip()
    kill_9(process)
    with psycopg.connect(postgres_url, autocommit=True) as connection:  # as a process of another machine left it
        connection.execute(
            "UPDATE dbos.workflow_status SET executor_id = 'otherbox/4242/-/otherbox:ns' WHERE workflow_uuid = %s",
            (run_id,),
        )
    (entry,) = listed(project)
    assert (entry["id"], entry["status"], entry["host"], entry["pid"], entry["worker"]) == (
        run_id,
        "running",  # its pid means nothing here: never taken for dead
        "otherbox",
        4242,
        "otherbox:4242",
    )
    for verb in ("resume", "cancel"):
        refused = run_cli("runs", verb, run_id, cwd=project)
        assert (refused.returncode, refused.stdout, refused.stderr) == (
            2,
            "",
            f"code-puppy: error: durable run {run_id} belongs to a process on host otherbox (pid 4242), which this "
            f"host cannot check; {verb} it on otherbox\n",
        )
    assert [entry["status"] for entry in listed(project)] == ["running"]
    assert server.requests == []


def test_a_durable_run_is_steered_and_stopped_by_its_timeout_as_a_plain_run_is(
    server: FakeLLMServer, project: Path
) -> None:
    server.script(text("A first draft.", delay=1.5), text("Revised with the tests in mind."))
    process = start_durable("-p", "write it", "--output-format", "stream-json", cwd=project)
    try:
        wait_for(lambda: len(server.requests) == 1, timeout=30, what="the first request")
        steered = run_cli("steer", "focus on the tests", cwd=project)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert steered.returncode == 0, steered.stderr
    assert process.returncode == 0, stderr
    events = [json.loads(line) for line in stdout.splitlines()]
    assert [event["text"] for event in events if event["type"] == "steer"] == ["focus on the tests"]
    assert events[-1]["output"] == "Revised with the tests in mind."
    users = [m["content"] for m in server.requests[1].body["messages"] if m["role"] == "user"]
    assert users == ["write it", "focus on the tests"]
    (run,) = listed(project)
    assert run["status"] == "succeeded"

    server.script(text("too late", delay=10))
    timed = run_cli("-p", "hi", "--durable", "--timeout", "1", "--output-format", "json", cwd=project, timeout=60)
    assert timed.returncode == 3, timed.stderr
    result = json.loads(timed.stdout)
    assert (result["status"], result["error"]) == ("limit", "stopped by a limit: timeout (1 s)")
    assert [run["status"] for run in listed(project)] == ["failed", "succeeded"]


def merged(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`events` with each run of `text_delta`s (or `thinking_delta`s) in a row joined into one, as `runs show --follow`
    prints a response's text: the stream's token-level splitting is the one thing no store keeps."""
    joined: list[dict[str, Any]] = []
    for event in events:
        last = joined[-1] if joined else None
        if last is not None and event["type"] in ("text_delta", "thinking_delta") and last["type"] == event["type"]:
            joined[-1] = {**last, "text": last["text"] + event["text"]}
        else:
            joined.append(event)
    return joined


def test_runs_show_follow_prints_the_events_its_stream_json_run_printed_in_their_shapes(
    server: FakeLLMServer, project: Path, backend: str, code_puppy_home: Path
) -> None:
    config = code_puppy_home / "config.toml"  # its last table is [models.fake]: a dollar a token, to see the costs
    config.write_text(config.read_text() + "input_price = 1000000\noutput_price = 1000000\n")
    scripted = (
        tool_calls(call("shell", {"command": "echo one > side.txt"}), thinking="First the file, then the answer."),
        text("Wrote side.txt for you.", thinking="It is written, so I say so."),
    )
    server.script(*scripted)
    streamed = run_cli(
        "-p", "write it", "--durable", "--permission-mode", "yolo", "--output-format", "stream-json", cwd=project
    )
    assert streamed.returncode == 0, streamed.stderr
    run_id = streamed.stderr.splitlines()[0].removeprefix("code-puppy: durable run ")
    followed = run_cli("runs", "show", run_id, "--follow", cwd=project)
    assert (followed.returncode, followed.stderr) == (0, "")
    events = [json.loads(line) for line in followed.stdout.splitlines()]
    stream = [json.loads(line) for line in streamed.stdout.splitlines()]

    assert [(event["type"], sorted(event)) for event in events] == [
        ("session", ["session_id", "type"]),
        ("thinking_delta", ["run", "text", "type"]),
        ("request", ["cost_usd", "kind", "model", "run", "type", "usage"]),
        ("tool_call", ["args", "run", "tool_call_id", "tool_name", "type"]),
        ("tool_result", ["content", "outcome", "run", "tool_call_id", "tool_name", "type"]),
        ("thinking_delta", ["run", "text", "type"]),
        ("text_delta", ["run", "text", "type"]),
        ("request", ["cost_usd", "kind", "model", "run", "type", "usage"]),
        ("result", sorted(["type", "session_id", "output", "status", "usage", "duration_ms", "error", "cost_usd",
                           "cost_complete", "denied"])),
    ]  # fmt: skip
    # The same events with the same values, but for how long each side measured the run.
    assert [{**event, "duration_ms": 0} if event["type"] == "result" else event for event in stream] == [
        {**event, "duration_ms": 0} if event["type"] == "result" else event for event in events
    ]
    first, second = server.requests
    assert [event["usage"] for event in events if event["type"] == "request"] == [
        {"input_tokens": r.input_tokens, "output_tokens": r.output_tokens, "cache_read_tokens": 0,
         "cache_write_tokens": 0}
        for r in (first, second)
    ]  # fmt: skip
    assert events[-1]["cost_usd"] == pytest.approx(sum(r.input_tokens + r.output_tokens for r in (first, second)))
    assert (events[-1]["usage"]["requests"], events[-1]["output"], events[-1]["status"]) == (
        2,
        "Wrote side.txt for you.",
        "success",
    )
    assert events[1]["text"] == "First the file, then the answer."

    # A plain run of the same script streams its text and thinking a word at a time: joined, the same shapes.
    server.script(*scripted)
    plain = run_cli("-p", "write it", "--permission-mode", "yolo", "--output-format", "stream-json", cwd=project)
    assert plain.returncode == 0, plain.stderr
    words = [json.loads(line) for line in plain.stdout.splitlines()]
    assert len(merged(words)) < len(words)
    assert [(event["type"], sorted(event)) for event in merged(words)] == [
        (event["type"], sorted(event)) for event in events
    ]
