"""Sixteen headless runs at once on one project and one store: none meets a locked database, every session is kept.

Not timed: benchmarks/parallel_runs.py measures throughput and the store's write latency.
"""

from __future__ import annotations

import json
from pathlib import Path

from code_puppy.sessions.store import SqliteConversationStore
from tests.conftest import start_cli
from tests.fake_llm import FakeLLMServer, call, text, tool_calls

RUNS = 16


def test_sixteen_concurrent_runs_store_every_session_without_a_lock_error(
    project: Path, server: FakeLLMServer, code_puppy_home: Path
) -> None:
    (project / "notes.txt").write_text("notes\n")
    server.per_conversation = True
    server.script(
        tool_calls(call("read_file", {"path": "README.md"})),
        tool_calls(call("read_file", {"path": "notes.txt"})),
        text("A README and notes."),
    )
    timings = code_puppy_home / "store-timings.txt"
    env = {"CODE_PUPPY_STORE_TIMINGS": str(timings)}

    runs = [start_cli("-p", f"run {n}", "--output-format", "json", cwd=project, env=env) for n in range(RUNS)]
    results = [run.communicate(timeout=600) for run in runs]

    for run, (_, stderr) in zip(runs, results, strict=True):
        assert "locked" not in stderr
        assert run.returncode == 0, stderr
    outputs = [json.loads(stdout) for stdout, _ in results]
    assert {(output["output"], output["usage"]["requests"]) for output in outputs} == {("A README and notes.", 3)}
    session_ids = {output["session_id"] for output in outputs}
    assert len(session_ids) == RUNS
    with SqliteConversationStore(code_puppy_home / "sessions.db", readonly=True) as store:
        stored = {info.id: info.message_count for info in store.sessions.recent(project)}
    assert stored == dict.fromkeys(session_ids, 6)
    # The store timed each committed write: total and held milliseconds, and whether it was synced.
    lines = [line.split() for line in timings.read_text().splitlines()]
    assert len(lines) >= RUNS * 3
    assert all(float(total) >= float(held) >= 0 and kind in ("durable", "fast") for total, held, kind in lines)
