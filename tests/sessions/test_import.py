"""`code-puppy sessions import`: hand-made Claude Code transcripts and Codex rollouts, through the console script."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart

from code_puppy.sessions.store import SqliteConversationStore
from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, text

CLAUDE_SESSION = "4f35e220-c435-4cf7-b9b9-f40426042847"


def jsonl(path: Path, *records: dict[str, Any] | str) -> Path:
    """Write `records` one per line (a string is written as it is: a malformed line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def claude_transcript(path: Path, project: Path) -> Path:
    """A Claude Code session: a prompt, an answer streamed as two records with a Read call, its result, and a final
    answer; besides, a summary, a file-history snapshot, a system record, and one malformed line (line 7)."""
    common = {"cwd": str(project), "sessionId": CLAUDE_SESSION, "version": "2.0.61", "isSidechain": False}
    return jsonl(
        path,
        {"type": "summary", "summary": "Reading hello.py", "leafUuid": "u4"},
        {"type": "file-history-snapshot", "messageId": "u1", "snapshot": {"trackedFileBackups": {}}},
        {
            **common,
            "type": "user",
            "uuid": "u1",
            "parentUuid": None,
            "timestamp": "2025-11-02T10:00:00.000Z",
            "message": {"role": "user", "content": "What does hello.py print?"},
        },
        {
            **common,
            "type": "assistant",
            "uuid": "u2",
            "parentUuid": "u1",
            "timestamp": "2025-11-02T10:00:02.000Z",
            "message": {
                "id": "msg_01",
                "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": [{"type": "text", "text": "Let me read it."}],
            },
        },
        {
            **common,
            "type": "assistant",
            "uuid": "u3",
            "parentUuid": "u2",
            "timestamp": "2025-11-02T10:00:03.000Z",
            "message": {
                "id": "msg_01",
                "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": [
                    {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"file_path": "/p/hello.py"}}
                ],
            },
        },
        {
            **common,
            "type": "user",
            "uuid": "u4",
            "parentUuid": "u3",
            "timestamp": "2025-11-02T10:00:04.000Z",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "print('hi')"}],
            },
            "toolUseResult": {"type": "text"},
        },
        '{"type": "assistant", "message": {',
        {
            **common,
            "type": "assistant",
            "uuid": "u5",
            "parentUuid": "u4",
            "timestamp": "2025-11-02T10:00:06.000Z",
            "message": {
                "id": "msg_02",
                "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": [{"type": "thinking", "thinking": "easy", "signature": "x"}, {"type": "text", "text": "hi"}],
            },
        },
        {**common, "type": "system", "subtype": "compact_boundary", "timestamp": "2025-11-02T10:00:07.000Z"},
    )


def codex_rollout(path: Path, project: Path) -> Path:
    """A Codex session: its environment context, a prompt, reasoning, a shell call and its output, an answer; besides,
    event messages, a turn context, and a record type no Codex version writes."""
    at = "2025-10-05T09:00:0{}.000Z".format
    return jsonl(
        path,
        {
            "timestamp": at(0),
            "type": "session_meta",
            "payload": {"id": "0199b2c4-1111-7222-8333-944455556666", "cwd": str(project), "cli_version": "0.46.0"},
        },
        {
            "timestamp": at(0),
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>/p</cwd>\n"}],
            },
        },
        {"timestamp": at(1), "type": "turn_context", "payload": {"cwd": str(project), "model": "gpt-5-codex"}},
        {
            "timestamp": at(1),
            "type": "response_item",
            "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List files"}]},
        },
        {"timestamp": at(1), "type": "event_msg", "payload": {"type": "user_message", "message": "List files"}},
        {
            "timestamp": at(2),
            "type": "response_item",
            "payload": {"type": "reasoning", "summary": [], "content": None, "encrypted_content": "gAAAA"},
        },
        {
            "timestamp": at(3),
            "type": "response_item",
            "payload": {
                "type": "function_call",
                "name": "shell",
                "arguments": '{"command":["ls"]}',
                "call_id": "call_ls",
            },
        },
        {
            "timestamp": at(4),
            "type": "response_item",
            "payload": {"type": "function_call_output", "call_id": "call_ls", "output": "README.md\n"},
        },
        {"timestamp": at(5), "type": "event_msg", "payload": {"type": "token_count", "info": None}},
        {
            "timestamp": at(6),
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "One file: README.md."}],
            },
        },
        {"timestamp": at(7), "type": "mystery_record", "payload": {}},
    )


def stored(code_puppy_home: Path, session_id: str) -> tuple[Any, list[Any]]:
    """The stored session and its messages, from the store the test's `code-puppy` used (`CODE_PUPPY_HOME`'s file,
    or `CODE_PUPPY_STORAGE_URL`)."""
    import asyncio

    from code_puppy.sessions.store import open_store

    assert code_puppy_home.is_dir()
    with open_store(readonly=True) as store:
        info = store.sessions.find(session_id)[0]
        conversation = asyncio.run(store.load(session_id))
        assert conversation is not None
        return info, list(conversation.messages)


def imported_ids(stdout: str) -> list[str]:
    return [file["session_id"] for file in json.loads(stdout)["files"]]


def sent_history(server: FakeLLMServer) -> list[dict[str, Any]]:
    return [message for message in server.requests[0].body["messages"] if message["role"] != "system"]


def test_a_claude_code_transcript_is_imported_and_resumed(
    project: Path, tmp_path: Path, server: FakeLLMServer, code_puppy_home: Path, backend: str
) -> None:
    transcript = claude_transcript(tmp_path / "claude" / f"{CLAUDE_SESSION}.jsonl", project)

    done = run_cli("sessions", "import", str(transcript), "--output-format", "json", cwd=project)

    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(f"{transcript}:7: not valid JSON (")
    assert done.stderr.count("\n") == 1
    [report] = json.loads(done.stdout)["files"]
    session_id = report.pop("session_id")
    assert report == {
        "file": str(transcript),
        "format": "claude-code",
        "status": "imported",
        "project_dir": str(project.resolve()),
        "messages": 4,
        "skipped": {"file-history-snapshot": 1, "summary": 1, "system": 1, "thinking block": 1},
        "malformed_lines": 1,
    }
    info, messages = stored(code_puppy_home, session_id)
    assert (info.project_dir, info.title) == (str(project.resolve()), "What does hello.py print?")
    assert (info.created_at, info.updated_at) == (
        datetime(2025, 11, 2, 10, 0, tzinfo=UTC),
        datetime(2025, 11, 2, 10, 0, 6, tzinfo=UTC),
    )
    assert [type(message) for message in messages] == [ModelRequest, ModelResponse, ModelRequest, ModelResponse]
    assert messages[0].parts == [UserPromptPart("What does hello.py print?", timestamp=info.created_at)]
    assert messages[1].parts == [
        TextPart("Let me read it."),
        ToolCallPart("Read", {"file_path": "/p/hello.py"}, "toolu_01"),
    ]
    assert messages[1].model_name == "claude-sonnet-4-5-20250929"
    assert messages[2].parts == [
        ToolReturnPart("Read", "print('hi')", "toolu_01", timestamp=datetime(2025, 11, 2, 10, 0, 4, tzinfo=UTC))
    ]

    server.script(text("It still prints hi."))
    resumed = run_cli("-r", session_id, "-p", "and now?", cwd=project)

    assert resumed.returncode == 0, resumed.stderr
    assert sent_history(server) == [
        {"role": "user", "content": "What does hello.py print?"},
        {
            "role": "assistant",
            "content": "Let me read it.",
            "tool_calls": [
                {
                    "id": "toolu_01",
                    "type": "function",
                    "function": {"name": "Read", "arguments": '{"file_path":"/p/hello.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_01", "content": "print('hi')"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "and now?"},
    ]


def test_a_codex_rollout_is_imported_and_resumed(
    project: Path, tmp_path: Path, server: FakeLLMServer, code_puppy_home: Path
) -> None:
    rollout = codex_rollout(tmp_path / "codex" / "2025" / "10" / "05" / "rollout-2025-10-05T09-00-00-x.jsonl", project)

    done = run_cli("sessions", "import", str(rollout), cwd=project)

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    session_id = done.stdout.split(" as session ")[1].split()[0]
    assert done.stdout == (
        f"{rollout}: imported (codex) as session {session_id} of {project.resolve()}: 4 messages; skipped 2 event_msg, "
        "1 message item, 1 mystery_record, 1 reasoning item\n"
    )
    info, messages = stored(code_puppy_home, session_id)
    assert messages[1].parts == [ToolCallPart("shell", '{"command":["ls"]}', "call_ls")]
    assert messages[1].model_name == "gpt-5-codex"
    assert info.created_at == datetime(2025, 10, 5, 9, 0, 1, tzinfo=UTC)

    server.script(text("Still one."))
    resumed = run_cli("-r", session_id, "-p", "again?", cwd=project)

    assert resumed.returncode == 0, resumed.stderr
    assert sent_history(server) == [
        {"role": "user", "content": "List files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_ls", "type": "function", "function": {"name": "shell", "arguments": '{"command":["ls"]}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_ls", "content": "README.md\n"},
        {"role": "assistant", "content": "One file: README.md."},
        {"role": "user", "content": "again?"},
    ]


def test_importing_again_adds_nothing(project: Path, tmp_path: Path, code_puppy_home: Path) -> None:
    transcript = claude_transcript(tmp_path / f"{CLAUDE_SESSION}.jsonl", project)
    first = run_cli("sessions", "import", str(transcript), "--output-format", "json", cwd=project)

    again = run_cli("sessions", "import", str(transcript), "--output-format", "json", cwd=project)

    assert (first.returncode, again.returncode) == (0, 0)
    assert json.loads(again.stdout)["files"][0]["status"] == "already imported"
    assert imported_ids(again.stdout) == imported_ids(first.stdout)
    with SqliteConversationStore(code_puppy_home / "sessions.db", readonly=True) as store:
        assert [info.id for info in store.sessions.recent()] == imported_ids(first.stdout)


def test_a_folder_dry_run_lists_every_file_and_writes_nothing(
    project: Path, tmp_path: Path, code_puppy_home: Path
) -> None:
    claude_transcript(tmp_path / "in" / "claude" / "a.jsonl", project)
    jsonl(tmp_path / "in" / "claude" / "agent-1.jsonl", {"type": "user", "isSidechain": True, "message": {}})
    codex_rollout(tmp_path / "in" / "codex" / "rollout-b.jsonl", project)
    history = jsonl(tmp_path / "in" / "history.jsonl", {"display": "a prompt", "project": str(project)})

    done = run_cli("sessions", "import", str(tmp_path / "in"), "--dry-run", "--output-format", "json", cwd=project)

    assert done.returncode == 0, done.stderr
    statuses = [(Path(file["file"]).name, file["status"]) for file in json.loads(done.stdout)["files"]]
    assert statuses == [
        ("a.jsonl", "would import"),
        ("agent-1.jsonl", "skipped"),
        ("rollout-b.jsonl", "would import"),
        ("history.jsonl", "skipped"),
    ]
    assert not (code_puppy_home / "sessions.db").exists()

    named = run_cli("sessions", "import", str(history), cwd=project)

    assert named.returncode == 1
    assert named.stdout == f"{history}: not imported: neither a Claude Code transcript nor a Codex rollout\n"


def test_what_is_not_a_regular_file_is_never_read(project: Path, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    transcript = claude_transcript(folder / "a.jsonl", project)
    fifo = folder / "pipe.jsonl"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    (folder / "dir.jsonl").mkdir()

    found = run_cli("sessions", "import", str(folder), "--dry-run", cwd=project, timeout=30)

    assert found.returncode == 0
    assert all(line.startswith(f"{transcript}:") for line in found.stderr.splitlines())  # its malformed line
    assert found.stdout.splitlines()[1:] == [
        f"{folder / 'dir.jsonl'}: skipped: not a regular file",
        f"{fifo}: skipped: not a regular file",
    ]
    assert found.stdout.startswith(f"{transcript}: would import (claude-code) ")

    named = run_cli("sessions", "import", str(fifo), cwd=project, timeout=30)

    assert (named.returncode, named.stdout, named.stderr) == (1, f"{fifo}: not imported: not a regular file\n", "")


def test_a_missing_path_is_one_line_and_exit_2(project: Path) -> None:
    done = run_cli("sessions", "import", "missing.jsonl", cwd=project)

    assert (done.returncode, done.stderr) == (2, "code-puppy: error: missing.jsonl: no such file or directory\n")


def test_a_call_the_transcript_never_answered_gets_a_result_and_a_late_result_is_left_out(tmp_path: Path) -> None:
    from code_puppy.sessions.transcripts import NO_RESULT, read_transcript

    def record(kind: str, content: Any, second: int) -> dict[str, Any]:
        return {
            "type": kind,
            "sessionId": "s",
            "cwd": str(tmp_path),
            "timestamp": f"2025-11-02T10:00:0{second}Z",
            "message": {"role": kind, "content": content},
        }

    bash = {"type": "tool_use", "id": "toolu_9", "name": "Bash", "input": {"command": "sleep 100"}}
    late = {"type": "tool_result", "tool_use_id": "toolu_9", "content": "too late"}
    path = jsonl(
        tmp_path / "s.jsonl",
        record("user", "run it", 0),
        record("assistant", [bash], 1),
        record("user", "[Request interrupted by user]", 2),
        record("assistant", [{"type": "text", "text": "Stopped."}], 3),
        record("user", [late], 4),
    )

    transcript = read_transcript(path)

    moment = datetime(2025, 11, 2, 10, 0, 1, tzinfo=UTC)
    assert transcript.messages[2] == ModelRequest(
        parts=[
            ToolReturnPart("Bash", NO_RESULT, "toolu_9", timestamp=moment),
            UserPromptPart("[Request interrupted by user]", timestamp=datetime(2025, 11, 2, 10, 0, 2, tzinfo=UTC)),
        ],
        timestamp=datetime(2025, 11, 2, 10, 0, 2, tzinfo=UTC),
    )
    assert len(transcript.messages) == 4
    assert transcript.skipped == {"tool_result without an open tool_use": 1}


def test_a_transcript_that_grew_adds_its_new_messages(project: Path, tmp_path: Path, code_puppy_home: Path) -> None:
    transcript = claude_transcript(tmp_path / f"{CLAUDE_SESSION}.jsonl", project)
    first = run_cli("sessions", "import", str(transcript), "--output-format", "json", cwd=project)
    [session_id] = imported_ids(first.stdout)
    common = {"cwd": str(project), "sessionId": CLAUDE_SESSION, "version": "2.0.61", "isSidechain": False}
    later = [
        {
            **common,
            "type": "user",
            "uuid": "u9",
            "timestamp": "2025-11-03T09:00:00.000Z",
            "message": {"role": "user", "content": "And in French?"},
        },
        {
            **common,
            "type": "assistant",
            "uuid": "u10",
            "timestamp": "2025-11-03T09:00:01.000Z",
            "message": {"id": "msg_09", "role": "assistant", "content": [{"type": "text", "text": "Bonjour."}]},
        },
    ]
    with transcript.open("a") as file:
        file.writelines(json.dumps(record) + "\n" for record in later)

    dry = run_cli("sessions", "import", str(transcript), "--dry-run", "--output-format", "json", cwd=project)
    grown = run_cli("sessions", "import", str(transcript), cwd=project)
    again = run_cli("sessions", "import", str(transcript), "--output-format", "json", cwd=project)

    assert [f["status"] for f in json.loads(dry.stdout)["files"]] == ["would update"]
    assert json.loads(dry.stdout)["files"][0]["added"] == 2
    assert grown.returncode == 0 and f"updated (claude-code) as session {session_id}" in grown.stdout
    assert "(2 new)" in grown.stdout
    assert json.loads(again.stdout)["files"][0]["status"] == "already imported"
    exported = json.loads(run_cli("sessions", "export", session_id, cwd=project).stdout)
    texts = json.dumps(exported["messages"])
    assert texts.count("And in French?") == 1 and texts.count("Bonjour.") == 1
    assert exported["messages"][-1]["parts"][0]["content"] == "Bonjour."
