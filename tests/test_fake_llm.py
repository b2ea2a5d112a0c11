"""The fake LLM server, driven by pydantic-ai's real OpenAI and Anthropic model classes."""

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError, ModelTimeoutError
from pydantic_ai.messages import (
    FinalResultEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, override_allow_model_requests
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.ollama import OllamaModel
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.ollama import OllamaProvider
from pydantic_ai.providers.openai import OpenAIProvider

from tests.fake_llm import EXHAUSTED, FakeLLMServer, call, error, hang, text, tool_calls

FILES = {"a.txt": "hello", "b.txt": "world"}
PATHS = {
    "chat": "/v1/chat/completions",
    "ollama": "/v1/chat/completions",
    "responses": "/v1/responses",
    "anthropic": "/v1/messages",
}


def read_file(path: str) -> str:
    """Read a file."""
    return FILES[path]


def make_model(protocol: str, server: FakeLLMServer) -> Model:
    match protocol:
        case "chat":
            return OpenAIChatModel("fake-model", provider=OpenAIProvider(base_url=server.base_url, api_key="sk-test"))
        case "ollama":
            return OllamaModel("qwen3", provider=OllamaProvider(base_url=server.base_url))
        case "responses":
            provider = OpenAIProvider(base_url=server.base_url, api_key="sk-test")
            return OpenAIResponsesModel("fake-model", provider=provider)
        case _:
            provider = AnthropicProvider(base_url=server.anthropic_base_url, api_key="sk-test")
            return AnthropicModel("fake-model", provider=provider)


def tool_result_message(protocol: str, body: dict[str, Any]) -> Any:
    """The last message of a request body, which after a tool call carries its result."""
    return body["input"][-1] if protocol == "responses" else body["messages"][-1]


EXPECTED_TOOL_RESULT = {
    "chat": {"role": "tool", "tool_call_id": "c1", "content": "hello"},
    "ollama": {"role": "tool", "tool_call_id": "c1", "content": "hello"},
    "responses": {"type": "function_call_output", "call_id": "c1", "output": "hello"},
    "anthropic": {
        "role": "user",
        "content": [
            {
                "tool_use_id": "c1",
                "type": "tool_result",
                "content": [{"text": "hello", "type": "text"}],
                "is_error": False,
            }
        ],
    },
}


def shape(messages: list[ModelMessage]) -> list[list[tuple[Any, ...]]]:
    """The parts of each message without timestamps, run ids and provider details."""
    shaped: list[list[tuple[Any, ...]]] = []
    for message in messages:
        parts: list[tuple[Any, ...]] = []
        for part in message.parts:
            match part:
                case UserPromptPart() | TextPart():
                    parts.append((part.part_kind, part.content))
                case ToolCallPart():
                    parts.append((part.part_kind, part.tool_name, part.args_as_dict(), part.tool_call_id))
                case ToolReturnPart():
                    parts.append((part.part_kind, part.tool_name, part.content, part.tool_call_id))
                case _:
                    parts.append((part.part_kind,))
        shaped.append(parts)
    return shaped


def summarize(event: object) -> tuple[Any, ...]:
    """An agent stream event without provider details."""
    match event:
        case PartStartEvent(part=TextPart(content=content)):
            return ("text-start", content)
        case PartStartEvent(part=ToolCallPart(tool_name=name, tool_call_id=call_id)):
            return ("call-start", name, call_id)
        case PartDeltaEvent(delta=TextPartDelta(content_delta=delta)):
            return ("text", delta)
        case PartDeltaEvent(delta=ToolCallPartDelta(args_delta=delta)):
            return ("args", delta)
        case PartEndEvent(part=part):
            return ("end", part.part_kind)
        case FinalResultEvent():
            return ("final",)
        case FunctionToolCallEvent(part=part):
            return ("call", part.tool_name, part.args_as_dict(), part.tool_call_id)
        case FunctionToolResultEvent(part=part):
            return ("result", part.content, part.tool_call_id)
    return (type(event).__name__,)


@pytest.fixture(autouse=True)
def allow_model_requests() -> Iterator[None]:
    with override_allow_model_requests(True):
        yield


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture(params=list(PATHS))
def protocol(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def agent(protocol: str, server: FakeLLMServer) -> AsyncIterator[Agent]:
    # Entering the agent closes the provider's HTTP client afterwards, which would otherwise leak a socket.
    async with Agent(make_model(protocol, server), tools=[read_file]) as agent:
        yield agent


async def test_tool_loop_with_run(protocol: str, server: FakeLLMServer, agent: Agent) -> None:
    server.script(tool_calls(call("read_file", {"path": "a.txt"}, id="c1")), text("The file says hello."))

    result = await agent.run("What does a.txt say?")

    assert result.output == "The file says hello."
    assert shape(result.all_messages()) == [
        [("user-prompt", "What does a.txt say?")],
        [("tool-call", "read_file", {"path": "a.txt"}, "c1")],
        [("tool-return", "read_file", "hello", "c1")],
        [("text", "The file says hello.")],
    ]
    first, second = server.requests
    assert (first.path, second.path, first.body["stream"], second.body.get("stream", False)) == (
        PATHS[protocol],
        PATHS[protocol],
        False,
        False,
    )
    assert tool_result_message(protocol, second.body) == EXPECTED_TOOL_RESULT[protocol]
    assert [r.output_tokens for r in server.requests] == [len('read_file{"path": "a.txt"}') // 4 + 1, 20 // 4 + 1]
    usage = result.usage
    assert (usage.requests, usage.tool_calls, usage.input_tokens, usage.output_tokens) == (
        2,
        1,
        first.input_tokens + second.input_tokens,
        first.output_tokens + second.output_tokens,
    )


async def test_tool_loop_streamed_with_iter(protocol: str, server: FakeLLMServer, agent: Agent) -> None:
    server.script(tool_calls(call("read_file", {"path": "a.txt"}, id="c1")), text("The file says hello."))

    events: list[tuple[Any, ...]] = []
    async with agent.iter("What does a.txt say?") as run:
        async for node in run:
            if Agent.is_model_request_node(node) or Agent.is_call_tools_node(node):
                async with node.stream(run.ctx) as stream:
                    events += [summarize(event) async for event in stream]

    assert run.result is not None
    assert run.result.output == "The file says hello."
    assert events == [
        ("call-start", "read_file", "c1"),
        ("args", '{"path": '),
        ("args", '"a.txt"}'),
        ("end", "tool-call"),
        ("call", "read_file", {"path": "a.txt"}, "c1"),
        ("result", "hello", "c1"),
        ("text-start", "The "),
        ("final",),
        ("text", "file "),
        ("text", "says "),
        ("text", "hello."),
        ("end", "text"),
    ]
    assert [r.body["stream"] for r in server.requests] == [True, True]
    assert tool_result_message(protocol, server.requests[1].body) == EXPECTED_TOOL_RESULT[protocol]
    usage = run.result.usage
    assert (usage.input_tokens, usage.output_tokens) == (
        sum(r.input_tokens for r in server.requests),
        sum(r.output_tokens for r in server.requests),
    )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_parallel_tool_calls(server: FakeLLMServer, agent: Agent, stream: bool) -> None:
    server.script(
        tool_calls(call("read_file", {"path": "a.txt"}, id="c1"), call("read_file", {"path": "b.txt"}, id="c2")),
        text("hello world"),
    )

    async def drain(_ctx: object, events: Any) -> None:
        async for _ in events:
            pass

    result = await agent.run("Read both files.", event_stream_handler=drain if stream else None)

    assert shape(result.all_messages()) == [
        [("user-prompt", "Read both files.")],
        [("tool-call", "read_file", {"path": "a.txt"}, "c1"), ("tool-call", "read_file", {"path": "b.txt"}, "c2")],
        [("tool-return", "read_file", "hello", "c1"), ("tool-return", "read_file", "world", "c2")],
        [("text", "hello world")],
    ]
    assert [r.body.get("stream", False) for r in server.requests] == [stream, stream]


def error_body(protocol: str, type: str, message: str) -> dict[str, Any]:
    """The error body pydantic-ai reports: OpenAI's SDK unwraps the `error` object, Anthropic's keeps the envelope."""
    if protocol == "anthropic":
        return {"type": "error", "error": {"type": type, "message": message}}
    return {"message": message, "type": type, "param": None, "code": None}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_error_reply_raises_model_http_error(
    protocol: str, server: FakeLLMServer, agent: Agent, stream: bool
) -> None:
    server.script(error(429, "slow down"))

    with pytest.raises(ModelHTTPError) as caught:
        if stream:
            async with agent.run_stream("hi", model_settings={"max_retries": 0}) as result:
                await result.get_output()
        else:
            await agent.run("hi", model_settings={"max_retries": 0})

    assert (caught.value.status_code, caught.value.body) == (429, error_body(protocol, "rate_limit_error", "slow down"))
    assert len(server.requests) == 1


async def test_exhausted_script_fails_at_once_despite_sdk_retries(
    protocol: str, server: FakeLLMServer, agent: Agent
) -> None:
    with pytest.raises(ModelHTTPError) as caught:
        async with asyncio.timeout(5):
            await agent.run("hi")

    assert (caught.value.status_code, caught.value.body) == (500, error_body(protocol, "api_error", EXHAUSTED))
    assert len(server.requests) == 1


async def test_default_reply_answers_once_the_script_is_exhausted(server: FakeLLMServer, agent: Agent) -> None:
    server.script(text("scripted"))
    server.default = text("fallback")

    outputs = [(await agent.run(prompt)).output for prompt in ("one", "two", "three")]

    assert outputs == ["scripted", "fallback", "fallback"]


@pytest.mark.parametrize("protocol", ["chat"])
async def test_delay_and_hang(server: FakeLLMServer, agent: Agent) -> None:
    server.script(text("late", delay=0.3), hang())

    started = time.monotonic()
    assert (await agent.run("hi")).output == "late"
    assert time.monotonic() - started >= 0.3
    with pytest.raises(ModelTimeoutError):
        await agent.run("hi", model_settings={"timeout": 0.2, "max_retries": 0})


async def test_closing_the_server_ends_a_hanging_request() -> None:
    with FakeLLMServer(hang()) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        messages: Any = [{"role": "user", "content": "hi"}]
        request = asyncio.create_task(client.chat.completions.create(model="m", messages=messages, timeout=10))
        while not server.requests:
            await asyncio.sleep(0.01)
        started = time.monotonic()

    with pytest.raises(openai.APIConnectionError):
        await request
    await client.close()
    assert time.monotonic() - started < 5  # the client's own timeout is 10 s


@pytest.mark.parametrize("protocol", ["chat", "anthropic"])
async def test_stream_can_be_interrupted_mid_text(server: FakeLLMServer, agent: Agent) -> None:
    server.script(text("one two three four five six", chunk_delay=0.5))

    deltas: list[str] = []
    started = time.monotonic()
    async with agent.iter("count") as run:
        async for node in run:
            if Agent.is_model_request_node(node):
                async with node.stream(run.ctx) as stream:
                    async for event in stream:
                        if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                            deltas.append(event.delta.content_delta)
                        if len(deltas) == 2:
                            break
                break

    assert deltas == ["two ", "three "]
    assert time.monotonic() - started < 2.8  # the full stream would take over 3 s


def test_standalone_server_cycles_its_script(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "hi there"}, {"error": 503, "message": "boom"}]))
    command = [sys.executable, str(Path(__file__).with_name("fake_llm.py")), "--port", "0", "--script", str(script)]
    process = subprocess.Popen([*command, "--repeat"], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip()
        with openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0) as client:

            def ask() -> str | None:
                messages: Any = [{"role": "user", "content": "hi"}]
                return client.chat.completions.create(model="m", messages=messages).choices[0].message.content

            first = ask()
            with pytest.raises(openai.InternalServerError) as caught:
                ask()
            third = ask()
    finally:
        process.terminate()
        process.wait()
        assert process.stdout is not None
        process.stdout.close()

    assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
    assert (first, caught.value.status_code, caught.value.body, third) == (
        "hi there",
        503,
        {"message": "boom", "type": "api_error", "param": None, "code": None},
        "hi there",
    )
