"""`code-puppy sessions import` of real Claude Code transcripts and Codex rollouts (tests/fixtures/transcripts, each
file's source in the README there): every result the file holds is paired with its call."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from code_puppy.sessions.store import SqliteConversationStore
from code_puppy.sessions.transcripts import NO_RESULT, read_transcript
from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, text
from tests.sessions.test_import import jsonl, sent_history

FIXTURES = Path(__file__).parents[1] / "fixtures" / "transcripts"
PAIRED = {
    "claude-1.0.17-ba79134d.jsonl": 30,
    "claude-1.0.98-1af7fc5e.jsonl": 12,
    "claude-2.0.76-196820da.jsonl": 24,
    "claude-2.1.7-incremental.jsonl": 14,
    "codex-0.125-019e1625.jsonl": 19,
    "codex-0.128-019e1695.jsonl": 15,
}
"""Results each file holds (every call it made has one); on main before this fix, 18, 6, 12, 10, 11 and 7 were
paired, the others stubbed before their call."""


def source_results(path: Path) -> dict[str, str]:
    """Call id to result text, as the file holds them (main-line records only: sub-agents' are not imported)."""
    results: dict[str, str] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        payload = record.get("payload") or {}
        message = record.get("message") if isinstance(record.get("message"), dict) else {}
        for block in message.get("content") if isinstance(message.get("content"), list) else []:  # type: ignore[union-attr]
            if block.get("type") == "tool_result" and not record.get("isSidechain"):
                results[block["tool_use_id"]] = block["content"]
        if payload.get("type") in ("function_call_output", "custom_tool_call_output"):
            results[payload["call_id"]] = payload["output"]
    return results


def paired(messages: list[ModelMessage]) -> tuple[dict[str, Any], int]:
    """The results answering a call of the message just before them, and how many returns are anywhere else."""
    found: dict[str, Any] = {}
    elsewhere = 0
    for before, message in zip([None, *messages], messages, strict=False):
        calls = [p.tool_call_id for p in before.parts if isinstance(p, ToolCallPart)] if before else []
        returns = [p for p in message.parts if isinstance(p, ToolReturnPart)]
        if [p.tool_call_id for p in returns] != calls[: len(returns)] or len(returns) != len(calls):
            elsewhere += 1
        found |= {p.tool_call_id: p.content for p in returns if p.tool_call_id in calls and p.content != NO_RESULT}
    return found, elsewhere


def stored_messages(code_puppy_home: Path, session_id: str) -> list[ModelMessage]:
    with SqliteConversationStore(code_puppy_home / "sessions.db", readonly=True) as store:
        conversation = asyncio.run(store.load(session_id))
        assert conversation is not None
        return list(conversation.messages)


def test_every_result_of_real_transcripts_is_paired_with_its_call_in_order(
    project: Path, tmp_path: Path, code_puppy_home: Path
) -> None:
    folder = tmp_path / "in"
    shutil.copytree(FIXTURES, folder, ignore=shutil.ignore_patterns("*.md", "*agent-*"))

    done = run_cli("sessions", "import", str(folder), "--output-format", "json", cwd=project, timeout=120)

    assert done.returncode == 0, done.stderr
    reports = {Path(file["file"]).name: file for file in json.loads(done.stdout)["files"]}
    assert sorted(reports) == sorted(PAIRED)
    for name, count in PAIRED.items():
        messages = stored_messages(code_puppy_home, reports[name]["session_id"])
        found, elsewhere = paired(messages)
        assert (len(found), elsewhere) == (count, 0), name
        assert sorted(found) == sorted(source_results(folder / name)), name
        assert all(isinstance(message, ModelRequest | ModelResponse) for message in messages)


def test_a_transcript_imported_while_a_call_was_open_is_completed_by_a_re_import(
    project: Path, tmp_path: Path, code_puppy_home: Path
) -> None:
    lines = (FIXTURES / "claude-2.1.7-incremental.jsonl").read_text().splitlines(keepends=True)
    transcript = tmp_path / "e9fb405b-169f-40eb-9396-7e75076f045d.jsonl"
    transcript.write_text("".join(lines[:25]))  # Claude Code was running a Bash call
    first = run_cli("sessions", "import", str(transcript), "--output-format", "json", cwd=project)
    [report] = json.loads(first.stdout)["files"]
    before = stored_messages(code_puppy_home, report["session_id"])
    [stub] = before[-1].parts
    assert isinstance(stub, ToolReturnPart)
    assert stub == ToolReturnPart("Bash", NO_RESULT, "toolu_bdrk_01NNGBKLENmr7j3TfUKZW7rz", timestamp=stub.timestamp)
    transcript.write_text("".join(lines))  # and went on

    grown = run_cli("sessions", "import", str(transcript), cwd=project)
    again = run_cli("sessions", "import", str(transcript), "--output-format", "json", cwd=project)

    assert grown.returncode == 0, grown.stderr
    assert f"updated (claude-code) as session {report['session_id']} " in grown.stdout
    assert "(7 new) (1 results added to calls stored without one)" in grown.stdout
    assert json.loads(again.stdout)["files"][0]["status"] == "already imported"
    after = stored_messages(code_puppy_home, report["session_id"])
    assert after[: len(before) - 1] == before[:-1]
    found, elsewhere = paired(after)
    assert (sorted(found), elsewhere) == (sorted(source_results(transcript)), 0)
    assert after == read_transcript(transcript).messages


def test_an_imported_session_is_found_by_its_id_in_claude_code_after_our_own_ids(
    project: Path, tmp_path: Path, code_puppy_home: Path
) -> None:
    transcript = Path(shutil.copy(FIXTURES / "claude-1.0.98-1af7fc5e.jsonl", tmp_path / "t.jsonl"))
    [report] = json.loads(
        run_cli("sessions", "import", str(transcript), "--output-format", "json", cwd=project).stdout
    )["files"]

    by_source = run_cli("sessions", "show", "1af7fc5e", cwd=project)
    by_full_source = run_cli("sessions", "export", "1af7fc5e-8455-4414-9ccd-011d40f70b2a", cwd=project)
    ours = run_cli("sessions", "show", report["session_id"][:8], cwd=project)

    assert by_source.returncode == 0, by_source.stderr
    assert by_source.stdout == ours.stdout
    assert json.loads(by_full_source.stdout)["session"]["id"] == report["session_id"]
    assert "\n› /init\n" in by_source.stdout
    assert by_source.stdout.splitlines()[1] == "imported from Claude Code session 1af7fc5e-8455-4414-9ccd-011d40f70b2a"
    assert " requests · " not in by_source.stdout  # what Claude Code spent on it is unknown here, not $0


def test_prompts_are_what_the_user_typed_never_doubled_nor_local_commands() -> None:
    def prompts(name: str) -> list[str]:
        messages = read_transcript(FIXTURES / name).messages
        return [p.content for m in messages for p in m.parts if isinstance(p, UserPromptPart)]  # type: ignore[misc]

    codex_events_only = prompts("codex-0.128-019e1695.jsonl")  # Codex 0.128 wrote them only as user_message events
    codex_both = prompts("codex-0.125-019e1625.jsonl")  # 0.125 as a message item and an event
    commands = prompts("claude-1.0.98-1af7fc5e.jsonl")
    cleared = read_transcript(FIXTURES / "claude-2.0.76-196820da.jsonl")

    assert [text[:40] for text in codex_events_only] == [
        "\n# Files mentioned by the user:\n\n## Samp",
        "there is a need for nikita to draft demo",
        "use app tools to go to Analytics and Pro",
    ]
    assert codex_both == ["show tools", "let's update the defailt context compart to 90 in env var"]
    assert commands[0] == "/init"
    assert commands[1].startswith("Please analyze this codebase and create a CLAUDE.md")  # what /init expanded to
    assert not [text for text in commands + codex_both if text.lstrip().startswith(("<command-", "<local-command"))]
    assert (cleared.skipped["local command"], cleared.skipped["local command output"]) == (1, 1)  # /clear


def test_parallel_calls_are_paired_whatever_order_their_results_come_in(tmp_path: Path) -> None:
    def claude(kind: str, blocks: list[dict[str, Any]]) -> dict[str, Any]:
        return {"type": kind, "sessionId": "s", "message": {"id": "msg_1", "role": kind, "content": blocks}}

    def call(call_id: str) -> dict[str, Any]:
        return {"type": "tool_use", "id": call_id, "name": "Read", "input": {}}

    def result(call_id: str) -> dict[str, Any]:
        return {"type": "tool_result", "tool_use_id": call_id, "content": f"r{call_id}"}

    def codex(payload: dict[str, Any]) -> dict[str, Any]:
        return {"type": "response_item", "payload": payload}

    interleaved = read_transcript(
        jsonl(
            tmp_path / "c.jsonl",
            claude("user", [{"type": "text", "text": "read both"}]),
            claude("assistant", [{"type": "text", "text": "Reading."}]),
            claude("assistant", [call("a")]),
            claude("user", [result("a")]),
            claude("assistant", [call("b")]),
            claude("user", [result("b")]),
        )
    )
    reversed_outputs = read_transcript(
        jsonl(
            tmp_path / "x.jsonl",
            {"type": "session_meta", "payload": {"id": "x"}},
            codex({"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "a"}),
            codex({"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin", "call_id": "b"}),
            codex({"type": "local_shell_call", "call_id": "c", "action": {"type": "exec", "command": ["ls"]}}),
            codex({"type": "custom_tool_call_output", "call_id": "b", "output": "rb"}),
            codex({"type": "local_shell_call_output", "call_id": "c", "output": "rc"}),
            codex({"type": "function_call_output", "call_id": "a", "output": "ra"}),
        )
    )

    [_, response, request] = interleaved.messages
    assert response.parts == [TextPart("Reading."), ToolCallPart("Read", {}, "a"), ToolCallPart("Read", {}, "b")]
    assert [(type(p), p.tool_call_id, p.content) for p in request.parts if isinstance(p, ToolReturnPart)] == [
        (ToolReturnPart, "a", "ra"),
        (ToolReturnPart, "b", "rb"),
    ]
    assert len(request.parts) == 2
    [response, request] = reversed_outputs.messages
    assert [p.tool_call_id for p in response.parts if isinstance(p, ToolCallPart)] == ["a", "b", "c"]
    assert [(p.tool_call_id, p.content) for p in request.parts if isinstance(p, ToolReturnPart)] == [
        ("a", "ra"),
        ("b", "rb"),
        ("c", "rc"),
    ]


def test_a_sub_agent_file_is_skipped_saying_whose_it_is_and_a_non_transcript_is_one_line(
    project: Path, tmp_path: Path
) -> None:
    agent = FIXTURES / "claude-2.0.64-agent-36541525.jsonl"
    notes = tmp_path / "notes.jsonl"
    notes.write_text("".join(f"line {n}, not JSON\n" for n in range(5)))

    sub_agent = run_cli("sessions", "import", str(agent), cwd=project)
    not_one = run_cli("sessions", "import", str(notes), cwd=project)

    assert (sub_agent.returncode, sub_agent.stderr) == (0, "")
    assert sub_agent.stdout == (
        f"{agent}: skipped: a Claude Code sub-agent's transcript, of session 4c2ddfdc-b619-4525-8d03-1950fb1b0257: "
        "what the sub-agent found is in that session, as the result of the Task call that started it\n"
    )
    assert (not_one.returncode, not_one.stderr) == (1, "")
    assert not_one.stdout == f"{notes}: not imported: neither a Claude Code transcript nor a Codex rollout\n"


def test_a_record_without_a_type_is_named_so(tmp_path: Path) -> None:
    path = jsonl(
        tmp_path / "t.jsonl",
        {"type": "user", "sessionId": "s", "message": {"role": "user", "content": "hi"}},
        {"leafUuid": "u1"},
    )

    assert read_transcript(path).skipped == {"record without a type": 1}


def test_a_line_nested_too_deep_is_one_problem_and_the_rest_is_read(tmp_path: Path) -> None:
    """Issue 25 review: a line of 100,000 nested objects ended the whole import with an internal RecursionError."""
    path = tmp_path / "deep.jsonl"
    path.write_text(
        '{"x":' * 100_000 + "\n" + json.dumps({"type": "user", "sessionId": "s", "message": {"content": "hi"}}) + "\n"
    )
    transcript = read_transcript(path)
    assert [problem.split(": not valid JSON")[0] for problem in transcript.problems] == [f"{path}:1"]
    assert transcript.format == "claude-code"


def test_a_session_an_older_import_stored_without_results_gets_them_from_a_re_import(
    project: Path, tmp_path: Path, code_puppy_home: Path
) -> None:
    from pydantic_ai import Conversation

    from code_puppy.sessions.importing import session_id_for
    from code_puppy.sessions.session import Session

    transcript = Path(shutil.copy(FIXTURES / "claude-1.0.17-ba79134d.jsonl", tmp_path / "t.jsonl"))
    read = read_transcript(transcript).messages
    # What the reader before this fix stored: a stub before each answer of parallel calls, the results left out.
    older: list[ModelMessage] = []
    for message in read:
        returns = [p for p in message.parts if isinstance(p, ToolReturnPart)]
        if isinstance(message, ModelRequest) and len(returns) > 1:
            stubs = [
                ToolReturnPart(p.tool_name, NO_RESULT, p.tool_call_id, timestamp=p.timestamp) for p in returns[:-1]
            ]
            older[-1:-1] = [ModelRequest(parts=list(stubs))]
            older.append(ModelRequest(parts=[returns[-1], *[p for p in message.parts if p not in returns]]))
        else:
            older.append(message)
    session_id = session_id_for(read_transcript(transcript))
    with SqliteConversationStore(code_puppy_home / "sessions.db") as store:
        store.sessions.create(project, session_id=session_id)
        asyncio.run(Session(store, Conversation(conversation_id=session_id)).set_message_history(older))

    done = run_cli("sessions", "import", str(transcript), cwd=project)

    assert done.returncode == 0, done.stderr
    assert "updated (claude-code)" in done.stdout and "(12 results added to calls stored without one)" in done.stdout
    assert stored_messages(code_puppy_home, session_id) == read


def test_a_real_rollout_resumed_by_its_codex_id_sends_every_result_right_after_its_call(
    project: Path, tmp_path: Path, server: FakeLLMServer, code_puppy_home: Path
) -> None:
    rollout = Path(shutil.copy(FIXTURES / "codex-0.128-019e1695.jsonl", tmp_path / "rollout.jsonl"))
    assert run_cli("sessions", "import", str(rollout), cwd=project).returncode == 0
    server.script(text("Done."))

    resumed = run_cli("-r", "019e1695", "-p", "go on", cwd=project)

    assert resumed.returncode == 0, resumed.stderr
    sent = sent_history(server)
    answered: list[str] = []
    for at, message in enumerate(sent):
        if message.get("tool_calls"):
            calls = [call["id"] for call in message["tool_calls"]]
            following = sent[at + 1 : at + 1 + len(calls)]
            assert [m["role"] for m in following] == ["tool"] * len(calls)
            assert [m["tool_call_id"] for m in following] == calls
            assert not [m for m in following if NO_RESULT in str(m["content"])]
            answered += calls
    assert sorted(answered) == sorted(source_results(rollout))
    assert sent[-1] == {"role": "user", "content": "go on"}
