"""A stored conversation as the dashboard shows it: markdown rendered with raw HTML escaped, steers and notes marked,
tool calls folded with their results, edits as diffs."""

from __future__ import annotations

from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    TextContent,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from code_puppy.web.transcript import PAGE, page_bounds, render


def test_markdown_is_rendered_and_raw_html_is_shown_as_text() -> None:
    messages = [
        ModelRequest(parts=[UserPromptPart("fix <script>alert(1)</script> and [this](javascript:alert(1))")]),
        ModelResponse(parts=[TextPart("Done: **bold** and `code`.\n\n<img src=x onerror=alert(1)>")]),
    ]
    assert render(messages, 0, 2) == (
        '<div class="msg you"><div class="who">you</div><p>fix &lt;script&gt;alert(1)&lt;/script&gt; and '
        "[this](javascript:alert(1))</p>\n</div>\n"
        '<div class="msg model"><div class="who">model</div><p>Done: <strong>bold</strong> and <code>code</code>.</p>\n'
        "<p>&lt;img src=x onerror=alert(1)&gt;</p>\n</div>"
    )


def test_a_steer_and_an_attached_note_are_marked() -> None:
    messages = [
        ModelRequest(parts=[UserPromptPart(["look", TextContent("ctx line", metadata={"attached": "plugin"})])]),
        ModelResponse(parts=[TextPart("Looking.")], run_id="run-1"),
        ModelRequest(parts=[UserPromptPart("focus on tests")], run_id="run-1"),
        ModelResponse(parts=[TextPart("Focused.")], run_id="run-1"),
        ModelRequest(parts=[UserPromptPart("next turn")], run_id="run-2"),
    ]
    html = render(messages, 0, len(messages))
    assert '<details class="note"><summary>note: ctx line</summary><pre>ctx line</pre></details>' in html
    assert '<div class="msg steer"><div class="who">steer</div><p>focus on tests</p>' in html
    assert '<div class="msg you"><div class="who">you</div><p>next turn</p>' in html


def test_an_edit_is_folded_with_its_diff_and_result() -> None:
    call = ToolCallPart("edit_file", {"path": "a.py", "old_text": "x = 1", "new_text": "x = 2"}, tool_call_id="c1")
    messages = [
        ModelResponse(parts=[call]),
        ModelRequest(parts=[ToolReturnPart("edit_file", "Edited a.py.", tool_call_id="c1")]),
    ]
    assert render(messages, 0, 1) == (
        '<details class="tool success"><summary>⚙ edit_file(a.py) <span class="result">↳ Edited a.py.</span></summary>'
        '<pre class="diff"><span class="hunk">--- a/a.py</span><span class="hunk">+++ b/a.py</span>'
        '<span class="hunk">@@ -1 +1 @@</span><span class="del">-x = 1</span><span class="add">+x = 2</span></pre>'
        '<div class="label">arguments</div><pre>{\n  &quot;path&quot;: &quot;a.py&quot;,\n  &quot;old_text&quot;: '
        "&quot;x = 1&quot;,\n  &quot;new_text&quot;: &quot;x = 2&quot;\n}</pre>"
        '<div class="label">result (success)</div><pre>Edited a.py.</pre></details>'
    )


def test_pages_count_back_from_the_newest_message() -> None:
    assert page_bounds(10_000, None) == (10_000 - PAGE, 10_000)
    assert page_bounds(10_000, 150) == (0, 150)
    assert page_bounds(50, 999) == (0, 50)
    assert page_bounds(50, -3) == (0, 0)
