"""Cost and budgets end to end: the installed `code-puppy` against the fake server, through the real OpenAI client.

`gpt-4o` is a model `genai-prices` knows ($2.50 input, $10 output per million tokens); the server's own `fake-model`
is one it does not.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from code_puppy.sessions.schema import MIGRATIONS, migrate
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore
from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, RecordedRequest, call, text, tool_calls

GPT_4O = (2.5, 10.0)
"""US dollars per million input and output tokens, as genai-prices has them for gpt-4o."""


def configure(home: Path, server: FakeLLMServer, extra: str = "") -> None:
    """`gpt` (gpt-4o, priced) as the default model, `fake` (unpriced) beside it, both on the fake server."""
    (home / "config.toml").write_text(
        f'model = "gpt"\n[sessions]\nauto_title = false\n'
        f'[models.gpt]\nname = "gpt-4o"\nbase_url = "{server.base_url}"\n'
        f'[models.fake]\nname = "fake-model"\nbase_url = "{server.base_url}"\n{extra}'
    )


def cost_of(requests: Sequence[RecordedRequest], prices: tuple[float, float] = GPT_4O) -> float:
    return sum(r.input_tokens * prices[0] + r.output_tokens * prices[1] for r in requests) / 1_000_000


def json_run(*args: str, cwd: Path) -> tuple[int, dict[str, Any], str]:
    done = run_cli("-p", *args, "--output-format", "json", cwd=cwd)
    return done.returncode, json.loads(done.stdout), done.stderr


def request_rows(home: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(home / "sessions.db") as db:
        return db.execute("SELECT session_id, kind, model, cost_usd FROM requests ORDER BY id").fetchall()


def test_json_prices_every_request_of_a_known_model(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server)
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("A demo."))
    code, result, _ = json_run("what is this?", cwd=project)
    assert code == 0 and len(server.requests) == 2
    assert result["cost_usd"] == pytest.approx(cost_of(server.requests), rel=1e-9, abs=1e-12)
    assert result["cost_complete"] is True
    assert result["usage"] == {
        "input_tokens": sum(r.input_tokens for r in server.requests),
        "output_tokens": sum(r.output_tokens for r in server.requests),
        "requests": 2,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    }
    rows = request_rows(code_puppy_home)
    assert [(row[0], row[1], row[2]) for row in rows] == [(result["session_id"], "main", "gpt-4o")] * 2
    assert sum(row[3] for row in rows) == pytest.approx(result["cost_usd"])


def test_an_unknown_model_has_tokens_and_no_cost(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    configure(code_puppy_home, server)
    server.script(text("Hi."))
    code, result, _ = json_run("hello", "-m", "fake", cwd=project)
    assert code == 0
    assert (result["cost_usd"], result["cost_complete"]) == (None, False)
    assert result["usage"]["input_tokens"] > 0
    listed = run_cli("sessions", "list", cwd=project).stdout.splitlines()
    assert listed[0].split() == ["ID", "AGE", "TURNS", "PROJECT", "COST", "NAME/TITLE"]
    assert listed[1].split()[-2:] == ["unknown", "hello"]
    assert "$0.00" not in run_cli("sessions", "list", cwd=project).stdout


def test_configured_prices_price_a_private_endpoint(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    configure(
        code_puppy_home,
        server,
        "input_price = 1.0\noutput_price = 4.0\n[models.free]\n"
        f'name = "local-model"\nbase_url = "{server.base_url}"\ninput_price = 0\noutput_price = 0\n',
    )
    server.script(text("Priced."), text("Free."))
    code, result, _ = json_run("hello", "-m", "fake", cwd=project)
    assert code == 0
    assert result["cost_usd"] == pytest.approx(cost_of(server.requests, (1.0, 4.0)))
    code, result, _ = json_run("hello", "-m", "free", cwd=project)
    assert (code, result["cost_usd"], result["cost_complete"]) == (0, 0.0, True)


def test_an_entrys_price_applies_only_through_that_entry(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    # A local model that happens to be called gpt-4o, free: OpenAI's gpt-4o named by a provider string is still paid
    # for at the price table's rate, even sent to the same server.
    (code_puppy_home / "config.toml").write_text(
        f'[sessions]\nauto_title = false\n[models.local]\nname = "gpt-4o"\nbase_url = "{server.base_url}"\n'
        "input_price = 0\noutput_price = 0\n"
    )
    server.script(text("Free."), text("Paid."))
    code, result, _ = json_run("hello", "-m", "local", cwd=project)
    assert (code, result["cost_usd"], result["cost_complete"]) == (0, 0.0, True)
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test"}
    done = run_cli("-p", "hello", "-m", "openai-chat:gpt-4o", "--output-format", "json", cwd=project, env=env)
    result = json.loads(done.stdout)
    assert (done.returncode, result["cost_complete"]) == (0, True), done.stderr
    assert result["cost_usd"] == pytest.approx(cost_of(server.requests[1:]), rel=1e-9)
    assert result["cost_usd"] > 0


def test_a_file_defined_delegates_requests_are_its_kind_and_its_sessions(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server)
    agents = project / ".code-puppy" / "agents"
    agents.mkdir(parents=True)
    (agents / "reviewer.md").write_text("---\nname: reviewer\ndescription: Reviews code.\n---\nReview carefully.\n")
    server.script(
        tool_calls(call("delegate_task", {"agent_name": "reviewer", "task": "review the readme"})),
        text("Looks fine."),
        text("Reviewed."),
    )
    code, result, stderr = json_run("get it reviewed", "--permission-mode", "yolo", cwd=project)
    assert (code, result["output"]) == (0, "Reviewed."), stderr
    assert "Review carefully." in json.dumps(server.requests[1].body)  # the reviewer's own run
    assert [(row[0], row[1]) for row in request_rows(code_puppy_home)] == [
        (result["session_id"], "main"),
        (result["session_id"], "delegate"),
        (result["session_id"], "main"),
    ]
    assert result["cost_usd"] == pytest.approx(cost_of(server.requests))


def test_one_price_without_the_other_is_a_config_error(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server, "input_price = 1.0\n")
    done = run_cli("-p", "hello", "-m", "fake", cwd=project)
    assert done.returncode == 2 and not server.requests
    assert done.stderr.strip().endswith(
        "'models.fake': set both input_price and output_price (US dollars per million tokens), or neither"
    )
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_session_total_covers_continuations_and_delegated_runs(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server)
    server.script(
        tool_calls(call("delegate_task", {"agent_name": "self", "task": "read the readme"})),
        text("The sub-agent's answer."),
        text("Delegated and done."),
    )
    code, first, _ = json_run("delegate it", "--permission-mode", "yolo", cwd=project)
    assert (code, first["output"]) == (0, "Delegated and done.")
    server.script(text("Continued."))
    code, second, _ = json_run("go on", "-c", cwd=project)
    assert (code, second["session_id"]) == (0, first["session_id"])
    assert len(server.requests) == 4
    assert first["cost_usd"] == pytest.approx(cost_of(server.requests[:3]))
    assert second["cost_usd"] == pytest.approx(cost_of(server.requests[3:]))
    rows = request_rows(code_puppy_home)
    assert [row[1] for row in rows] == ["main", "delegate", "main", "main"]
    assert {row[0] for row in rows} == {first["session_id"]}
    shown = run_cli("sessions", "show", first["session_id"][:8], cwd=project).stdout.splitlines()[1]
    assert shown.startswith("4 requests · ")
    assert shown.endswith(f"${cost_of(server.requests):.4f}")


def test_stream_json_reports_each_request(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    configure(code_puppy_home, server)
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("A demo."))
    done = run_cli("-p", "what is this?", "--output-format", "stream-json", cwd=project)
    events = [json.loads(line) for line in done.stdout.splitlines()]
    requests = [event for event in events if event["type"] == "request"]
    assert [(e["run"], e["kind"], e["model"]) for e in requests] == [(0, "main", "gpt-4o")] * 2
    assert [e["usage"] for e in requests] == [
        {
            "input_tokens": r.input_tokens,
            "output_tokens": r.output_tokens,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
        }
        for r in server.requests
    ]
    assert [e["cost_usd"] for e in requests] == pytest.approx([cost_of([r]) for r in server.requests])
    kinds = [event["type"] for event in events]
    assert kinds.index("request") < kinds.index("tool_call")  # after its request, before the tool runs
    assert events[-1]["cost_usd"] == pytest.approx(cost_of(server.requests))


def test_a_tiny_budget_stops_after_the_first_request(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server)
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("Never sent."))
    code, result, _ = json_run("read it", "--max-budget-usd", "0.000001", cwd=project)
    assert code == 3 and len(server.requests) == 1
    spent = cost_of(server.requests)
    assert result["status"] == "limit"
    assert result["error"] == f"stopped by a limit: budget $0.000001 reached (--max-budget-usd): ${spent:.4f} spent"
    assert result["cost_usd"] == pytest.approx(spent)
    # Checkpointed as any stopped run: the tool call and its result are in the session.
    exported = json.loads(run_cli("sessions", "export", result["session_id"], cwd=project).stdout)
    assert [m["kind"] for m in exported["messages"]] == ["request", "response", "request"]


def test_a_budget_spent_exactly_stops_the_next_request(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server, "input_price = 1.0\noutput_price = 4.0\n")  # priced as cost_of prices it
    read_it = tool_calls(call("read_file", {"path": "README.md"}))
    server.script(read_it, text("Done."))
    assert json_run("read it", "-m", "fake", cwd=project)[0] == 0
    first = cost_of(server.requests[:1], (1.0, 4.0))
    server.script(read_it, text("Never sent."))
    code, result, _ = json_run("read it", "-m", "fake", "--max-budget-usd", repr(first), cwd=project)
    assert (server.requests[2].input_tokens, server.requests[2].output_tokens) == (
        server.requests[0].input_tokens,
        server.requests[0].output_tokens,
    )  # the same first request: it spends the budget to the last bit
    assert (code, len(server.requests), result["status"]) == (3, 3, "limit")
    assert result["cost_usd"] == pytest.approx(first)


SUMMARY_PRICE = (100_000.0, 100_000.0)
"""What `summarizing` has its summary model cost: one summary spends any small budget."""


def summarizing(home: Path, server: FakeLLMServer, *keeps: int) -> None:
    """`main` (priced, a window every request passes 60% of) and a `summarize_older_turns` for each of `keeps`,
    writing on `pricey`."""
    processors = ", ".join(
        f'{{ path = "code_puppy.history:summarize_older_turns", args = {{ keep = {keep} }} }}' for keep in keeps
    )
    (home / "config.toml").write_text(
        f'model = "main"\n[sessions]\nauto_title = false\n'
        f'[models.main]\nname = "main-model"\nbase_url = "{server.base_url}"\ncontext_window = 1000\n'
        "input_price = 1\noutput_price = 1\n"
        f'[models.pricey]\nname = "pricey-model"\nbase_url = "{server.base_url}"\n'
        f"input_price = {SUMMARY_PRICE[0]}\noutput_price = {SUMMARY_PRICE[1]}\n"
        f'[history]\ncompaction = "off"\nsummary_model = "pricey"\nprocessors = [{processors}]\n'
    )


def test_a_summary_that_spends_the_budget_stops_the_run(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    summarizing(code_puppy_home, server, 0)
    server.script(text("a1"), text("The summary."), text("Never sent."))
    assert run_cli("-p", "q1", cwd=project).returncode == 0
    code, result, stderr = json_run("q2", "-c", "--max-budget-usd", "0.01", cwd=project)
    assert [r.body["model"] for r in server.requests] == ["main-model", "pricey-model"]  # the turn's own never went
    spent = cost_of(server.requests[1:], SUMMARY_PRICE)
    assert (code, result["status"], stderr) == (3, "limit", "")
    assert result["error"] == f"stopped by a limit: budget $0.01 reached (--max-budget-usd): ${spent:.2f} spent"
    assert result["cost_usd"] == pytest.approx(spent)
    rows = request_rows(code_puppy_home)
    assert [(row[1], row[2]) for row in rows] == [("main", "main-model"), ("summary", "pricey-model")]
    assert rows[1][3] == pytest.approx(spent)


def test_a_summary_refused_by_the_budget_stops_the_run_as_a_limit(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    server.script(text("a1"), text("a2"))
    configure(code_puppy_home, server)
    assert run_cli("-p", "q1", "-m", "fake", cwd=project).returncode == 0
    assert run_cli("-p", "q2", "-c", "-m", "fake", cwd=project).returncode == 0
    # The first processor summarizes q1; the budget that summary spent refuses the second one's summary.
    summarizing(code_puppy_home, server, 1, 0)
    server.script(text("The summary of q1."), text("Never sent."))
    code, result, stderr = json_run("q3", "-c", "--max-budget-usd", "0.01", cwd=project)
    assert [r.body["model"] for r in server.requests[2:]] == ["pricey-model"]
    spent = cost_of(server.requests[2:], SUMMARY_PRICE)
    assert (code, result["status"], stderr) == (3, "limit", "")  # not the summary's failure: the budget's stop
    assert result["error"] == f"stopped by a limit: budget $0.01 reached (--max-budget-usd): ${spent:.2f} spent"


def test_a_budget_refuses_a_model_without_a_price(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    configure(code_puppy_home, server)
    done = run_cli("-p", "hello", "-m", "fake", "--max-budget-usd", "1", cwd=project)
    assert done.returncode == 2 and not server.requests
    assert done.stderr == (
        "code-puppy: error: model fake has no known price, so a budget cannot be kept; give its [models.NAME] entry "
        'input_price and output_price, or set [budget] unknown_price = "allow"\n'
    )
    configure(code_puppy_home, server, '[budget]\nunknown_price = "allow"\n')
    server.script(text("Allowed."))
    done = run_cli("-p", "hello", "-m", "fake", "--max-budget-usd", "1", cwd=project)
    assert (done.returncode, done.stdout) == (0, "Allowed.\n")


def test_the_daily_budget_counts_every_process(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    configure(code_puppy_home, server)
    server.script(text("First process."))
    assert run_cli("-p", "hello", cwd=project).returncode == 0
    first = cost_of(server.requests)
    # The second process alone would stay under this after its first request; with the first process's, it is over.
    configure(code_puppy_home, server, f"[budget]\nper_day_usd = {first * 1.5}\n")
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("Never sent."))
    code, result, _ = json_run("hello", cwd=project)
    assert (code, len(server.requests)) == (3, 2)
    assert result["error"].startswith("stopped by a limit: budget $")
    assert "([budget] per_day_usd)" in result["error"]


def test_eighty_percent_of_a_budget_is_said_once(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    configure(code_puppy_home, server)
    server.script(text("Measure."))
    run_cli("-p", "hello", cwd=project)
    one = cost_of(server.requests)
    server.script(
        tool_calls(call("read_file", {"path": "README.md"})),
        tool_calls(call("read_file", {"path": "README.md"})),
        text("Done."),
    )
    done = run_cli("-p", "hello", "--max-budget-usd", f"{one / 0.85:.8f}", cwd=project)
    notes = [line for line in done.stderr.splitlines() if "of the budget" in line]
    assert len(notes) == 1 and notes[0].startswith("code-puppy: note: 8")
    assert done.returncode == 3


def test_usage_file_gets_the_json_result_with_text_output(
    server: FakeLLMServer, project: Path, code_puppy_home: Path, tmp_path: Path
) -> None:
    configure(code_puppy_home, server)
    server.script(text("Plain answer."))
    target = tmp_path / "usage.json"
    done = run_cli("-p", "hello", "--usage-file", str(target), cwd=project)
    assert (done.returncode, done.stdout) == (0, "Plain answer.\n")
    written = json.loads(target.read_text())
    assert (written["output"], written["status"]) == ("Plain answer.", "success")
    assert written["cost_usd"] == pytest.approx(cost_of(server.requests))
    missing = run_cli("-p", "hello", "--usage-file", str(tmp_path / "nope" / "u.json"), cwd=project)
    assert (missing.returncode, missing.stderr) == (
        2,
        f"code-puppy: error: --usage-file: the directory {tmp_path / 'nope'} does not exist\n",
    )
    assert len(server.requests) == 1


def test_usage_flags_need_a_headless_run(project: Path) -> None:
    done = run_cli("--usage-file", "u.json", cwd=project)
    assert (done.returncode, done.stderr) == (
        2,
        "code-puppy: error: --usage-file writes a headless run's result: use it with -p PROMPT\n",
    )
    done = run_cli("-p", "x", "--max-budget-usd", "0", cwd=project)
    assert done.returncode == 2 and "--max-budget-usd" in done.stderr and "Traceback" not in done.stderr


def test_usage_sums_by_day_and_model(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    configure(code_puppy_home, server)
    server.script(text("Priced."), text("Unpriced."))
    run_cli("-p", "one", cwd=project)
    run_cli("-p", "two", "-m", "fake", cwd=project)
    priced = cost_of(server.requests[:1])
    report = json.loads(run_cli("usage", "--json", cwd=project).stdout)
    # --output-format json, as every other command with JSON output spells it, is the same object.
    assert json.loads(run_cli("usage", "--output-format", "json", cwd=project).stdout) == report
    assert [(d["model"], d["requests"], d["cost_complete"]) for d in report["days"]] == [
        ("fake-model", 1, False),
        ("gpt-4o", 1, True),
    ]
    assert report["days"][0]["cost_usd"] is None
    assert report["total"]["cost_usd"] == pytest.approx(priced)
    assert report["total"]["input_tokens"] == sum(r.input_tokens for r in server.requests)
    lines = run_cli("usage", "--since", "7d", cwd=project).stdout.splitlines()
    assert lines[0].split() == ["DAY", "MODEL", "REQS", "INPUT", "OUTPUT", "CACHED", "COST"]
    assert lines[1].endswith("cost unknown") and lines[2].endswith(f"${priced:.4f}")
    assert lines[3].startswith("total") and lines[3].endswith(f"at least ${priced:.4f}")
    other = project.parent / "other"
    other.mkdir()
    assert run_cli("usage", "--project", str(other), cwd=project).stdout == "no model requests recorded\n"
    bad = run_cli("usage", "--since", "yesterday", cwd=project)
    assert (bad.returncode, bad.stderr) == (
        2,
        "code-puppy: error: --since: expected an age like 24h, 7d or 2w, or a date like 2026-11-01; got 'yesterday'\n",
    )


def test_a_fork_shows_what_it_spent_itself(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    configure(code_puppy_home, server)
    server.script(text("Base answer."), text("Fork answer."))
    code, base, _ = json_run("the shared start", cwd=project)
    assert code == 0
    with SqliteConversationStore(code_puppy_home / "sessions.db") as store:
        fork = asyncio.run(Session.fork(store, store.sessions.find(base["session_id"])[0], model=None)).id

    def costs() -> dict[str, str]:
        lines = run_cli("sessions", "list", cwd=project).stdout.splitlines()[1:]
        return {line.split()[0]: line.split()[4] for line in lines}

    # Its own spending, none yet: the turns it copied are counted once, in its source.
    assert costs() == {fork[:8]: "$0.0000", base["session_id"][:8]: f"${base['cost_usd']:.4f}"}
    shown = run_cli("sessions", "show", fork, cwd=project).stdout.splitlines()
    assert shown[2] == "0 requests · 0 input / 0 output tokens · $0.0000 (the turns it copied count in their source)"
    code, forked, _ = json_run("go on", "-r", fork, cwd=project)
    assert code == 0 and forked["cost_usd"] > 0
    assert costs() == {fork[:8]: f"${forked['cost_usd']:.4f}", base["session_id"][:8]: f"${base['cost_usd']:.4f}"}


def test_a_database_from_before_costs_keeps_its_sessions(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server)
    server.script(text("Old answer."))
    assert run_cli("-p", "from the old days", cwd=project).returncode == 0
    # Make it a database as the code before costs left it: no requests table, its migration never applied.
    with sqlite3.connect(code_puppy_home / "sessions.db") as db:
        db.execute("DROP TABLE requests")
        db.execute("DELETE FROM schema_migrations WHERE name IN ('m005_request_costs', 'm009_cache_savings')")
    listed = run_cli("sessions", "list", cwd=project)  # read-only: it does not migrate
    assert listed.returncode == 0 and listed.stdout.splitlines()[1].split()[-5:] == [
        "unknown",
        "from",
        "the",
        "old",
        "days",
    ]
    server.script(text("New answer."))
    code, result, _ = json_run("and now", "-c", cwd=project)
    assert (code, result["output"]) == (0, "New answer.")
    exported = json.loads(run_cli("sessions", "export", result["session_id"], cwd=project).stdout)
    assert len(exported["messages"]) == 4  # the old exchange is kept
    assert [row[1] for row in request_rows(code_puppy_home)] == ["main"]
    with sqlite3.connect(code_puppy_home / "sessions.db") as db:
        assert migrate(db, MIGRATIONS) == []


def test_a_repaired_database_keeps_what_was_spent(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    from code_puppy.sessions.repair import repair

    configure(code_puppy_home, server)
    server.script(text("Spent."))
    assert run_cli("-p", "hello", cwd=project).returncode == 0
    before = request_rows(code_puppy_home)
    repair(code_puppy_home / "sessions.db")  # what `sessions repair` does to a damaged one
    assert request_rows(code_puppy_home) == before and len(before) == 1
