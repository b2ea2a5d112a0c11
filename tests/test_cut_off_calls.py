"""A tool call cut off by the output limit, or mid-arguments, never runs a tool that changes anything (issue 10.1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from code_puppy.run.cut_off_calls import json_outline
from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, ToolCall, call, cut_call, text, tool_calls

PRECIOUS = "line one: precious\nline two: also precious\n"
CUTS = (10, 25, 40, 55)
"""Characters of the arguments' JSON that arrive: inside a key, inside a value, at a value's start, near the end."""


def tool_results(server: FakeLLMServer) -> list[str]:
    return [m["content"] for r in server.requests for m in r.body["messages"] if m["role"] == "tool"][-len(CUTS) :]


CALLS: dict[str, dict[str, Any]] = {
    "write_file": {"path": "important.txt", "content": "line one: prec" + "x" * 60},
    "edit_file": {"path": "important.txt", "old_text": "line one: precious", "new_text": "line one: p" + "y" * 60},
    "shell": {"command": "rm -f important.txt && echo removed && echo and more words to cut off here"},
    "create_directory": {"path": "a-directory-with-a-rather-long-name/and/more/levels/below/it"},
}


@pytest.mark.parametrize("stop", ["length", "none"], ids=["finish-length", "stream-ended"])
@pytest.mark.parametrize("tool", sorted(CALLS))
def test_a_cut_off_call_changes_nothing(server: FakeLLMServer, project: Path, tool: str, stop: str) -> None:
    (project / "important.txt").write_text(PRECIOUS)
    server.script(
        *(tool_calls(cut_call(tool, CALLS[tool], at), stop=stop) for at in CUTS),
        text("I will send it again, smaller."),
    )
    completed = run_cli("-p", "change it", "--permission-mode", "yolo", cwd=project)
    assert completed.returncode == 0, completed.stderr
    assert (project / "important.txt").read_text() == PRECIOUS
    assert sorted(p.name for p in project.iterdir()) == ["README.md", "important.txt"]
    results = tool_results(server)
    assert len(results) == len(CUTS)
    assert all(f"Your `{tool}` call was cut off" in result and "not run" in result for result in results), results


def test_a_complete_call_in_a_reply_stopped_on_length_is_not_run(server: FakeLLMServer, project: Path) -> None:
    (project / "important.txt").write_text(PRECIOUS)
    whole = ToolCall("write_file", {"path": "important.txt", "content": "short"})
    server.script(
        tool_calls(call("read_file", {"path": "important.txt"}), whole, stop="length"),
        text("done"),
    )
    completed = run_cli("-p", "change it", "--permission-mode", "yolo", cwd=project)
    assert completed.returncode == 0, completed.stderr
    assert (project / "important.txt").read_text() == PRECIOUS
    read, write = [m["content"] for m in server.requests[1].body["messages"] if m["role"] == "tool"]
    assert "line one: precious" in read  # a reader runs: it cannot lose anything
    assert "hit the output token limit" in write


def test_a_cut_off_read_is_repaired_and_runs(server: FakeLLMServer, project: Path) -> None:
    (project / "important.txt").write_text(PRECIOUS)
    server.script(tool_calls(cut_call("read_file", {"path": "important.txt"}, 25), stop="none"), text("read"))
    completed = run_cli("-p", "read it", cwd=project)
    assert completed.returncode == 0, completed.stderr
    (result,) = [m["content"] for m in server.requests[1].body["messages"] if m["role"] == "tool"]
    assert "line two: also precious" in result


def test_a_repair_that_loses_nothing_still_applies(server: FakeLLMServer, project: Path) -> None:
    args = '```json\n{"path": "notes.txt", "content": "kept whole",}\n```'
    server.script(tool_calls(ToolCall("write_file", {}, raw_args=args)), text("written"))
    completed = run_cli("-p", "write it", "--permission-mode", "yolo", cwd=project)
    assert completed.returncode == 0, completed.stderr
    assert (project / "notes.txt").read_text() == "kept whole"


@pytest.mark.parametrize(
    "raw",
    [
        '{"path":"important.txt","content":"x"}{"path":"important.txt","content":""}',
        '{"path": "important.txt", "content": "x"}\n{"path": "important.txt", "content": ""}',
        '```json\n{"path": "important.txt", "content": "x"}\n```\n'
        '```json\n{"path": "important.txt", "content": ""}\n```',
    ],
    ids=["back-to-back", "one-a-line", "two-fences"],
)
def test_arguments_that_are_several_objects_are_refused_not_repaired(
    server: FakeLLMServer, project: Path, raw: str
) -> None:
    (project / "important.txt").write_text(PRECIOUS)
    server.script(tool_calls(ToolCall("write_file", {}, raw_args=raw)), text("I will send them one by one."))
    completed = run_cli("-p", "change it", "--permission-mode", "yolo", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "I will send them one by one.\n"), completed.stderr
    assert (project / "important.txt").read_text() == PRECIOUS
    assert [json.loads(m["content"]) for m in server.requests[1].body["messages"] if m["role"] == "tool"] == [
        {
            "error": "Your `write_file` call's arguments are 2 JSON objects one after another, so it was not run and "
            "nothing changed. Send each call again on its own, its arguments as one JSON object."
        }
    ]


@pytest.mark.parametrize(
    ("raw", "values", "cut"),
    [
        ('{"a": "b"}', 1, False),
        ('{"a": [1, 2], "b": {"c": "}"}}', 1, False),
        ('{"a": 1,}', 1, False),
        ('```json\n{"a": 1}\n```', 1, False),
        ("", 0, False),
        ('{"a": "b', 1, True),
        ('{"a": "b\\"', 1, True),
        ('{"a": [1, 2', 1, True),
        ('{"a": {"b": 1}', 1, True),
        ('{"a"', 1, True),
        ('{"a": "}{"}{"b": 2}', 2, False),
        ('{"a": 1} [2]\n{"c": 3}', 3, False),
        ('{"a": 1}{"b": "', 2, True),
    ],
)
def test_json_outline(raw: str, values: int, cut: bool) -> None:
    assert json_outline(raw) == (values, cut)
    if values == 1 and not cut and raw.startswith("{") and not raw.endswith(",}"):
        json.loads(raw)  # the uncut examples are real JSON
