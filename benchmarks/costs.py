"""What pricing and recording costs per model request (issue 16): `Spending.check` before a request and
`Spending.record` after it, on a real sessions.db.

    python benchmarks/costs.py [--requests 200] [--rows 100000]

`record` prices a gpt-4o response through pydantic-ai's `ModelResponse.cost()` (genai-prices) and inserts its row;
`check` runs with every budget set, so it reads the session's and the day's totals from the store. Measured on an
empty store and on one already holding `--rows` request rows; the median and the 90th percentile per request, in
milliseconds, and the one-off time to load the price table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import RequestUsage

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from code_puppy.cost.spending import Budgets, Spending
from code_puppy.sessions.store import SqliteConversationStore


def measure(store: SqliteConversationStore, requests: int) -> tuple[list[float], list[float]]:
    model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(base_url="http://127.0.0.1:9/v1", api_key="x"))
    budgets = Budgets(max_usd=1e9, per_turn_usd=1e9, per_session_usd=1e9, per_day_usd=1e9)
    spending = Spending(budgets=budgets, book=store.costs, project_dir=Path.cwd())
    spending.begin_turn("benchmark-session")
    response = ModelResponse(
        parts=[TextPart("ok")],
        usage=RequestUsage(input_tokens=12_000, output_tokens=300),
        model_name="gpt-4o",
        provider_name="openai",
    )
    checks: list[float] = []
    records: list[float] = []
    for _ in range(requests):
        started = time.perf_counter()
        spending.check(model)
        checked = time.perf_counter()
        spending.record("main", model, response, run_id="run")
        checks.append((checked - started) * 1000)
        records.append((time.perf_counter() - checked) * 1000)
    return checks, records


def summary(label: str, values: list[float]) -> str:
    p90 = statistics.quantiles(values, n=10)[-1]
    return f"{label:<44}{statistics.median(values):7.2f} ms median {p90:7.2f} ms p90"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    started = time.perf_counter()
    Spending().priceable(OpenAIChatModel("gpt-4o", provider=OpenAIProvider(api_key="x")))
    print(f"{'load the price table (once per process)':<44}{(time.perf_counter() - started) * 1000:7.2f} ms")
    with tempfile.TemporaryDirectory() as directory, SqliteConversationStore(Path(directory) / "sessions.db") as store:
        checks, records = measure(store, args.requests)
        print(summary("check, empty store", checks))
        print(summary("record, empty store", records))
        with store.database.write() as db:
            db.executemany(
                "INSERT INTO requests (session_id, kind, model, input_tokens, output_tokens, cache_read_tokens, "
                "cache_write_tokens, cost_usd, created_at) VALUES (?, 'main', 'gpt-4o', 1000, 100, 0, 0, 0.01, "
                "strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
                [(f"s{i % 1000}",) for i in range(args.rows)],
            )
        checks, records = measure(store, args.requests)
        print(f"{f'first check, {args.rows:,} rows today':<44}{checks[0]:7.2f} ms (the day is read once per process)")
        print(summary(f"check, {args.rows:,} rows today", checks[1:]))
        print(summary(f"record, {args.rows:,} rows today", records))


if __name__ == "__main__":
    main()
