"""What prompt caching saves a long session (issue 27): a 20-request scripted session, run with caching on and off.

    python benchmarks/caching.py [--json]

Four headless turns of one session (`-p`, then `-c`), five model requests each: the model reads files, greps,
edits, runs shell commands, then answers, so the conversation grows with every request. Each runs through the
installed `code-puppy` and the real Anthropic client against the in-repo fake Anthropic server, which reports cache
reads and writes as the real service does (tests/fake_cache.py: the longest prefix written before is read, the rest
up to the request's last breakpoint written, nothing under 1024 tokens cached). The same session is run with
`[run] prompt_cache = false` for the uncached cost.

Printed per request: the input tokens billed at full price, read from the cache and written to it, and the share
read; then each session's cost at claude-sonnet-4-5's prices ($3 input, $0.30 cache read, $3.75 cache write, $15
output per million tokens), as code-puppy priced it (`cost_usd`, from genai-prices). Goal: from the third request
on, at least 90% of the input read from the cache; the cached session at most 0.3x the uncached one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.fake_cache import AnthropicPromptCache
from tests.fake_llm import FakeLLMServer, RecordedRequest, Step, call, text, tool_calls

CODE_PUPPY = Path(sys.executable).parent / "code-puppy"
MODEL = "anthropic:claude-sonnet-4-5"
PRICES = (3.0, 15.0, 0.30, 3.75)
"""US dollars per million input, output, cache-read and cache-write tokens (genai-prices' claude-sonnet-4-5)."""
MIN_CACHEABLE = 1024
"""Anthropic's shortest cacheable prefix for Sonnet, in tokens."""

TURNS: list[tuple[str, list[Step]]] = [
    (
        "what does this project do, and is it tested?",
        [
            tool_calls(call("list_files", {"path": "."})),
            tool_calls(call("read_file", {"path": "inventory.py"})),
            tool_calls(call("grep", {"pattern": "def "})),
            tool_calls(call("shell", {"command": "wc -l inventory.py test_inventory.py"})),
            text("It keeps an inventory of items with quantities and prices; test_inventory.py covers adding items."),
        ],
    ),
    (
        "add a remove_item function",
        [
            tool_calls(call("read_file", {"path": "test_inventory.py"})),
            tool_calls(
                call(
                    "edit_file",
                    {
                        "path": "inventory.py",
                        "old_text": "def total_value(",
                        "new_text": "def remove_item(stock, name):\n    stock.pop(name, None)\n\n\ndef total_value(",
                    },
                )
            ),
            tool_calls(call("grep", {"pattern": "remove_item"})),
            tool_calls(call("shell", {"command": "python -c 'import inventory; print(inventory.remove_item)'"})),
            text("Added `remove_item(stock, name)`, which drops the item if it is there."),
        ],
    ),
    (
        "test it",
        [
            tool_calls(call("read_file", {"path": "inventory.py"})),
            tool_calls(
                call(
                    "write_file",
                    {
                        "path": "test_remove.py",
                        "content": "from inventory import remove_item\n\n\ndef test_remove():\n"
                        "    stock = {'a': (1, 2.0)}\n    remove_item(stock, 'a')\n    assert stock == {}\n",
                    },
                )
            ),
            tool_calls(call("shell", {"command": "python -c 'import test_remove; test_remove.test_remove()'"})),
            tool_calls(call("grep", {"pattern": "assert"})),
            text("test_remove.py checks that a removed item is gone; it passes."),
        ],
    ),
    (
        "summarise what changed",
        [
            tool_calls(call("shell", {"command": "ls -la"})),
            tool_calls(call("read_file", {"path": "test_remove.py"})),
            tool_calls(call("grep", {"pattern": "stock"})),
            tool_calls(call("list_files", {"path": "."})),
            text("inventory.py gained remove_item, and test_remove.py tests it."),
        ],
    ),
]


def make_project(root: Path) -> None:
    """A small Python project with enough code that reading it grows the conversation as real reads do."""
    functions = "\n\n".join(
        f'def helper_{n}(stock, name):\n    """Helper {n}: look up the item in the stock and report it."""\n'
        f"    quantity, price = stock.get(name, (0, 0.0))\n    return f'{{name}}: {{quantity}} at {{price:.2f}}'"
        for n in range(40)
    )
    (root / "inventory.py").write_text(
        '"""An inventory of items: name -> (quantity, unit price)."""\n\n\n'
        "def add_item(stock, name, quantity, price):\n    stock[name] = (quantity, price)\n\n\n"
        "def total_value(stock):\n    return sum(q * p for q, p in stock.values())\n\n\n" + functions + "\n"
    )
    (root / "test_inventory.py").write_text(
        "from inventory import add_item, total_value\n\n\ndef test_add():\n    stock = {}\n"
        "    add_item(stock, 'a', 2, 1.5)\n    assert total_value(stock) == 3.0\n"
    )
    (root / "README.md").write_text("# inventory\n\nA toy inventory module.\n")


def run_session(*, cached: bool) -> tuple[list[RecordedRequest], float]:
    """The scripted session's requests as the fake server billed them, and its cost as code-puppy priced it."""
    with tempfile.TemporaryDirectory() as temp, FakeLLMServer() as fake:
        home, project = Path(temp) / "home", Path(temp) / "project"
        home.mkdir()
        project.mkdir()
        make_project(project)
        config = "[sessions]\nauto_title = false\n[checkpoints]\nenabled = false\n"
        (home / "config.toml").write_text(config + ("" if cached else "[run]\nprompt_cache = false\n"))
        fake.prompt_cache = AnthropicPromptCache(min_tokens=MIN_CACHEABLE)
        env = {
            **os.environ,
            "CODE_PUPPY_HOME": str(home),
            "ANTHROPIC_BASE_URL": fake.anthropic_base_url,
            "ANTHROPIC_API_KEY": "sk-ant-benchmark",
        }
        cost = 0.0
        for index, (prompt, steps) in enumerate(TURNS):
            fake.script(*steps)
            args = [str(CODE_PUPPY), "-p", prompt, "-m", MODEL, "--permission-mode", "yolo", "--output-format", "json"]
            done = subprocess.run(
                [*args, *(["-c"] if index else [])], cwd=project, env=env, capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                raise SystemExit(f"turn {index + 1} failed ({done.returncode}): {done.stderr.strip()}")
            cost += json.loads(done.stdout)["cost_usd"]
        return list(fake.requests), cost


def price(requests: list[RecordedRequest]) -> float:
    full, output, read, write = PRICES
    return (
        sum(
            r.input_tokens * full + r.cache_read_tokens * read + r.cache_write_tokens * write + r.output_tokens * output
            for r in requests
        )
        / 1_000_000
    )


def share(request: RecordedRequest) -> float:
    return request.cache_read_tokens / (request.input_tokens + request.cache_read_tokens + request.cache_write_tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    options = parser.parse_args()
    sessions = {name: run_session(cached=name == "cached") for name in ("cached", "uncached")}
    report: dict[str, Any] = {}
    for name, (requests, cost) in sessions.items():
        report[name] = {
            "requests": len(requests),
            "full_price_input": sum(r.input_tokens for r in requests),
            "cache_read": sum(r.cache_read_tokens for r in requests),
            "cache_write": sum(r.cache_write_tokens for r in requests),
            "output": sum(r.output_tokens for r in requests),
            "cost_usd": round(cost, 6),
            "cost_at_table_prices": round(price(requests), 6),
        }
    cached = sessions["cached"][0]
    later = cached[2:]
    read_later = sum(r.cache_read_tokens for r in later)
    input_later = sum(r.input_tokens + r.cache_read_tokens + r.cache_write_tokens for r in later)
    report["from_third_request"] = {
        "read_share": round(read_later / input_later, 6),
        "lowest_request_share": round(min(share(r) for r in later), 6),
    }
    report["cost_ratio"] = round(report["cached"]["cost_usd"] / report["uncached"]["cost_usd"], 4)
    if options.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{'REQ':>4}{'FULL PRICE':>12}{'CACHE READ':>12}{'WRITTEN':>10}{'READ SHARE':>12}   (caching on)")
    for number, request in enumerate(cached, 1):
        row = f"{request.input_tokens:>12,}{request.cache_read_tokens:>12,}{request.cache_write_tokens:>10,}"
        print(f"{number:>4}{row}{share(request):>12.1%}")
    print()
    for name in ("cached", "uncached"):
        figures = report[name]
        print(
            f"{name:<9} {figures['requests']} requests · input at full price {figures['full_price_input']:,} · "
            f"read from cache {figures['cache_read']:,} · written {figures['cache_write']:,} · "
            f"cost ${figures['cost_usd']:.4f} (table prices: ${figures['cost_at_table_prices']:.4f})"
        )
    later_figures = report["from_third_request"]
    print(
        f"from the 3rd request on: {later_figures['read_share']:.1%} of input read from cache "
        f"(lowest single request {later_figures['lowest_request_share']:.1%}; goal >= 90%)"
    )
    print(f"cost with caching / without: {report['cost_ratio']:.3f}x (goal <= 0.3x)")


if __name__ == "__main__":
    main()
