"""`code-puppy acp` end to end: the installed console script as a subprocess, driven over stdio by the SDK's own client
side (`acp.spawn_agent_process`), with the fake LLM server on 127.0.0.1 as the model."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import acp
import pytest
from acp import RequestError
from acp.interfaces import Agent
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AllowedOutcome,
    AvailableCommandsUpdate,
    ClientCapabilities,
    CurrentModeUpdate,
    DeniedOutcome,
    FileEditToolCallContent,
    FileSystemCapabilities,
    McpServerStdio,
    PermissionOption,
    ReadTextFileResponse,
    RequestPermissionResponse,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UserMessageChunk,
    WriteTextFileResponse,
)

from tests.conftest import CODE_PUPPY, run_cli
from tests.fake_llm import FakeLLMServer, call, hang, text, tool_calls

ECHO_SERVER = Path(__file__).parent / "mcp_servers" / "echo_server.py"


class EditorClient:
    """An editor: records every update, answers permission questions from a script (an option id, "cancelled" once the
    turn is cancelled, "dismissed": cancelled at once, or "method-not-found": JSON-RPC error -32601)."""

    def __init__(self, *answers: str, buffers: dict[str, str] | None = None) -> None:
        self.updates: list[Any] = []
        self.questions: list[tuple[ToolCallUpdate, list[PermissionOption]]] = []
        self.answers = list(answers)
        self.asked = asyncio.Event()
        self.buffers = dict(buffers or {})
        """The editor's open buffers, by absolute path; what the agent writes lands here, not on disk."""
        self.reads: list[str] = []
        self.writes: list[tuple[str, str]] = []

    async def read_text_file(self, session_id: str, path: str, **kwargs: Any) -> ReadTextFileResponse:
        self.reads.append(path)
        content = self.buffers[path] if path in self.buffers else Path(path).read_text()
        return ReadTextFileResponse(content=content)

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> WriteTextFileResponse:
        self.writes.append((path, content))
        self.buffers[path] = content
        return WriteTextFileResponse()

    def on_connect(self, conn: Agent) -> None:
        pass

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.questions.append((tool_call, options))
        self.asked.set()
        answer = self.answers.pop(0)
        if answer == "cancelled":
            await asyncio.sleep(30)  # the editor waits for the user; a cancel of the turn ends the question
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        if answer == "dismissed":  # the user closed the question: "cancelled" at once, without `session/cancel`
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        if answer == "method-not-found":  # a client without a permission method, as the SDK's example client
            raise RequestError.method_not_found("session/request_permission")
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=answer))

    def messages(self) -> str:
        return "".join(u.content.text for u in self.updates if isinstance(u, AgentMessageChunk))

    def shape(self) -> list[tuple[str, ...]]:
        """The updates in order, runs of message chunks folded into one entry."""
        shape: list[tuple[str, ...]] = []
        for update in self.updates:
            if isinstance(update, ToolCallStart):
                shape.append(("tool_call", update.tool_call_id, update.kind or "", update.status or ""))
            elif isinstance(update, ToolCallProgress):
                shape.append(("tool_call_update", update.tool_call_id, update.status or ""))
            elif isinstance(update, AgentMessageChunk):
                if not shape or shape[-1][0] != "agent_message_chunk":
                    shape.append(("agent_message_chunk",))
            elif isinstance(update, UserMessageChunk):
                shape.append(("user_message_chunk", update.content.text))
        return shape


@asynccontextmanager
async def acp_agent(
    project: Path,
    client: EditorClient,
    *args: str,
    stderr: Path | None = None,
    capabilities: ClientCapabilities | None = None,
) -> AsyncIterator[tuple[Any, asyncio.subprocess.Process]]:
    """`code-puppy acp ARGS` in `project`, initialized by the SDK's client (with `capabilities`); stderr to a file (a
    pipe nobody reads could fill up)."""
    stderr_path = stderr or project.parent / "acp-stderr.log"
    with stderr_path.open("wb") as err:
        async with acp.spawn_agent_process(
            client,
            str(CODE_PUPPY),
            "acp",
            *args,
            cwd=project,
            env=dict(os.environ),
            transport_kwargs={"stderr": err, "shutdown_timeout": 10},
        ) as (conn, process):
            await asyncio.wait_for(conn.initialize(protocol_version=1, client_capabilities=capabilities), 30)
            yield conn, process
    assert "Traceback" not in stderr_path.read_text()


def user_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def tool_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


async def requests_arrived(server: FakeLLMServer, count: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while len(server.requests) < count:
        assert time.monotonic() < deadline, f"{count} requests never arrived"
        await asyncio.sleep(0.02)


async def test_initialize_advertises_the_capabilities(project: Path) -> None:
    async with acp.spawn_agent_process(EditorClient(), str(CODE_PUPPY), "acp", cwd=project, env=dict(os.environ)) as (
        conn,
        _,
    ):
        response = await asyncio.wait_for(conn.initialize(protocol_version=1), 30)
    capabilities = response.agent_capabilities
    assert response.protocol_version == 1
    assert (response.agent_info.name, response.agent_info.version) == ("code-puppy", run_version())
    assert capabilities.load_session is True
    prompts = capabilities.prompt_capabilities
    assert (prompts.embedded_context, prompts.image, prompts.audio) == (True, True, True)
    assert capabilities.mcp_capabilities.http is True
    assert capabilities.session_capabilities.list is not None
    sessions = capabilities.session_capabilities
    assert None not in (sessions.fork, sessions.resume, sessions.close)
    assert response.auth_methods == []
    assert response.field_meta == {
        "code_puppy": {"extensions": {"steer": "_code_puppy/steer", "queue": "_code_puppy/queue"}}
    }


def run_version() -> str:
    from code_puppy import __version__

    return __version__


async def test_a_prompt_streams_tool_calls_then_the_answer_in_a_terminal_session(
    server: FakeLLMServer, project: Path
) -> None:
    server.script(
        tool_calls(call("read_file", {"path": "README.md"}, id="read-1")),
        tool_calls(call("grep", {"pattern": "demo"}, id="grep-1")),
        text("The README says demo project."),
        text("Still a demo."),
    )
    client = EditorClient()  # it advertises no fs capability: the tools use the disk
    async with acp_agent(project, client) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("what is this?")])
    assert response.stop_reason == "end_turn"
    assert client.shape() == [
        ("tool_call", "read-1", "read", "pending"),
        ("tool_call_update", "read-1", "completed"),
        ("tool_call", "grep-1", "search", "pending"),
        ("tool_call_update", "grep-1", "completed"),
        ("agent_message_chunk",),
    ]
    start = next(update for update in client.updates if isinstance(update, ToolCallStart))
    assert (start.title, start.raw_input) == ("read_file(README.md)", {"path": "README.md"})
    assert [location.path for location in start.locations] == [str((project / "README.md").resolve())]
    assert client.messages() == "The README says demo project."
    assert "# demo project" in tool_messages(server.requests[1].body)[0]
    # The session is the terminal's: listed, and continued with -r.
    listed = run_cli("sessions", "list", cwd=project)
    assert session.session_id[:8] in listed.stdout
    continued = run_cli("-r", session.session_id, "-p", "and now?", cwd=project)
    assert (continued.returncode, continued.stdout) == (0, "Still a demo.\n"), continued.stderr
    assert user_messages(server.requests[3].body) == ["what is this?", "and now?"]


EDITOR_FS = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True, write_text_file=True))


async def test_the_file_tools_read_and_write_through_an_editor_that_offers_it(
    server: FakeLLMServer, project: Path
) -> None:
    readme = str((project / "README.md").resolve())
    notes = str((project / "notes.txt").resolve())
    server.script(
        tool_calls(call("read_file", {"path": "README.md"})),
        tool_calls(call("edit_file", {"path": "README.md", "old_text": "unsaved", "new_text": "edited"})),
        tool_calls(call("write_file", {"path": "notes.txt", "content": "new\n"})),
        text("Done."),
    )
    client = EditorClient("allow-once", "allow-once", buffers={readme: "# unsaved buffer\n"})
    async with acp_agent(project, client, capabilities=EDITOR_FS) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("edit it")])
    assert response.stop_reason == "end_turn"
    # The model read the editor's unsaved buffer, not the disk.
    [read, edited, written] = tool_messages(server.requests[3].body)
    assert "# unsaved buffer" in read and "demo" not in read
    assert (edited.startswith("Edited README.md"), written.startswith("Wrote 4 chars")) == (True, True)
    # The changes went to the editor, computed from its buffer; the disk is the editor's to save.
    assert client.writes == [(readme, "# edited buffer\n"), (notes, "new\n")]
    assert (project / "README.md").read_text() == "# demo project\n"
    assert not (project / "notes.txt").exists()
    # The diffs the editor is shown, asked and done, are of its buffer.
    expected = [(readme, "# unsaved buffer\n", "# edited buffer\n"), (notes, None, "new\n")]
    asked = [content for question, _ in client.questions for content in question.content or []]
    done = [
        content
        for update in client.updates
        if isinstance(update, ToolCallProgress) and update.status == "completed"
        for content in update.content or []
        if isinstance(content, FileEditToolCallContent)
    ]
    for diffs in (asked, done):
        assert [(d.path, d.old_text, d.new_text) for d in diffs if isinstance(d, FileEditToolCallContent)] == expected


async def test_a_client_without_fs_capabilities_gets_the_disk(server: FakeLLMServer, project: Path) -> None:
    readme = str((project / "README.md").resolve())
    server.script(
        tool_calls(call("read_file", {"path": "README.md"})),
        tool_calls(call("write_file", {"path": "notes.txt", "content": "new\n"})),
        text("Done."),
    )
    client = EditorClient(buffers={readme: "# unsaved buffer\n"})  # never asked: it did not advertise fs
    async with acp_agent(project, client, "--permission-mode", "accept-edits") as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("look")])
    assert response.stop_reason == "end_turn"
    assert "# demo project" in tool_messages(server.requests[1].body)[0]
    assert (project / "notes.txt").read_text() == "new\n"
    assert (client.reads, client.writes) == ([], [])


async def test_the_models_plan_is_sent_as_plan_updates(server: FakeLLMServer, project: Path) -> None:
    steps = [
        {"id": "read", "content": "Read the code"},
        {"id": "fix", "content": "Fix the bug", "status": "in_progress", "active_form": "Fixing the bug"},
    ]
    server.script(
        tool_calls(call("write_plan", {"items": steps}, id="plan-1")),
        tool_calls(call("update_task_statuses", {"updates": [{"task_id": "read", "status": "completed"}]}, id="p-2")),
        text("Done."),
    )
    client = EditorClient()
    async with acp_agent(project, client) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("fix it")])
    assert response.stop_reason == "end_turn"
    plans = [
        [(entry.content, entry.status) for entry in update.entries]
        for update in client.updates
        if isinstance(update, AgentPlanUpdate)
    ]
    # Once per call that changed it, whole, after the call's own update.
    assert plans == [
        [("Read the code", "pending"), ("Fix the bug", "in_progress")],
        [("Read the code", "completed"), ("Fix the bug", "in_progress")],
    ]
    ended = [i for i, update in enumerate(client.updates) if isinstance(update, ToolCallProgress)]
    planned = [i for i, update in enumerate(client.updates) if isinstance(update, AgentPlanUpdate)]
    assert all(end < plan for end, plan in zip(ended, planned, strict=True))


async def test_the_models_finish_reason_gives_max_tokens_and_refusal(server: FakeLLMServer, project: Path) -> None:
    server.script(
        text("A long answer cut", stop="length"),
        text("", stop="length"),
        text("I can", stop="content_filter"),
        text("", stop="content_filter"),
        text("Fine."),
    )
    client = EditorClient()
    async with acp_agent(project, client) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        reasons = [
            (await conn.prompt(session_id=session.session_id, prompt=[acp.text_block(f"ask {n}")])).stop_reason
            for n in range(5)
        ]
    assert reasons == ["max_tokens", "max_tokens", "refusal", "refusal", "end_turn"]
    assert client.messages() == "A long answer cutI canFine."
    assert len(server.requests) == 5


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake image").decode()
WAV = base64.b64encode(b"RIFF fake audio").decode()


async def test_images_and_audio_in_a_prompt_reach_a_model_that_takes_them_and_are_replayed(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    # pydantic-ai's OpenAI profile takes audio only on models named for it.
    with (code_puppy_home / "config.toml").open("a") as config:
        config.write(f'[models.listener]\nname = "gpt-4o-audio-preview"\nbase_url = "{server.base_url}"\n')
    server.script(text("A picture and a sound."))
    blocks = [acp.text_block("what is this?"), acp.image_block(PNG, "image/png"), acp.audio_block(WAV, "audio/wav")]
    async with acp_agent(project, EditorClient()) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        with pytest.raises(RequestError) as deaf:
            await conn.prompt(session_id=session.session_id, prompt=blocks)
        with pytest.raises(RequestError) as garbled:
            await conn.prompt(session_id=session.session_id, prompt=[acp.image_block("not base64!", "image/png")])
        await conn.set_config_option(config_id="model", session_id=session.session_id, value="listener")
        response = await conn.prompt(session_id=session.session_id, prompt=blocks)
    assert (deaf.value.code, str(deaf.value)) == (-32602, "the model fake-model does not take audio")
    assert garbled.value.code == -32602
    assert response.stop_reason == "end_turn"
    [content] = user_messages(server.requests[0].body)
    assert content == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}},
    ]
    client = EditorClient()
    async with acp_agent(project, client) as (conn, _):
        await conn.load_session(cwd=str(project), session_id=session.session_id, mcp_servers=[])
    replayed = [u.content for u in client.updates if isinstance(u, UserMessageChunk)]
    assert [(block.type, getattr(block, "text", None) or block.data) for block in replayed] == [
        ("text", "what is this?"),
        ("image", PNG),
        ("audio", WAV),
    ]


def test_a_model_that_takes_no_images_refuses_them_by_its_profile() -> None:
    from pydantic_ai.messages import BinaryContent
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.profiles import ModelProfile

    from code_puppy.acp.prompts import refused_attachment

    image = BinaryContent(data=b"png", media_type="image/png")
    audio = BinaryContent(data=b"wav", media_type="audio/wav")
    blind = TestModel(profile=ModelProfile(supports_image_input=False))
    deaf = TestModel(profile=ModelProfile(supports_audio_file_input=False))
    assert refused_attachment(blind, [image]) == "the model test does not take images"
    assert refused_attachment(blind, [audio]) is None
    assert refused_attachment(deaf, [audio]) == "the model test does not take audio"
    assert refused_attachment(TestModel(), [image, audio]) is None


async def test_a_rejected_edit_is_not_written_and_the_model_is_told(server: FakeLLMServer, project: Path) -> None:
    server.script(tool_calls(call("write_file", {"path": "new.txt", "content": "hi\n"}, id="w-1")), text("Not done."))
    client = EditorClient("reject-once")
    async with acp_agent(project, client) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("write it")])
    assert response.stop_reason == "end_turn"
    assert not (project / "new.txt").exists()
    [(question, options)] = client.questions
    assert [option.kind for option in options] == ["allow_once", "allow_always", "reject_once"]
    assert question.tool_call_id == "w-1" and question.kind == "edit"
    [diff] = question.content or []
    assert isinstance(diff, FileEditToolCallContent)
    assert (diff.path, diff.old_text, diff.new_text) == (str(project / "new.txt"), None, "hi\n")
    assert ("tool_call_update", "w-1", "failed") in client.shape()
    assert "denied" in tool_messages(server.requests[1].body)[0]


async def test_a_question_answered_with_an_error_denies_the_call_and_the_turn_ends_normally(
    server: FakeLLMServer, project: Path
) -> None:
    """Issue 25: a client answering `session/request_permission` with "Method not found" failed the whole prompt."""
    server.script(tool_calls(call("write_file", {"path": "new.txt", "content": "hi\n"}, id="w-1")), text("Not done."))
    client = EditorClient("method-not-found")
    stderr = project.parent / "acp-stderr.log"
    async with acp_agent(project, client, stderr=stderr) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("write it")])
    assert response.stop_reason == "end_turn"
    assert not (project / "new.txt").exists()
    assert len(client.questions) == 1
    assert ("tool_call_update", "w-1", "failed") in client.shape()
    assert tool_messages(server.requests[1].body) == ["The user denied this call (write file new.txt)."]
    assert client.messages() == "Not done."
    assert (
        "code-puppy acp: the client answered session/request_permission with an error (Method not found): "
        "write_file denied"
    ) in stderr.read_text().splitlines()


async def test_a_permission_question_spells_out_the_control_characters_of_what_the_model_sent(
    server: FakeLLMServer, project: Path
) -> None:
    """Issue 23: an escape sequence in a command could make the question show `ls -la` for an `rm -rf`."""
    repaint = "\x1b[2K\x1b[1G"  # erase the line, back to its first column
    hidden = "\u202e\u200b"  # a bidi override and a zero-width space
    command = f"rm -rf ./data #{repaint}ls -la"
    server.script(
        tool_calls(call("shell", {"command": command}, id="s-1")),
        tool_calls(call("write_file", {"path": f"notes{hidden}.txt", "content": f"x = 1{repaint}\r\x9b\n"}, id="w-1")),
        text("Asked."),
    )
    client = EditorClient("reject-once", "reject-once")
    async with acp_agent(project, client) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("clean up")])
    assert response.stop_reason == "end_turn"
    [(shell, _), (write, _)] = client.questions
    spelled_command = r"rm -rf ./data #\x1b[2K\x1b[1Gls -la"
    assert (shell.title, shell.raw_input) == (f"shell wants to run `{spelled_command}`", {"command": spelled_command})
    path = str(project / r"notes\u202e\u200b.txt")
    assert write.title == r"write_file wants to write file notes\u202e\u200b.txt"
    assert write.raw_input == {"path": r"notes\u202e\u200b.txt", "content": r"x = 1\x1b[2K\x1b[1G\r\x9b" + "\n"}
    assert write.locations == [ToolCallLocation(path=path)]
    [diff] = write.content or []
    assert isinstance(diff, FileEditToolCallContent)
    assert (diff.path, diff.old_text, diff.new_text) == (path, None, r"x = 1\x1b[2K\x1b[1G\r\x9b" + "\n")
    # The tool call's own title, sent before the question, is spelled too.
    [started] = [u for u in client.updates if isinstance(u, ToolCallStart) and u.tool_call_id == "s-1"]
    assert started.title == f"shell({spelled_command})"
    assert list(project.iterdir()) == [project / "README.md"]


async def test_allow_always_asks_once_for_the_session(server: FakeLLMServer, project: Path) -> None:
    server.script(
        tool_calls(call("write_file", {"path": "a.txt", "content": "a\n"})),
        tool_calls(call("write_file", {"path": "b.txt", "content": "b\n"})),
        text("Both written."),
    )
    client = EditorClient("allow-always")
    async with acp_agent(project, client) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("write both")])
    assert response.stop_reason == "end_turn"
    assert len(client.questions) == 1
    assert ((project / "a.txt").read_text(), (project / "b.txt").read_text()) == ("a\n", "b\n")
    edits = [u for u in client.updates if isinstance(u, ToolCallProgress) and u.status == "completed"]
    assert [type(content) for update in edits for content in update.content or []] == [FileEditToolCallContent] * 2


async def test_cancel_while_a_question_is_open_answers_cancelled(server: FakeLLMServer, project: Path) -> None:
    server.script(tool_calls(call("write_file", {"path": "new.txt", "content": "hi\n"})), text("never"))
    client = EditorClient("cancelled")
    async with acp_agent(project, client) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        prompt = asyncio.create_task(conn.prompt(session_id=session.session_id, prompt=[acp.text_block("write")]))
        await asyncio.wait_for(client.asked.wait(), 30)
        await conn.cancel(session_id=session.session_id)
        response = await asyncio.wait_for(prompt, 30)
    assert response.stop_reason == "cancelled"
    assert not (project / "new.txt").exists()
    assert len(server.requests) == 1


async def test_a_question_answered_cancelled_cancels_the_turn_without_session_cancel(
    server: FakeLLMServer, project: Path
) -> None:
    server.script(tool_calls(call("write_file", {"path": "new.txt", "content": "hi\n"})), text("never"))
    client = EditorClient("dismissed")
    async with acp_agent(project, client) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("write")])
    assert response.stop_reason == "cancelled"
    assert len(client.questions) == 1
    assert not (project / "new.txt").exists()
    assert len(server.requests) == 1  # the denial never went back to the model


async def test_text_queued_for_a_cancelled_turn_never_runs(server: FakeLLMServer, project: Path) -> None:
    server.script(text("too late", delay=30), text("Fresh."))
    client = EditorClient()
    async with acp_agent(project, client) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        sid = session.session_id
        prompt = asyncio.create_task(conn.prompt(session_id=sid, prompt=[acp.text_block("start")]))
        await requests_arrived(server, 1)
        queued = await conn.ext_method("code_puppy/queue", {"sessionId": sid, "text": "then docs"})
        await conn.cancel(session_id=sid)
        cancelled = await asyncio.wait_for(prompt, 30)
        fresh = await conn.prompt(session_id=sid, prompt=[acp.text_block("next")])
    assert (queued, cancelled.stop_reason, fresh.stop_reason) == ({"delivered": True}, "cancelled", "end_turn")
    assert [user_messages(request.body) for request in server.requests] == [["start"], ["start", "next"]]
    assert ("user_message_chunk", "then docs") not in client.shape()


async def test_cancel_mid_turn_keeps_what_the_turn_finished(server: FakeLLMServer, project: Path) -> None:
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("too late", delay=30))
    client = EditorClient()
    async with acp_agent(project, client) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        prompt = asyncio.create_task(conn.prompt(session_id=session.session_id, prompt=[acp.text_block("look")]))
        await requests_arrived(server, 2)
        await conn.cancel(session_id=session.session_id)
        response = await asyncio.wait_for(prompt, 30)
    assert response.stop_reason == "cancelled"
    exported = json.loads(run_cli("sessions", "export", session.session_id, cwd=project).stdout)
    saved = json.dumps(exported["messages"])
    assert "look" in saved and "# demo project" in saved


async def test_load_replays_a_session_started_with_p(server: FakeLLMServer, project: Path) -> None:
    server.script(tool_calls(call("read_file", {"path": "README.md"}, id="r-1")), text("A demo."))
    started = run_cli("-p", "what is it?", "--output-format", "json", cwd=project)
    session_id = json.loads(started.stdout)["session_id"]
    client = EditorClient()
    async with acp_agent(project, client) as (conn, _):
        await conn.load_session(cwd=str(project), session_id=session_id, mcp_servers=[])
        replayed = client.shape()
        listed = await conn.list_sessions(cwd=str(project))
    assert replayed == [
        ("user_message_chunk", "what is it?"),
        ("tool_call", "r-1", "read", "pending"),
        ("tool_call_update", "r-1", "completed"),
        ("agent_message_chunk",),
    ]
    assert client.messages() == "A demo."
    assert [(info.session_id, info.title) for info in listed.sessions] == [(session_id, "what is it?")]


async def test_fork_resume_and_close_sessions(server: FakeLLMServer, project: Path) -> None:
    server.script(text("One."), text("Forked."), text("Original."))
    client = EditorClient()
    async with acp_agent(project, client) as (conn, _):
        first = await conn.new_session(cwd=str(project), mcp_servers=[])
        await conn.prompt(session_id=first.session_id, prompt=[acp.text_block("first")])
        fork = await conn.fork_session(session_id=first.session_id, cwd=str(project), mcp_servers=[])
        await conn.prompt(session_id=fork.session_id, prompt=[acp.text_block("on the fork")])
        await conn.close_session(session_id=fork.session_id)
        with pytest.raises(RequestError) as closed:
            await conn.prompt(session_id=fork.session_id, prompt=[acp.text_block("gone")])
        shown = len(client.updates)
        resumed = await conn.resume_session(session_id=first.session_id, cwd=str(project), mcp_servers=[])
        await conn.prompt(session_id=first.session_id, prompt=[acp.text_block("on the original")])
        with pytest.raises(RequestError) as no_auth:
            await conn.authenticate(method_id="api-key")
        with pytest.raises(RequestError) as unknown:
            await conn.fork_session(session_id="no-such-session", cwd=str(project), mcp_servers=[])
    assert fork.session_id != first.session_id
    assert fork.modes is not None and resumed.modes is not None
    assert closed.value.code == no_auth.value.code == unknown.value.code == -32602
    # The fork starts from the original's history; the original goes on without the fork's turn.
    assert user_messages(server.requests[1].body) == ["first", "on the fork"]
    assert user_messages(server.requests[2].body) == ["first", "on the original"]
    # Resuming replays nothing: the first update after it is the commands, then the new turn.
    after = client.updates[shown:]
    assert isinstance(after[0], AvailableCommandsUpdate)
    assert not [u for u in after if isinstance(u, UserMessageChunk)]
    assert "".join(u.content.text for u in after if isinstance(u, AgentMessageChunk)) == "Original."
    # Both are terminal sessions.
    listed = run_cli("sessions", "list", cwd=project).stdout
    assert first.session_id[:8] in listed and fork.session_id[:8] in listed
    exported = json.loads(run_cli("sessions", "export", fork.session_id, cwd=project).stdout)
    assert "on the original" not in json.dumps(exported["messages"])
    assert "on the fork" in json.dumps(exported["messages"])


async def test_read_only_mode_offers_no_edit_tools(server: FakeLLMServer, project: Path) -> None:
    server.script(text("Looked."))
    async with acp_agent(project, EditorClient()) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        assert session.modes.current_mode_id == "ask"
        assert [mode.id for mode in session.modes.available_modes] == [
            "read-only",
            "ask",
            "accept-edits",
            "auto",
            "yolo",
        ]
        await conn.set_session_mode(session_id=session.session_id, mode_id="read-only")
        await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("look")])
        with pytest.raises(RequestError):
            await conn.set_session_mode(session_id=session.session_id, mode_id="reckless")
    offered = sorted(tool["function"]["name"] for tool in server.requests[0].body.get("tools", []))
    assert offered and not {"write_file", "edit_file", "shell", "create_directory"} & set(offered)


async def test_steer_and_queue_reach_a_running_turn(server: FakeLLMServer, project: Path) -> None:
    server.script(text("Draft.", delay=1.5), text("Steered."), text("Queued answer."))
    client = EditorClient()
    async with acp_agent(project, client) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        sid = session.session_id
        idle = await conn.ext_method("code_puppy/steer", {"sessionId": sid, "text": "nobody runs"})
        prompt = asyncio.create_task(conn.prompt(session_id=sid, prompt=[acp.text_block("write it")]))
        await requests_arrived(server, 1)
        steered = await conn.ext_method("code_puppy/steer", {"sessionId": sid, "text": "focus on tests"})
        queued = await conn.ext_method("code_puppy/queue", {"sessionId": sid, "text": "then docs"})
        response = await asyncio.wait_for(prompt, 30)
    assert (idle, steered, queued) == ({"delivered": False}, {"delivered": True}, {"delivered": True})
    assert response.stop_reason == "end_turn"
    assert user_messages(server.requests[1].body) == ["write it", "focus on tests"]
    assert user_messages(server.requests[2].body) == ["write it", "focus on tests", "then docs"]
    assert ("user_message_chunk", "focus on tests") in client.shape()
    assert ("user_message_chunk", "then docs") in client.shape()


async def test_code_puppy_steer_reaches_an_acp_turn(server: FakeLLMServer, project: Path) -> None:
    server.script(text("Draft.", delay=1.5), text("Steered."))
    async with acp_agent(project, EditorClient()) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        prompt = asyncio.create_task(conn.prompt(session_id=session.session_id, prompt=[acp.text_block("go")]))
        await requests_arrived(server, 1)
        steered = await asyncio.to_thread(run_cli, "steer", "from the terminal", cwd=project)
        await asyncio.wait_for(prompt, 30)
    assert steered.returncode == 0, steered.stderr
    assert user_messages(server.requests[1].body) == ["go", "from the terminal"]


async def test_code_puppy_steer_cancel_ends_an_acp_turn_as_session_cancel(server: FakeLLMServer, project: Path) -> None:
    server.script(hang(), text("Next turn."))
    async with acp_agent(project, EditorClient()) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        prompt = asyncio.create_task(conn.prompt(session_id=session.session_id, prompt=[acp.text_block("go")]))
        await requests_arrived(server, 1)
        cancelled = await asyncio.to_thread(run_cli, "steer", "--cancel", cwd=project)
        response = await asyncio.wait_for(prompt, 30)
        after = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("again")])
    assert (cancelled.returncode, cancelled.stderr) == (0, "")
    assert (response.stop_reason, after.stop_reason) == ("cancelled", "end_turn")
    assert user_messages(server.requests[1].body) == ["go", "again"]  # the cancelled prompt was kept


async def test_client_mcp_servers_run_for_the_session_and_stop_with_it(server: FakeLLMServer, project: Path) -> None:
    tag = f"acp-{uuid.uuid4().hex[:8]}"
    server.script(tool_calls(call("echo_echo", {"text": "ping"})), text("Echoed."))
    echo = McpServerStdio(name="echo", command=sys.executable, args=[str(ECHO_SERVER), "--tag", tag], env=[])
    async with acp_agent(project, EditorClient("allow-once")) as (conn, process):
        session = await conn.new_session(cwd=str(project), mcp_servers=[echo])
        response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("echo ping")])
        assert running(tag)
    assert process.returncode == 0
    assert response.stop_reason == "end_turn"
    assert tool_messages(server.requests[1].body) == ["ping"]
    assert (project / "calls.log").read_text() == "echo ping\n"
    assert not running(tag)


def running(tag: str) -> bool:
    return subprocess.run(["pgrep", "-f", tag], capture_output=True).returncode == 0


async def test_bad_requests_get_json_rpc_errors_and_the_agent_goes_on(project: Path, code_puppy_home: Path) -> None:
    async with acp_agent(project, EditorClient()) as (conn, _):
        with pytest.raises(RequestError) as no_model:
            await conn.new_session(cwd=str(project), mcp_servers=[])
        cli = run_cli("-p", "hi", cwd=project)
        # A model from now on (nothing is sent to it): the errors below are about the requests themselves.
        (code_puppy_home / "config.toml").write_text(
            'model = "fake"\n[models.fake]\nname = "fake-model"\nbase_url = "http://127.0.0.1:9/v1"\n'
        )
        with pytest.raises(RequestError) as bad_cwd:
            await conn.new_session(cwd=str(project / "missing"), mcp_servers=[])
        with pytest.raises(RequestError) as unknown:
            await conn.prompt(session_id="no-such-session", prompt=[acp.text_block("hi")])
        with pytest.raises(RequestError) as not_stored:
            await conn.load_session(cwd=str(project), session_id="no-such-session", mcp_servers=[])
        again = await conn.list_sessions(cwd=str(project))
    assert no_model.value.code == -32603
    assert f"code-puppy: error: {no_model.value}\n" == cli.stderr
    assert bad_cwd.value.code == unknown.value.code == not_stored.value.code == -32602
    assert again.sessions == []


class RawClient:
    """`code-puppy acp` spoken to line by line, as a client that writes whatever it likes."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self._lines.put(line) for line in process.stdout or ()], daemon=True).start()

    def send(self, *lines: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("".join(f"{line}\n" for line in lines))
        self.process.stdin.flush()

    def answer(self) -> dict[str, Any]:
        """The next line it writes, which must be a JSON-RPC message."""
        try:
            line = self._lines.get(timeout=30)
        except queue.Empty:
            self.process.kill()
            pytest.fail("no answer from code-puppy acp within 30 s")
        message = json.loads(line)
        assert isinstance(message, dict) and message["jsonrpc"] == "2.0", line
        return message

    def close(self) -> tuple[int, str, list[str]]:
        """Close stdin: its exit status, its stderr and the lines it wrote that were not read."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        returncode = self.process.wait(timeout=30)
        stderr = self.process.stderr.read() if self.process.stderr else ""
        time.sleep(0.1)  # the reader thread takes what was left
        return returncode, stderr, [self._lines.get_nowait() for _ in range(self._lines.qsize())]


@contextmanager
def raw_acp(project: Path) -> Iterator[RawClient]:
    with subprocess.Popen(
        [str(CODE_PUPPY), "acp"],
        cwd=project,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            yield RawClient(process)
        finally:
            process.kill()


def initialize(request_id: int, **meta: Any) -> str:
    params = {"protocolVersion": 1, **({"_meta": meta} if meta else {})}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params})


def test_stdout_carries_protocol_messages_only(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    """Garbage gets an error response and the process goes on; a plugin printing to stdout does not reach it."""
    server.script(text("Hello."))
    (code_puppy_home / "plugins").mkdir()
    (code_puppy_home / "plugins" / "noisy.py").write_text(
        'import code_puppy\nprint("NOISE at import")\n\n'
        "@code_puppy.hookimpl\ndef user_prompt_submit(prompt, session):\n    print('NOISE on submit')\n"
    )
    with raw_acp(project) as client:
        client.send(
            "this is not json",
            initialize(1),
            "[1, 2]",
            json.dumps(
                {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": str(project), "mcpServers": []}}
            ),
        )
        answers = [client.answer() for _ in range(4)]
        session_id = next(answer["result"]["sessionId"] for answer in answers if answer.get("id") == 2)
        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "hi"}]}
        client.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt}))
        while (last := client.answer()).get("id") != 3:
            answers.append(last)
        returncode, stderr, rest = client.close()
    assert (returncode, rest) == (0, [])
    assert last["result"] == {"stopReason": "end_turn"}
    errors = sorted(a["error"]["code"] for a in answers if "error" in a)
    assert errors == [-32700, -32600]
    assert all(a["id"] is None for a in answers if "error" in a)
    assert "NOISE at import" in stderr and "NOISE on submit" in stderr
    assert "Traceback" not in stderr


def test_every_malformed_line_gets_its_json_rpc_error_and_the_agent_goes_on(project: Path) -> None:
    """Issue 23: 1,500 `[` killed the agent (RecursionError); an object without a method got no answer."""

    def nested(depth: int) -> Any:  # `depth` levels of arrays and objects in all
        return [nested(depth - 1)] if depth > 1 else {}

    too_deep = "nested deeper than 128 levels"
    not_a_message = "a request has a method; a response has an id and either a result or an error"
    with raw_acp(project) as client:
        client.send(
            "[" * 1500,
            "[" * 2000,
            json.dumps(nested(129)),
            initialize(1, deep=nested(125)),  # 128 levels with the message, params and _meta: answered
            initialize(2, deep=nested(126)),
            '{"jsonrpc": "2.0", "id": 3}',
            '{"jsonrpc": "2.0", "id": 4, "method": 5}',
            '{"jsonrpc": "2.0", "id": 5, "method": "session/list", "params": "cwd"}',
            '{"jsonrpc": "2.0", "id": [6], "method": "session/list"}',
            '{"jsonrpc": "2.0", "id": [7], "result": {}}',
            '{"jsonrpc": "2.0", "id": 8, "error": "no"}',
            "{}",
            initialize(10, note="[" * 3000),  # brackets in a string nest nothing
        )
        answers = [client.answer() for _ in range(13)]
        returncode, stderr, rest = client.close()
    errors = [(a["id"], a["error"]["code"], a["error"]["data"]["details"]) for a in answers if "error" in a]
    assert errors == [
        (None, -32700, too_deep),
        (None, -32700, too_deep),
        (None, -32700, too_deep),
        (None, -32700, too_deep),
        (None, -32600, not_a_message),
        (4, -32600, "method must be a string"),
        (5, -32600, "params must be an object or an array"),
        (None, -32600, "id must be a string, an integer or null"),
        (None, -32600, "id must be a string, an integer or null"),
        (None, -32600, "error must be an object"),
        (None, -32600, not_a_message),
    ]
    assert sorted((a["id"], a["result"]["agentInfo"]["name"]) for a in answers if "result" in a) == [
        (1, "code-puppy"),
        (10, "code-puppy"),
    ]
    assert (returncode, rest) == (0, [])
    assert "Traceback" not in stderr


async def test_the_command_line_sets_model_mode_allow_list_and_request_limit(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    config = (code_puppy_home / "config.toml").read_text()
    (code_puppy_home / "config.toml").write_text(config.replace('model = "fake"\n', 'model = "other"\n', 1))
    server.script(tool_calls(call("shell", {"command": "ls"})), text("never sent"))
    client = EditorClient()  # no answers: a question would fail the turn
    args = ("-m", "fake", "--permission-mode", "accept-edits", "--allow", "ls", "--max-requests", "1")
    async with acp_agent(project, client, *args) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        response = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("list")])
    assert session.modes.current_mode_id == "accept-edits"
    [model] = session.config_options or []
    assert (model.id, model.current_value) == ("model", "fake")
    assert response.stop_reason == "max_turn_requests"
    assert client.questions == []
    assert ("tool_call_update", "call_0_0", "completed") in client.shape()
    assert len(server.requests) == 1


async def test_no_mcp_and_no_plugins_leave_out_the_configured_ones(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    with (code_puppy_home / "config.toml").open("a") as config:
        config.write(f'[mcp_servers.echo]\ncommand = "{sys.executable}"\nargs = ["{ECHO_SERVER}"]\n')
    (code_puppy_home / "plugins").mkdir()
    (code_puppy_home / "plugins" / "noisy.py").write_text('print("NOISE at import")\n')
    server.script(text("Plain."), text("With them."))
    stderr = project.parent / "stderr.log"
    async with acp_agent(project, EditorClient(), "--no-mcp", "--no-plugins", stderr=stderr) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("hi")])
    assert "NOISE" not in stderr.read_text()
    async with acp_agent(project, EditorClient(), stderr=stderr) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("hi")])
    assert "NOISE at import" in stderr.read_text()
    offered = [{tool["function"]["name"] for tool in request.body.get("tools", [])} for request in server.requests]
    assert ("echo_echo" in offered[0], "echo_echo" in offered[1]) == (False, True)


async def test_slash_commands_are_advertised_and_run_without_the_model(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    (code_puppy_home / "plugins").mkdir()
    (code_puppy_home / "plugins" / "greet.py").write_text(
        "import code_puppy\n\n@code_puppy.hookimpl\ndef register_commands(register):\n"
        "    register('greet', lambda args: f'hello {args}', 'Say hello')\n"
    )
    client = EditorClient()
    async with acp_agent(project, client) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        sid = session.session_id
        greeted = await conn.prompt(session_id=sid, prompt=[acp.text_block("/greet editor")])
        await conn.prompt(session_id=sid, prompt=[acp.text_block("/permissions read-only")])
    [commands] = [u for u in client.updates if isinstance(u, AvailableCommandsUpdate)]
    assert [command.name for command in commands.available_commands] == ["permissions", "model", "greet"]
    assert greeted.stop_reason == "end_turn"
    assert [u.current_mode_id for u in client.updates if isinstance(u, CurrentModeUpdate)] == ["read-only"]
    assert client.messages() == "hello editorpermission mode: read-only"
    assert server.requests == []


async def test_file_commands_are_offered_and_run_as_in_the_chat(server: FakeLLMServer, project: Path) -> None:
    commands = project / ".code-puppy" / "commands"
    commands.mkdir(parents=True)
    (commands / "review.md").write_text(
        "---\ndescription: Review a file\nargument-hint: FILE\nallowed-tools: Read\n---\nReview $1 carefully.\n"
    )
    (commands / "model.md").write_text("Pick a model for $ARGUMENTS\n")
    server.script(text("Reviewed."), text("Hi."))
    client = EditorClient()
    async with acp_agent(project, client) as (conn, _):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        reviewed = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("/review src/app.py")])
        await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("hi")])
    [update] = [u for u in client.updates if isinstance(u, AvailableCommandsUpdate)]
    offered = {command.name: command for command in update.available_commands}
    assert list(offered) == ["permissions", "model", "project:model", "review"]
    review = offered["review"]
    assert (review.description, review.input and review.input.root.hint) == ("Review a file", "FILE")
    assert reviewed.stop_reason == "end_turn"
    assert user_messages(server.requests[0].body) == ["Review src/app.py carefully."]
    # Its allowed-tools narrow its own turn only.
    offered_tools = [{tool["function"]["name"] for tool in request.body["tools"]} for request in server.requests]
    assert "read_file" in offered_tools[0] and "write_file" not in offered_tools[0]
    assert "write_file" in offered_tools[1]


async def test_sigterm_mid_turn_saves_the_turn_and_exits_cleanly(server: FakeLLMServer, project: Path) -> None:
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("too late", delay=30))
    async with acp_agent(project, EditorClient()) as (conn, process):
        session = await conn.new_session(cwd=str(project), mcp_servers=[])
        prompt = asyncio.create_task(conn.prompt(session_id=session.session_id, prompt=[acp.text_block("look")]))
        await requests_arrived(server, 2)
        process.terminate()
        assert await asyncio.wait_for(process.wait(), 30) == 0
        prompt.cancel()
    exported = json.loads(run_cli("sessions", "export", session.session_id, cwd=project).stdout)
    assert "# demo project" in json.dumps(exported["messages"])
