"""A scripted fake LLM server speaking OpenAI Chat Completions, OpenAI Responses and Anthropic Messages.

Tests queue replies and point the real SDK clients at it:

    with FakeLLMServer() as server:
        server.script(tool_calls(call("read_file", {"path": "a.txt"})), text("It says hello."))
        model = OpenAIChatModel("fake", provider=OpenAIProvider(base_url=server.base_url, api_key="sk-test"))

Standalone, for benchmarks: `python tests/fake_llm.py --port 0 --script script.json [--repeat]` prints the
OpenAI base URL on its first line and serves until killed.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple, Self

try:
    from tests.fake_cache import AnthropicPromptCache
except ImportError:  # run as a script: tests/ is the first entry of sys.path
    from fake_cache import AnthropicPromptCache

# A fixed creation time keeps responses, and the messages pydantic-ai builds from them, deterministic.
CREATED = 1_700_000_000
EXHAUSTED = "fake server: no scripted response left"


@dataclass(frozen=True)
class Text:
    """A final text answer, streamed one word per chunk."""

    content: str
    delay: float = 0.0
    chunk_delay: float = 0.0
    stop: str | None = None
    """Why the reply ended, when not naturally: `length`, `none`, or a reason passed as it is (`content_filter`)."""
    thinking: str | None = None
    """Reasoning streamed before the answer (Chat Completions' `reasoning_content`, as DeepSeek's), if any."""


@dataclass(frozen=True)
class ToolCall:
    """One function call inside a `ToolCalls` reply; `id` defaults to `call_<request>_<position>`."""

    name: str
    args: dict[str, Any]
    id: str | None = None
    raw_args: str | None = None
    """The arguments exactly as sent, when they are not `args` as JSON: cut off, or malformed."""

    @property
    def arguments(self) -> str:
        return self.raw_args if self.raw_args is not None else json.dumps(self.args)


@dataclass(frozen=True)
class ToolCalls:
    """One assistant message with one or more (parallel) tool calls."""

    calls: tuple[ToolCall, ...]
    delay: float = 0.0
    chunk_delay: float = 0.0
    stop: str | None = None
    """Why the reply ended, when not because of the tool calls: `length` (the output limit) or `none` (no reason)."""
    thinking: str | None = None
    """Reasoning streamed before the calls (Chat Completions' `reasoning_content`), if any."""


@dataclass(frozen=True)
class Error:
    """An HTTP error with a provider-shaped JSON body, or with `body` as it is (e.g. Ollama's `{"error": "..."}`)."""

    status: int
    message: str
    delay: float = 0.0
    body: dict[str, Any] | None = None


Step = Text | ToolCalls | Error


def text(
    content: str, *, delay: float = 0.0, chunk_delay: float = 0.0, stop: str | None = None, thinking: str | None = None
) -> Text:
    return Text(content, delay, chunk_delay, stop, thinking)


def call(name: str, args: dict[str, Any], id: str | None = None) -> ToolCall:
    return ToolCall(name, args, id)


def tool_calls(
    *calls: ToolCall, delay: float = 0.0, chunk_delay: float = 0.0, stop: str | None = None, thinking: str | None = None
) -> ToolCalls:
    return ToolCalls(calls, delay, chunk_delay, stop, thinking)


def cut_call(name: str, args: dict[str, Any], at: int, id: str | None = None) -> ToolCall:
    """A call whose JSON arguments stop after `at` characters, as when the output limit cuts a reply off."""
    return ToolCall(name, args, id, raw_args=json.dumps(args)[:at])


def error(status: int, message: str = "", *, delay: float = 0.0, body: dict[str, Any] | None = None) -> Error:
    return Error(status, message, delay, body)


def hang() -> Text:
    """A reply that never starts; the request is dropped when the server closes."""
    return Text("", delay=math.inf)


def step_from_json(data: dict[str, Any]) -> Step:
    """Parse one step of a standalone script, e.g. `{"text": "hi", "chunk_delay": 0.01}`."""
    timing = {key: data[key] for key in ("delay", "chunk_delay") if key in data}
    match data:
        case {"text": str(content)}:
            return Text(content, **timing)
        case {"tool_calls": list(calls)}:
            parsed = tuple(ToolCall(c["name"], c.get("args", {}), c.get("id"), c.get("raw_args")) for c in calls)
            return ToolCalls(parsed, stop=data.get("stop"), **timing)
        case {"error": int(status)}:
            return Error(status, data.get("message", "fake server error"), data.get("delay", 0.0), data.get("body"))
    raise ValueError(f"unknown script step: {data!r}")


@dataclass
class RecordedRequest:
    """A request as the server saw it, with the usage it reported back."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    input_tokens: int
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass
class _Turn:
    """A scripted answer to one request: text, or tool calls with their ids settled."""

    index: int
    request: RecordedRequest
    text: str | None
    calls: list[ToolCall]
    stop: str | None = None
    thinking: str | None = None

    @classmethod
    def of(cls, index: int, request: RecordedRequest, step: Text | ToolCalls) -> _Turn:
        if isinstance(step, Text):
            return cls(index, request, step.content, [], step.stop, step.thinking)
        calls = [replace(c, id=c.id or f"call_{index}_{i}") for i, c in enumerate(step.calls)]
        return cls(index, request, None, calls, step.stop, step.thinking)

    def finish_reason(self, natural: str, length: str) -> str | None:
        """The protocol's stop reason: `natural` unless the script says the reply was cut off or gave none."""
        return {None: natural, "length": length, "none": None}.get(self.stop, self.stop)

    @property
    def model(self) -> str:
        return self.request.body.get("model", "fake-model")


def _output_tokens(step: Text | ToolCalls) -> int:
    if isinstance(step, Text):
        return len(step.content) // 4 + 1
    return sum(len(c.name) + len(c.arguments) for c in step.calls) // 4 + 1


def _pieces(s: str) -> list[str]:
    """Split into word-sized chunks, so streams have several deltas to interrupt."""
    return [piece for piece in re.split(r"(?<=\s)(?=\S)", s) if piece]


def _sse(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


def _typed_event(type: str, **fields: Any) -> bytes:
    return _sse({"type": type, **fields}, event=type)


def _error_type(status: int) -> str:
    types = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error"}
    types |= {404: "not_found_error", 429: "rate_limit_error", 529: "overloaded_error"}
    return types.get(status, "api_error")


# --- OpenAI Chat Completions -------------------------------------------------------------------------------------


def _openai_error(status: int, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": _error_type(status), "param": None, "code": None}}


def _chat_usage(turn: _Turn) -> dict[str, int]:
    i, o = turn.request.input_tokens, turn.request.output_tokens
    return {"prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o}


def _chat_response(turn: _Turn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    if turn.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in turn.calls
        ]
    finish_reason = turn.finish_reason("tool_calls" if turn.calls else "stop", "length")
    choice = dict(index=0, message=message, finish_reason=finish_reason, logprobs=None)
    base = dict(id=f"chatcmpl-{turn.index}", object="chat.completion", created=CREATED, model=turn.model)
    return base | {"choices": [choice], "usage": _chat_usage(turn)}


def _chat_events(turn: _Turn) -> Iterator[bytes]:
    base = dict(id=f"chatcmpl-{turn.index}", object="chat.completion.chunk", created=CREATED, model=turn.model)

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        return _sse(base | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]})

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(turn.thinking or ""):
        yield chunk({"reasoning_content": piece})
    for piece in _pieces(turn.text or ""):
        yield chunk({"content": piece})
    for i, c in enumerate(turn.calls):
        function = {"name": c.name, "arguments": ""}
        yield chunk({"tool_calls": [{"index": i, "id": c.id, "type": "function", "function": function}]})
        for piece in _pieces(c.arguments):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield chunk({}, turn.finish_reason("tool_calls" if turn.calls else "stop", "length"))
    if (turn.request.body.get("stream_options") or {}).get("include_usage"):
        yield _sse(base | {"choices": [], "usage": _chat_usage(turn)})
    yield _sse("[DONE]")


# --- OpenAI Responses --------------------------------------------------------------------------------------------


def _responses_output(turn: _Turn) -> list[dict[str, Any]]:
    if turn.text is not None:
        content = dict(type="output_text", text=turn.text, annotations=[], logprobs=[])
        return [dict(type="message", id=f"msg_{turn.index}", role="assistant", status="completed", content=[content])]
    return [
        dict(type="function_call", id=f"fc_{c.id}", call_id=c.id, name=c.name, arguments=c.arguments)
        | {"status": "completed"}
        for c in turn.calls
    ]


def _responses_response(turn: _Turn, *, done: bool = True) -> dict[str, Any]:
    i, o = turn.request.input_tokens, turn.request.output_tokens
    usage = dict(
        input_tokens=i,
        input_tokens_details={"cached_tokens": 0, "cache_write_tokens": 0},
        output_tokens=o,
        output_tokens_details={"reasoning_tokens": 0},
        total_tokens=i + o,
    )
    return dict(
        id=f"resp_{turn.index}",
        object="response",
        created_at=CREATED,
        model=turn.model,
        status="completed" if done else "in_progress",
        output=_responses_output(turn) if done else [],
        usage=usage if done else None,
        parallel_tool_calls=True,
        tool_choice="auto",
        tools=[],
        error=None,
        incomplete_details=None,
    )


def _responses_events(turn: _Turn) -> Iterator[bytes]:
    sequence = itertools.count()

    def event(type: str, **fields: Any) -> bytes:
        return _typed_event(type, sequence_number=next(sequence), **fields)

    yield event("response.created", response=_responses_response(turn, done=False))
    for index, item in enumerate(_responses_output(turn)):
        started = item | {"status": "in_progress"}
        if item["type"] == "message":
            part = item["content"][0]
            ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
            yield event("response.output_item.added", output_index=index, item=started | {"content": []})
            yield event("response.content_part.added", **ids, part=part | {"text": ""})
            for piece in _pieces(part["text"]):
                yield event("response.output_text.delta", **ids, delta=piece, logprobs=[])
            yield event("response.output_text.done", **ids, text=part["text"], logprobs=[])
            yield event("response.content_part.done", **ids, part=part)
        else:
            ids = {"item_id": item["id"], "output_index": index}
            yield event("response.output_item.added", output_index=index, item=started | {"arguments": ""})
            for piece in _pieces(item["arguments"]):
                yield event("response.function_call_arguments.delta", **ids, delta=piece)
            yield event("response.function_call_arguments.done", **ids, name=item["name"], arguments=item["arguments"])
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed", response=_responses_response(turn))


# --- Anthropic Messages ------------------------------------------------------------------------------------------


def _anthropic_error(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": _error_type(status), "message": message}}


def _messages_response(turn: _Turn) -> dict[str, Any]:
    content = [dict(type="tool_use", id=c.id, name=c.name, input=c.args) for c in turn.calls]
    if turn.text is not None:
        content = [dict(type="text", text=turn.text, citations=None)]
    request = turn.request
    usage = {"input_tokens": request.input_tokens, "output_tokens": request.output_tokens}
    if request.cache_read_tokens or request.cache_write_tokens:
        usage |= {"cache_read_input_tokens": request.cache_read_tokens}
        usage |= {"cache_creation_input_tokens": request.cache_write_tokens}
    return dict(
        id=f"msg_{turn.index}",
        type="message",
        role="assistant",
        model=turn.model,
        content=content,
        stop_reason=turn.finish_reason("tool_use" if turn.calls else "end_turn", "max_tokens"),
        stop_sequence=None,
        usage=usage,
    )


def _messages_events(turn: _Turn) -> Iterator[bytes]:
    message = _messages_response(turn)
    yield _typed_event("message_start", message=message | {"content": [], "stop_reason": None})
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            start = block | {"text": ""}
            deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(block["text"])]
        else:
            start = block | {"input": {}}
            arguments = next(c.arguments for c in turn.calls if c.id == block["id"])
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(arguments)]
        yield _typed_event("content_block_start", index=index, content_block=start)
        for delta in deltas:
            yield _typed_event("content_block_delta", index=index, delta=delta)
        yield _typed_event("content_block_stop", index=index)
    # Usage here is cumulative: pydantic-ai replaces the message_start numbers with these.
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield _typed_event("message_delta", delta=delta, usage=message["usage"])
    yield _typed_event("message_stop")


class _Protocol(NamedTuple):
    error_body: Callable[[int, str], dict[str, Any]]
    response: Callable[[_Turn], dict[str, Any]]
    events: Callable[[_Turn], Iterator[bytes]]


_PROTOCOLS = {
    "/v1/chat/completions": _Protocol(_openai_error, _chat_response, _chat_events),
    "/v1/responses": _Protocol(_openai_error, _responses_response, _responses_events),
    "/v1/messages": _Protocol(_anthropic_error, _messages_response, _messages_events),
}


class FakeLLMServer(ThreadingHTTPServer):
    """Serves scripted replies, one per model request, in order, on 127.0.0.1."""

    daemon_threads = True

    def __init__(self, *steps: Step, port: int = 0, repeat: bool = False, per_conversation: bool = False) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.requests: list[RecordedRequest] = []
        self.default: Step | None = None
        """Reply used once the script is exhausted; `None` answers with an HTTP 500."""
        self.repeat = repeat
        """Cycle the script forever instead of consuming it."""
        self.per_conversation = per_conversation
        """Answer each request with the step numbered by the assistant messages in its history (Chat Completions,
        Anthropic Messages), without consuming the script: concurrent conversations each follow the whole script."""
        self.models = ["fake-model"]
        """What `GET /v1/models` lists, as a local OpenAI-compatible server lists its models."""
        self.prompt_cache: AnthropicPromptCache | None = None
        """Set: Anthropic requests report cache reads and writes as the real service does (tests/fake_cache.py)."""
        self._steps = deque(steps)
        self._lock = threading.Lock()
        self._closing = threading.Event()

    @property
    def base_url(self) -> str:
        """Base URL for the OpenAI SDK (`OPENAI_BASE_URL`, `OLLAMA_BASE_URL`)."""
        return f"http://127.0.0.1:{self.server_port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """Base URL for the Anthropic SDK (`ANTHROPIC_BASE_URL`), which appends `/v1/messages` itself."""
        return f"http://127.0.0.1:{self.server_port}"

    def script(self, *steps: Step) -> None:
        """Append replies, consumed in order across all protocols."""
        with self._lock:
            self._steps.extend(steps)

    def __enter__(self) -> Self:
        # A short poll interval keeps shutdown, and so each test's teardown, fast.
        threading.Thread(target=self.serve_forever, args=(0.01,), daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._closing.set()  # ends delayed and hanging replies
        self.shutdown()
        self.server_close()

    def _record(self, request: RecordedRequest) -> int:
        with self._lock:
            self.requests.append(request)
            return len(self.requests) - 1

    def _next_step(self, request: RecordedRequest) -> Step | None:
        if self.per_conversation:
            history: list[Any] = request.body.get("messages") or []
            answered = sum(1 for message in history if isinstance(message, dict) and message.get("role") == "assistant")
            return self._steps[answered] if answered < len(self._steps) else self.default
        with self._lock:
            if not self._steps:
                return self.default
            step = self._steps.popleft()
            if self.repeat:
                self._steps.append(step)
            return step

    def _pause(self, seconds: float) -> bool:
        """Sleep unless the server is closing; False means abandon the reply."""
        return not self._closing.wait(None if math.isinf(seconds) else seconds)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Without it, delayed ACKs add ~40ms to every request (headers and body are separate writes).
    disable_nagle_algorithm = True
    server: FakeLLMServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keeps test and benchmark output clean

    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/v1/models":
            return self._send_json(404, _openai_error(404, f"fake server: unknown path {self.path}"))
        models = [{"id": model, "object": "model", "owned_by": "fake"} for model in self.server.models]
        return self._send_json(200, {"object": "list", "data": models})

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        headers = {key.lower(): value for key, value in self.headers.items()}
        request = RecordedRequest(path, headers, json.loads(raw or b"{}"), input_tokens=len(raw) // 4 + 1)
        if path == "/v1/messages" and self.server.prompt_cache is not None:
            cached = self.server.prompt_cache.usage(request.body, request.input_tokens)
            request.input_tokens, request.cache_read_tokens, request.cache_write_tokens = cached
        index = self.server._record(request)
        protocol = _PROTOCOLS.get(path)
        if protocol is None:
            return self._send_json(404, _openai_error(404, f"fake server: unknown path {path}"))
        step = self.server._next_step(request)
        if step is None:
            # x-should-retry stops the SDKs from retrying, so an unscripted request fails at once.
            body = protocol.error_body(500, EXHAUSTED)
            return self._send_json(500, body, {"x-should-retry": "false"})
        if not self.server._pause(step.delay):
            self.close_connection = True
            return None
        if isinstance(step, Error):
            body = step.body if step.body is not None else protocol.error_body(step.status, step.message)
            return self._send_json(step.status, body)
        request.output_tokens = _output_tokens(step)
        turn = _Turn.of(index, request, step)
        if not request.body.get("stream"):
            return self._send_json(200, protocol.response(turn))
        try:
            self._stream(protocol.events(turn), step.chunk_delay)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client stopped reading, e.g. a cancelled run

    def _send_json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, events: Iterator[bytes], chunk_delay: float) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for i, event in enumerate(events):
            if i and not self.server._pause(chunk_delay):
                self.close_connection = True
                return
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.wfile.write(b"0\r\n\r\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Scripted fake LLM server; prints its OpenAI base URL first.")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--script", type=Path, help='JSON list of steps, e.g. [{"text": "hi"}]')
    parser.add_argument("--repeat", action="store_true", help="cycle the script forever")
    parser.add_argument(
        "--per-conversation", action="store_true", help="each conversation follows the whole script (concurrent runs)"
    )
    args = parser.parse_args(argv)
    steps = [step_from_json(step) for step in json.loads(args.script.read_text())] if args.script else []
    server = FakeLLMServer(*steps, port=args.port, repeat=args.repeat, per_conversation=args.per_conversation)
    print(server.base_url, flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    server.server_close()


if __name__ == "__main__":
    main()
