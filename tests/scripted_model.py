"""FunctionModel helpers for agent-level tests: scripted replies, streamed or not, recording what was sent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

Reply = list[ToolCallPart] | str


@dataclass
class Scripted:
    """A model that plays `steps` in order (a list of tool calls, or a final text) and records each request."""

    steps: list[Reply | Callable[[list[ModelMessage], AgentInfo], Reply]]
    seen: list[list[ModelMessage]] = field(default_factory=list[list[ModelMessage]])
    infos: list[AgentInfo] = field(default_factory=list[AgentInfo])

    def _next(self, messages: list[ModelMessage], info: AgentInfo) -> Reply:
        self.seen.append(list(messages))
        self.infos.append(info)
        step = self.steps[len(self.seen) - 1]
        return step(messages, info) if callable(step) else step

    def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        reply = self._next(messages, info)
        return ModelResponse(parts=[TextPart(reply)] if isinstance(reply, str) else list(reply))

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        reply = self._next(messages, info)
        if isinstance(reply, str):
            yield reply
            return
        yield {
            index: DeltaToolCall(name=call.tool_name, json_args=json.dumps(call.args), tool_call_id=call.tool_call_id)
            for index, call in enumerate(reply)
        }

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self._respond, stream_function=self._stream)


def scripted(*steps: Reply | Callable[[list[ModelMessage], AgentInfo], Reply]) -> Scripted:
    return Scripted(list(steps))


def tool_returns(messages: list[ModelMessage]) -> list[tuple[str, str, str]]:
    """(tool name, outcome, content) of every tool return in `messages`."""
    return [
        (part.tool_name, part.outcome, str(part.content))
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
