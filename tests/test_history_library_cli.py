"""The ready-made history processors, factory args and presets end to end: the installed `code-puppy` against the
fake server, configured with a few lines of TOML and no Python."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from code_puppy.history import SUMMARY_HEADER
from code_puppy.history.summary import SUMMARY_ACK, SUMMARY_INSTRUCTIONS
from code_puppy.sessions.store import SqliteConversationStore
from tests.conftest import run_cli, stored_info
from tests.fake_llm import FakeLLMServer, call, error, text, tool_calls
from tests.history.history_cases import C, R, T, U
from tests.test_history_cli import conversation, seed

KEEP = "code_puppy.history:keep_recent_turns"
ESTIMATE = 21
"""The request estimate of the seeded history of the dry-run test, plus an empty prompt."""
SUMMARIZE = "code_puppy.history:summarize_older_turns"


def configure(home: Path, server: FakeLLMServer, history: str, *, window: int | None = None, extra: str = "") -> Path:
    endpoint = f'[models.fake]\nname = "fake-model"\nbase_url = "{server.base_url}"\n'
    if window is not None:
        endpoint += f"context_window = {window}\n"
    config = home / "config.toml"
    config.write_text(f'model = "fake"\n{endpoint}{extra}[history]\n{history}\n')
    return config


def headless(*args: str, cwd: Path) -> tuple[int, dict[str, Any], str]:
    completed = run_cli(*args, "--output-format", "json", cwd=cwd)
    return completed.returncode, json.loads(completed.stdout), completed.stderr


def four_turns(project: Path) -> str:
    """Four headless turns in one session; its id."""
    code, first, _ = headless("-p", "q1", cwd=project)
    assert code == 0
    for prompt in ("q2", "q3", "q4"):
        assert headless("-c", "-p", prompt, cwd=project)[0] == 0
    return first["session_id"]


def test_keep_recent_turns_from_three_lines_of_toml(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server, f'processors = [{{ path = "{KEEP}", args = {{ n = 2 }} }}]')
    server.script(text("a1"), tool_calls(call("read_file", {"path": "README.md"})), text("a2"), text("a3"), text("a4"))
    four_turns(project)
    read = "[README.md | 1 lines]\n     1\t# demo project\n"
    sent = [conversation(request.body) for request in server.requests]
    assert sent[0] == ["q1"]
    assert sent[3] == ["q1", "a1", "q2", None, read, "a2", "q3"]  # two finished turns: all there is
    assert sent[4] == ["q2", None, read, "a2", "q3", "a3", "q4"]  # the fourth turn: the last two only


def test_a_preset_expands_to_its_processors(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    configure(code_puppy_home, server, 'preset = "minimal"')
    server.script(text("a1"), text("a2"), text("a3"), text("a4"))
    four_turns(project)
    assert conversation(server.requests[3].body) == ["q2", "a2", "q3", "a3", "q4"]  # minimal keeps two turns


@pytest.mark.parametrize(
    ("history", "window", "shown"),
    [
        (
            'preset = "minimal"',
            400,
            ["preset minimal · compaction sliding", f"{KEEP}(n=2): keeps groups 2, 3 · drops 0, 1"],
        ),
        (
            'preset = "balanced"',
            1000,
            [
                "preset balanced · compaction tiered",
                "code_puppy.history:fit_token_budget(fraction=0.5): keeps groups 0, 1, 2, 3",
            ],
        ),
        (
            'preset = "summarizing"',
            1000,  # under the trigger: nothing to summarize yet
            [
                "preset summarizing · compaction tiered",
                f"{SUMMARIZE}(keep=4, trigger_fraction=0.6): keeps groups 0, 1, 2, 3",
            ],
        ),
        (
            'preset = "summarizing"\ncompaction = "off"\n'
            f'processors = [{{ path = "{SUMMARIZE}", args = {{ keep = 1 }} }}]',
            30,  # the request (~21 tokens) passes 60% of it
            [
                "preset summarizing · compaction off",
                f"{SUMMARIZE}(keep=1): keeps group 3 · drops 0, 1, 2 · adds 2 summary messages",
            ],
        ),
        (
            f'processors = [{{ path = "{KEEP}", args = {{ n = 3 }} }}, {{ path = "{KEEP}", args = {{ n = 1 }} }}]\n'
            'processor_condition = { path = "code_puppy.history:when_over", args = { fraction = 0.5 } }',
            30,
            [
                "compaction tiered",
                "condition code_puppy.history:when_over(fraction=0.5): true",
                f"{KEEP}(n=3): keeps groups 1, 2, 3 · drops 0",
                f"{KEEP}(n=1): keeps group 3 · drops 0, 1, 2",
            ],
        ),
    ],
)
def test_sessions_show_groups_is_a_dry_run_of_each_processor(
    history: str, window: int, shown: list[str], server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    session_id = seed(
        code_puppy_home,
        project,
        [U("q1"), T("a1"), U("q2"), C("c1"), R("c1"), T("a2"), U("q3"), T("a3"), U("q4"), T("a4")],
    )
    configure(code_puppy_home, server, history, window=window)
    completed = run_cli("sessions", "show", session_id[:8], "--groups", cwd=project)
    assert (completed.returncode, completed.stderr) == (0, "")
    lines = completed.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("history processors, a dry run"))
    assert lines[start:] == [
        f"history processors, a dry run of the next request (nothing is sent; ~{ESTIMATE} tokens of a {window}-token "
        "window):",
        *shown,
    ]
    assert server.requests == []


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ('{ n = "4" }', "'n': input should be a valid integer, got '4'"),
        ("{ m = 4 }", "unknown argument 'm'"),
        ("{ n = -1 }", "'n': input should be greater than or equal to 0, got -1"),
        ("{ n = true }", "'n': input should be a valid integer, got True"),
    ],
)
def test_bad_factory_args_exit_2_with_one_line(
    args: str, why: str, server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    config = configure(code_puppy_home, server, f'processors = [{{ path = "{KEEP}", args = {args} }}]')
    completed = run_cli("-p", "hello", cwd=project)
    assert (completed.returncode, completed.stdout, completed.stderr) == (
        2,
        "",
        f"code-puppy: error: {config}: [history] processors: '{KEEP}' rejected its args: {why}\n",
    )
    assert server.requests == []


@pytest.mark.parametrize(
    ("history", "error"),
    [
        ('preset = "tiny"', "'history.preset': input should be 'minimal', 'balanced' or 'summarizing', got 'tiny'"),
        (
            "processors = [4]",
            "'history.processors.0': expected an import path 'module:callable' or a { path, args } table",
        ),
        (f'processors = [{{ path = "{KEEP}", arg = {{ n = 4 }} }}]', "unknown key 'history.processors.0.arg'"),
        (
            f'processors = [{{ path = "{SUMMARIZE}", args = {{ model = "nowhere" }} }}]',
            f"[history] processors: {SUMMARIZE}(model='nowhere'): unknown model 'nowhere': use PROVIDER:MODEL "
            "(e.g. openai:gpt-5.1) or a name from [models] (fake)",
        ),
        (
            f'summary_model = "openai:gpt-5.1"\nprocessors = [{{ path = "{SUMMARIZE}", args = {{}} }}]',
            "[history] summary_model: model 'openai:gpt-5.1' needs credentials: set OPENAI_API_KEY",
        ),
        (
            'processors = [{ path = "code_puppy.history:fit_token_budget", args = {} }]',
            "[history] processors: 'code_puppy.history:fit_token_budget' rejected its args: fit_token_budget takes "
            "exactly one of max_tokens and fraction",
        ),
    ],
)
def test_bad_history_config_exits_2_naming_the_file(
    history: str, error: str, server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    config = configure(code_puppy_home, server, history)
    completed = run_cli("-p", "hello", cwd=project)
    assert (completed.returncode, completed.stdout, completed.stderr) == (
        2,
        "",
        f"code-puppy: error: {config}: {error}\n",
    )
    assert server.requests == []


def test_summarize_older_turns_end_to_end(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    configure(
        code_puppy_home,
        server,
        f'compaction = "off"\nprocessors = [{{ path = "{SUMMARIZE}", args = {{ keep = 1 }} }}]',
        window=1000,  # every request passes 60% of it: a summary waits only for a turn older than the last one
    )
    server.script(
        text("a1"),
        text("a2"),
        text("S1"),  # turn 3: the summary of q1, then a tool loop of two requests
        tool_calls(call("read_file", {"path": "README.md"})),
        text("a3"),
        text("S2"),  # turn 4: q2 is older than the last turn now; the summary folds S1 in
        text("a4"),
    )
    code, first, _ = headless("-p", "q1", cwd=project)
    assert code == 0 and headless("-c", "-p", "q2", cwd=project)[0] == 0
    code, third, stderr = headless("-c", "-p", "q3", cwd=project)
    assert (code, third["output"], stderr) == (0, "a3", "")
    summary_request = server.requests[2]
    assert summary_request.body["messages"] == [
        {"role": "system", "content": SUMMARY_INSTRUCTIONS},
        {"role": "user", "content": "Summarize this conversation:\n\nUser: q1\nAssistant: a1"},
    ]
    assert "tools" not in summary_request.body  # a separate agent: no tools
    summarized = [f"{SUMMARY_HEADER}\n\nS1", SUMMARY_ACK]
    assert conversation(server.requests[3].body) == [*summarized, "q2", "a2", "q3"]
    # The tool loop's next request starts from the summary and does not summarize again.
    assert conversation(server.requests[4].body)[:5] == [*summarized, "q2", "a2", "q3"]
    # The summary's usage is the run's and the session's.
    assert third["usage"]["requests"] == 3
    assert third["usage"]["input_tokens"] == sum(r.input_tokens for r in server.requests[2:5])
    code, fourth, stderr = headless("-c", "-p", "q4", cwd=project)
    assert (code, fourth["output"], stderr) == (0, "a4", "")
    assert server.requests[5].body["messages"][1]["content"] == (
        f"Summarize this conversation:\n\nUser: {SUMMARY_HEADER}\n\nS1\nAssistant: {SUMMARY_ACK}\nUser: q2\n"
        "Assistant: a2"
    )
    assert conversation(server.requests[6].body)[:3] == [f"{SUMMARY_HEADER}\n\nS2", SUMMARY_ACK, "q3"]
    with SqliteConversationStore(code_puppy_home / "sessions.db") as store:
        info = stored_info(store, first["session_id"])
    assert info is not None
    assert (info.requests, info.input_tokens) == (7, sum(r.input_tokens for r in server.requests))
    # Each request is also on the session's cost ledger, the summaries under their own kind.
    with sqlite3.connect(code_puppy_home / "sessions.db") as db:
        query = "SELECT kind, count(*) FROM requests WHERE session_id = ? GROUP BY kind ORDER BY kind"
        kinds = db.execute(query, [first["session_id"]]).fetchall()
    assert kinds == [("main", 5), ("summary", 2)]


def test_summary_model_is_resolved_through_code_puppys_models(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    with FakeLLMServer() as summarizer:
        cheap = f'[models.cheap]\nname = "cheap-model"\nbase_url = "{summarizer.base_url}"\n'
        configure(
            code_puppy_home,
            server,
            'compaction = "off"\nsummary_model = "cheap"\n'
            f'processors = [{{ path = "{SUMMARIZE}", args = {{ keep = 0 }} }}]',
            window=1000,
            extra=cheap,
        )
        server.script(text("a1"), text("a2"))
        summarizer.script(text("q1 was asked"))
        assert headless("-p", "q1", cwd=project)[0] == 0
        code, result, _ = headless("-c", "-p", "q2", cwd=project)
        assert code == 0 and result["usage"]["requests"] == 2
        assert [r.body["model"] for r in summarizer.requests] == ["cheap-model"]
        assert conversation(server.requests[1].body) == [f"{SUMMARY_HEADER}\n\nq1 was asked", SUMMARY_ACK, "q2"]


def test_a_failed_summary_leaves_the_history_and_the_run_goes_on(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    configure(
        code_puppy_home,
        server,
        f'compaction = "off"\nprocessors = [{{ path = "{SUMMARIZE}", args = {{ keep = 0 }} }}]',
        window=1000,
    )
    server.script(text("a1"), error(400, "summaries are off today"), text("a2"))
    assert headless("-p", "q1", cwd=project)[0] == 0
    code, result, stderr = headless("-c", "-p", "q2", cwd=project)
    assert (code, result["output"]) == (0, "a2")
    assert stderr.startswith("code-puppy: note: summarize_older_turns: the summary failed (ModelRequestRejectedError: ")
    assert stderr.endswith("; the history is left as it was\n") and stderr.count("\n") == 1
    assert conversation(server.requests[2].body) == ["q1", "a1", "q2"]


@pytest.mark.parametrize(("window", "third"), [(10**6, ["q1", "a1", "q2", "a2", "q3"]), (1000, ["q3"])])
def test_when_over_decides_whether_the_processors_run(
    window: int, third: list[str], server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    configure(
        code_puppy_home,
        server,
        'compaction = "off"\n'
        f'processors = [{{ path = "{KEEP}", args = {{ n = 0 }} }}]\n'
        'processor_condition = { path = "code_puppy.history:when_over", args = { fraction = 0.5 } }',
        window=window,
    )
    server.script(text("a1"), text("a2"), text("a3"))
    assert headless("-p", "q1", cwd=project)[0] == 0
    for prompt in ("q2", "q3"):
        assert headless("-c", "-p", prompt, cwd=project)[0] == 0
    assert conversation(server.requests[2].body) == third
