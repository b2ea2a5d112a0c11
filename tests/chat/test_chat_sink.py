"""The chat sink's pieces: markdown blocks cut from a stream, coloured diffs, short tool results."""

from __future__ import annotations

from pydantic_ai.messages import FunctionToolResultEvent, ToolReturnPart
from pydantic_ai.usage import RunUsage

from code_puppy.chat.chat_sink import MarkdownStream, describe_usage, diff_text, thousands
from code_puppy.core.events import short_result


def test_streamed_text_is_cut_into_complete_markdown_blocks() -> None:
    stream = MarkdownStream()
    chunks = ["Intro para", "graph.\n", "\n- one\n", "- two\n\n```py\n", "x = 1\n\n", "y = 2\n```", "\nTail"]
    blocks = [block for chunk in chunks for block in stream.feed(chunk)]
    assert blocks == ["Intro paragraph.", "- one\n- two", "```py\nx = 1\n\ny = 2\n```"]  # a blank line in code stays
    assert stream.partial == "Tail"
    assert stream.flush() == ["Tail"]
    assert (stream.partial, stream.flush()) == ("", [])


def test_diffs_are_coloured_per_line() -> None:
    text = diff_text("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n same")
    styles = {text.plain[span.start : span.end].strip(): str(span.style) for span in text.spans}
    assert styles == {"--- a/x": "bold", "+++ b/x": "bold", "@@ -1 +1 @@": "cyan", "-old": "red", "+new": "green"} | {
        "same": "dim"
    }


def result(name: str, content: str, outcome: str = "success") -> FunctionToolResultEvent:
    return FunctionToolResultEvent(ToolReturnPart(name, content, tool_call_id="c", outcome=outcome))  # type: ignore[arg-type]


def test_short_results() -> None:
    shell = "3 passed in 0.1s\nPID: 12 (supervisor/session leader; …)\nOutput: /tmp/o\nStatus: /tmp/s\n"
    assert short_result("shell", result("shell", shell + '{"pid": 13, "exit_code": 0}')) == "exit 0 · 3 passed in 0.1s"
    assert short_result(
        "shell", result("shell", 'PID: 12 (…)\nOutput: o\nStatus: s\n{"pid": 13, "exit_code": null}')
    ) == ("still running")
    assert short_result("read_file", result("read_file", "[a.py | 42 lines]\n     1\tx\n")) == "42 lines"
    assert short_result("grep", result("grep", "a.py:1:x\nb.py:2:x\n")) == "2 lines"
    assert short_result("shell", result("shell", "Not allowed.", "denied")) == "denied: Not allowed."


def test_token_counts_in_thousands() -> None:
    assert [thousands(count) for count in (0, 999, 1000, 12_345, 131_072)] == ["0", "999", "1.0k", "12.3k", "131.1k"]
    usage = RunUsage(requests=1, input_tokens=1234, output_tokens=300)
    assert describe_usage(usage, 3.24) == "3.2s · 1 request · 1.2k in / 300 out"
