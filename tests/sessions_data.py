"""Realistic stored messages for session tests and benchmarks."""

from __future__ import annotations

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RequestUsage,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)


def exchange(i: int) -> list[ModelMessage]:
    """Four realistic messages: a prompt, a tool call, its result, an answer."""
    return [
        ModelRequest(parts=[UserPromptPart(f"please fix bug {i} in foo/bar_{i}.py " * 3)]),
        ModelResponse(
            parts=[
                TextPart("Let me look. " * 5),
                ToolCallPart("read_file", {"path": f"foo/bar_{i}.py"}, tool_call_id=f"c{i}"),
            ],
            usage=RequestUsage(input_tokens=1000, output_tokens=50),
        ),
        ModelRequest(parts=[ToolReturnPart("read_file", "def foo():\n    return 42\n" * 10, tool_call_id=f"c{i}")]),
        ModelResponse(parts=[TextPart("Done. " * 20)], usage=RequestUsage(input_tokens=1100, output_tokens=40)),
    ]
