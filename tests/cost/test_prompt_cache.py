"""Prompt caching through the installed console script: Anthropic requests against the fake server, which reports
cache reads and writes as the real service does (tests/fake_cache.py), carry cache markers on a byte-stable prefix
and are priced at the price table's cache prices; OpenAI requests carry the session's id as `prompt_cache_key`;
`prompt_cache = false` sends neither; a bad retention is a config error."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models import override_allow_model_requests
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.usage import RequestUsage

from code_puppy.config import ModelEndpoint, Settings
from code_puppy.cost.prompt_cache import prompt_caching
from code_puppy.cost.spending import CostMeter, Spending
from code_puppy.history.compaction import compact_history
from code_puppy.models import resolve_model
from code_puppy.sessions.costs import CostTotals
from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore
from tests.conftest import run_cli
from tests.fake_cache import AnthropicPromptCache, CacheUsage
from tests.fake_llm import FakeLLMServer, RecordedRequest, call, text, tool_calls
from tests.history.history_cases import C, R, T, U
from tests.pty_chat import PtyChat

CLAUDE_PROJECT = Path(__file__).parent.parent / "fixtures" / "claude_project"
"""A project with file-defined agents (tests/test_file_definitions.py)."""
SONNET = "anthropic:claude-sonnet-4-5"
SONNET_PRICES = (3.0, 15.0, 0.30, 3.75)
"""genai-prices' claude-sonnet-4-5: US dollars per million input, output, cache-read and cache-write tokens."""


def anthropic_env(fake: FakeLLMServer) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": fake.anthropic_base_url, "ANTHROPIC_API_KEY": "sk-ant-test"}


def breakpoints(body: dict[str, Any]) -> int:
    """The request's `cache_control` markers: on blocks anywhere, and the top-level automatic one."""
    return json.dumps(body).count('"cache_control"')


def run_json(*args: str, cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    completed = run_cli("-p", *args, "--output-format", "json", cwd=cwd, env=env)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def test_anthropic_requests_cache_a_prefix_that_stays_byte_stable_across_requests_and_turns(
    code_puppy_home: Path, project: Path
) -> None:
    (code_puppy_home / "config.toml").write_text("[sessions]\nauto_title = false\n")
    with FakeLLMServer() as fake:
        fake.prompt_cache = AnthropicPromptCache()
        fake.script(
            tool_calls(call("read_file", {"path": "README.md"})),
            tool_calls(call("grep", {"pattern": "demo"})),
            text("The project is a demo."),
            tool_calls(call("list_files", {"path": "."})),
            text("One file."),
        )
        first = run_json("what is it?", "-m", SONNET, cwd=project, env=anthropic_env(fake))
        second = run_json("and the files?", "-c", "-m", SONNET, cwd=project, env=anthropic_env(fake))
        requests = list(fake.requests)
    assert [first["status"], second["status"], second["session_id"]] == ["success", "success", first["session_id"]]
    bodies = [request.body for request in requests]
    assert len(bodies) == 5
    # Tools and instructions, to the byte, in every request of both turns: the prefix a cache read needs.
    assert {json.dumps(body["tools"]) for body in bodies} == {json.dumps(bodies[0]["tools"])}
    assert {json.dumps(body["system"]) for body in bodies} == {json.dumps(bodies[0]["system"])}
    assert all(body["tools"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "5m"} for body in bodies)
    assert all(body["cache_control"] == {"type": "ephemeral", "ttl": "5m"} for body in bodies)
    assert all(2 <= breakpoints(body) <= 4 for body in bodies)
    # Each request reads what the one before it wrote, and writes only what the conversation added since.
    usages = [CacheUsage(r.input_tokens, r.cache_read_tokens, r.cache_write_tokens) for r in requests]
    assert usages[0].cache_read_tokens == 0 and usages[0].cache_write_tokens > 3000
    for before, after in itertools.pairwise(usages):
        assert after.cache_read_tokens == before.cache_read_tokens + before.cache_write_tokens
        assert 0 < after.cache_write_tokens < 200
    # Priced at the table's cache prices, and reported as such.
    for result, served in ((first, requests[:3]), (second, requests[3:])):
        assert result["usage"]["cache_read_tokens"] == sum(r.cache_read_tokens for r in served)
        assert result["usage"]["cache_write_tokens"] == sum(r.cache_write_tokens for r in served)
        assert result["cost_usd"] == pytest.approx(sum(price(r) for r in served), rel=1e-9)


def price(request: RecordedRequest) -> float:
    full, output, read, write = SONNET_PRICES
    dollars = request.input_tokens * full + request.cache_read_tokens * read + request.cache_write_tokens * write
    return (dollars + request.output_tokens * output) / 1_000_000


@pytest.mark.parametrize("where", ["[run]", "[models.NAME]"])
def test_prompt_cache_false_sends_no_cache_markers(code_puppy_home: Path, project: Path, where: str) -> None:
    with FakeLLMServer() as fake:
        fake.prompt_cache = AnthropicPromptCache()
        config = "[sessions]\nauto_title = false\n"
        if where == "[run]":
            config += "[run]\nprompt_cache = false\n"
        config += (
            f'[models.claude]\nprovider = "anthropic"\nname = "claude-sonnet-4-5"\n'
            f'base_url = "{fake.anthropic_base_url}"\napi_key_env = "FAKE_ANTHROPIC_KEY"\n'
        )
        if where == "[models.NAME]":
            config += "prompt_cache = false\n"
        (code_puppy_home / "config.toml").write_text(config)
        fake.script(tool_calls(call("read_file", {"path": "README.md"})), text("A demo."), text("Still a demo."))
        env = {"FAKE_ANTHROPIC_KEY": "sk-ant"}
        first = run_json("what is it?", "-m", "claude", cwd=project, env=env)
        cached = run_json("again", "-m", SONNET, cwd=project, env=anthropic_env(fake))
        bodies = [request.body for request in fake.requests]
    assert [breakpoints(body) for body in bodies[:2]] == [0, 0]
    assert first["usage"]["cache_read_tokens"] == first["usage"]["cache_write_tokens"] == 0
    # The same config's other model: [run]'s false reaches it, an endpoint's false does not.
    assert breakpoints(bodies[2]) == (0 if where == "[run]" else 2)
    assert cached["status"] == "success"


def test_a_retention_reaches_anthropic_as_its_cache_ttl(code_puppy_home: Path, project: Path) -> None:
    (code_puppy_home / "config.toml").write_text('[sessions]\nauto_title = false\n[run]\nprompt_cache = "1h"\n')
    with FakeLLMServer(text("A demo.")) as fake:
        run_json("what is it?", "-m", SONNET, cwd=project, env=anthropic_env(fake))
        (body,) = [request.body for request in fake.requests]
    assert body["cache_control"] == body["tools"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


@pytest.mark.parametrize("provider", ["openai-chat", "openai-responses"])
def test_openai_requests_carry_the_session_id_as_prompt_cache_key(
    code_puppy_home: Path, project: Path, provider: str
) -> None:
    with FakeLLMServer(text("one"), text("two"), text("three"), text("four")) as fake:
        endpoint = f'provider = "{provider}"\nname = "gpt-fake"\nbase_url = "{fake.base_url}"\n'
        (code_puppy_home / "config.toml").write_text(
            f"[sessions]\nauto_title = false\n[models.gpt]\n{endpoint}[models.plain]\n{endpoint}prompt_cache = false\n"
        )
        first = run_json("hello", "-m", "gpt", cwd=project, env={})
        again = run_json("more", "-c", "-m", "gpt", cwd=project, env={})
        other = run_json("new session", "-m", "gpt", cwd=project, env={})
        plain = run_json("uncached", "-m", "plain", cwd=project, env={})
        keys = [request.body.get("prompt_cache_key") for request in fake.requests]
    sessions = [first["session_id"], again["session_id"], other["session_id"]]
    assert sessions[0] == sessions[1] != sessions[2]
    assert keys == [*sessions, None]
    assert plain["status"] == "success"


@pytest.mark.parametrize("where", ["[run]", "[models.gpt]"])
def test_an_unknown_retention_is_a_one_line_config_error(code_puppy_home: Path, project: Path, where: str) -> None:
    config = code_puppy_home / "config.toml"
    if where == "[run]":
        config.write_text('[run]\nprompt_cache = "2h"\n')
    else:
        config.write_text('[models.gpt]\nname = "gpt"\nprompt_cache = "forever"\n')
    completed = run_cli("-p", "hi", "-m", "openai:gpt-5.1", cwd=project, env={"OPENAI_API_KEY": "sk-test"})
    key, got = ("run.prompt_cache", "'2h'") if where == "[run]" else ("models.gpt.prompt_cache", "'forever'")
    expected = f'code-puppy: error: {config}: \'{key}\': expected true, false, "5m", "30m", "1h" or "12h", got {got}\n'
    assert (completed.returncode, completed.stdout, completed.stderr) == (2, "", expected)


def test_the_fake_cache_reads_the_longest_written_prefix_and_writes_the_rest() -> None:
    cache = AnthropicPromptCache(min_tokens=10)
    tool = {"name": "read_file", "description": "x" * 80, "cache_control": {"type": "ephemeral"}}
    system = [{"type": "text", "text": "y" * 200}]
    first: dict[str, Any] = {"tools": [tool], "system": system, "messages": [{"role": "user", "content": "hi"}]}
    first["cache_control"] = {"type": "ephemeral"}
    prefix = cache.usage(first, 1000)
    assert prefix.cache_read_tokens == 0 and prefix.cache_write_tokens > 70
    assert prefix.input_tokens == 1000 - prefix.cache_write_tokens
    grown = first | {"messages": [*first["messages"], {"role": "assistant", "content": "hello"}]}
    assert cache.usage(grown, 1000).cache_read_tokens == prefix.cache_write_tokens
    # Another system prompt: only the tools' prefix is read back.
    changed = first | {"system": [{"type": "text", "text": "z" * 200}]}
    tools_only = len(json.dumps({k: v for k, v in tool.items() if k != "cache_control"}, separators=(",", ":"))) // 4
    assert cache.usage(changed, 1000).cache_read_tokens == tools_only
    # No markers: nothing cached.
    assert cache.usage({"messages": first["messages"]}, 50) == CacheUsage(50, 0, 0)


def test_an_entry_prices_cache_reads_and_writes_at_its_own_cache_prices() -> None:
    settings = Settings(
        models={
            "cached": ModelEndpoint(
                name="qwen", input_price=2.0, output_price=8.0, cache_read_price=0.2, cache_write_price=2.5
            ),
            "flat": ModelEndpoint(name="qwen", input_price=2.0, output_price=8.0),
        }
    )
    usage = RequestUsage(input_tokens=1_000_000, output_tokens=100_000, cache_read_tokens=600_000)
    usage.cache_write_tokens = 300_000
    response = ModelResponse(parts=[TextPart("ok")], usage=usage, model_name="qwen")
    spending = Spending()
    cached, flat = (resolve_model(settings, name) for name in ("cached", "flat"))
    # 100k uncached at $2, 600k read at $0.2, 300k written at $2.5, 100k out at $8.
    assert spending.price(cached, response) == pytest.approx(0.2 + 0.12 + 0.75 + 0.8)
    assert spending.price(flat, response) == pytest.approx(2.0 + 0.8)
    recorded = spending.record("main", cached, response, run_id="r")
    assert recorded.saved_usd == pytest.approx(2.8 - 1.87)
    assert spending.invocation.describe_cache() == "cache 60% of input · saved $0.9300"
    with pytest.raises(ValidationError, match="cache_read_price and cache_write_price need input_price"):
        ModelEndpoint(name="qwen", cache_read_price=0.1)


def test_a_first_request_that_only_wrote_the_cache_says_what_writing_cost() -> None:
    first = CostTotals(requests=1, input_tokens=3_500, cache_write_tokens=3_400, priced_usd=0.0088, saved_usd=-0.0017)
    assert first.describe_cache() == "cache 0% of input · writing it cost $0.0017 more"


def saved(requests: list[RecordedRequest]) -> float:
    """What caching saved these requests at claude-sonnet-4-5's prices: reads at a tenth, writes at 1.25x."""
    full, _, read, write = SONNET_PRICES
    return sum(r.cache_read_tokens * (full - read) - r.cache_write_tokens * (write - full) for r in requests) / 1e6


def test_usage_reports_the_cache_share_what_it_saved_and_the_history_rewrites(
    code_puppy_home: Path, project: Path
) -> None:
    (code_puppy_home / "config.toml").write_text(
        "[sessions]\nauto_title = false\n[history]\n"
        'processors = [{ path = "code_puppy.history:keep_recent_turns", args = { n = 1 } }]\n'
    )
    with FakeLLMServer() as fake:
        fake.prompt_cache = AnthropicPromptCache()
        fake.script(tool_calls(call("read_file", {"path": "README.md"})), text("A demo."), text("Yes."), text("No."))
        env = anthropic_env(fake)
        run_json("what is it?", "-m", SONNET, cwd=project, env=env)
        run_json("sure?", "-c", "-m", SONNET, cwd=project, env=env)
        run_json("really?", "-c", "-m", SONNET, cwd=project, env=env)  # keeps one turn: the history is rewritten
        requests = list(fake.requests)
    report = json.loads(run_cli("usage", "--json", cwd=project).stdout)
    total = report["total"]
    read, written = sum(r.cache_read_tokens for r in requests), sum(r.cache_write_tokens for r in requests)
    assert (total["cache_read_tokens"], total["cache_write_tokens"]) == (read, written)
    assert total["cache_saved_usd"] == pytest.approx(saved(requests), rel=1e-6)
    assert total["history_rewrites"] == 1
    lines = run_cli("usage", cwd=project).stdout.splitlines()
    share = f"{read / total['input_tokens']:.0%}"
    assert lines[2].split()[:2] == ["total", "4"] and lines[2].split()[-2] == share
    assert lines[3] == (
        f"prompt cache: cache {share} of input · saved ${saved(requests):.4f} · history rewritten 1 time (each a cache "
        "write)"
    )


def test_the_chat_shows_the_cache_share_in_the_turn_line_and_in_usage(code_puppy_home: Path, project: Path) -> None:
    (code_puppy_home / "config.toml").write_text(f'model = "{SONNET}"\n[sessions]\nauto_title = false\n')
    with FakeLLMServer() as fake:
        fake.prompt_cache = AnthropicPromptCache()
        fake.script(tool_calls(call("read_file", {"path": "README.md"})), text("A demo."))
        chat = PtyChat(project, env=anthropic_env(fake))
        try:
            chat.wait_for("session ")
            chat.type("what is it?\r")
            chat.wait_turn("A demo.")
            requests = list(fake.requests)
            share = f"{sum(r.cache_read_tokens for r in requests) / sum(total_input(r) for r in requests):.0%}"
            cache = f"cache {share} of input · saved ${saved(requests):.4f}"
            (closing,) = [line for line in chat.text.splitlines() if line.startswith("· ") and " out · " in line]
            assert closing.endswith(f" · {cache}")
            chat.type("/usage\r")
            screen = chat.wait_for("this chat: ")
            assert f"prompt cache: {cache} · history rewritten 0 times (each a cache write)" in screen
        finally:
            chat.close()


def total_input(request: RecordedRequest) -> int:
    return request.input_tokens + request.cache_read_tokens + request.cache_write_tokens


class ForgetfulCache(AnthropicPromptCache):
    """A cache that is emptied before the third request, as an expiry would."""

    calls: int = 0

    def usage(self, body: dict[str, Any], total_tokens: int) -> CacheUsage:
        self.calls += 1
        if self.calls == 3:
            self.written.clear()
        return super().usage(body, total_tokens)


def test_a_collapsed_cache_read_is_told_in_one_line(code_puppy_home: Path, project: Path) -> None:
    (code_puppy_home / "config.toml").write_text("[sessions]\nauto_title = false\n")
    with FakeLLMServer() as fake:
        fake.prompt_cache = ForgetfulCache()
        fake.script(
            tool_calls(call("read_file", {"path": "README.md"})),
            tool_calls(call("grep", {"pattern": "demo"})),
            text("The project is a demo."),
        )
        completed = run_cli("-p", "what is it?", "-m", SONNET, cwd=project, env=anthropic_env(fake))
        established = fake.requests[1].cache_read_tokens + fake.requests[1].cache_write_tokens
    assert completed.returncode == 0, completed.stderr
    (line,) = [line for line in completed.stderr.splitlines() if "prompt cache" in line]
    assert line == (
        "code-puppy: note: prompt cache: cache hit collapsed at model request 3: read 0 cached tokens but a prior "
        f"request established ~{established} (~{established} tokens re-sent uncached) (the cached prefix changed, or "
        "the cache expired)"
    )


def test_a_tool_loop_with_a_plan_reads_its_conversation_back_from_the_cache(
    code_puppy_home: Path, project: Path
) -> None:
    (code_puppy_home / "config.toml").write_text("[sessions]\nauto_title = false\n")
    with FakeLLMServer() as fake:
        fake.prompt_cache = AnthropicPromptCache()
        fake.script(
            tool_calls(call("write_plan", {"items": [{"content": "look"}, {"content": "answer"}]})),
            tool_calls(call("read_file", {"path": "README.md"})),
            tool_calls(call("grep", {"pattern": "demo"})),
            tool_calls(call("list_files", {"path": "."})),
            text("A demo."),
        )
        run_json("what is it?", "-m", SONNET, cwd=project, env=anthropic_env(fake))
        requests = list(fake.requests)
    # The plan's reminder follows the cache breakpoint, so once the plan is there (the second request changes the
    # system prompt once), each request reads all the one before it wrote but that request's reminder.
    assert all("<plan-reminder>" in json.dumps(request.body["messages"][-1]) for request in requests[1:])
    for before, after in itertools.pairwise(requests[1:]):
        reminder = {"role": "user", **before.body["messages"][-1]["content"][-1]}
        reminder_tokens = len(json.dumps(reminder, separators=(",", ":"))) // 4
        assert after.cache_read_tokens == before.cache_read_tokens + before.cache_write_tokens - reminder_tokens
    assert all(breakpoints(request.body) <= 4 for request in requests)


async def test_a_summary_request_caches_its_prefix_too(project: Path, store: SqliteConversationStore) -> None:
    session = await Session.start(store, project, model="claude")
    await session.set_message_history([U("q1"), C("c1"), R("c1"), T("a1", model_name="m"), U("q2"), T("a2")])
    with FakeLLMServer(text("The summary.")) as fake, override_allow_model_requests(True):
        fake.prompt_cache = AnthropicPromptCache()
        provider = AnthropicProvider(api_key="sk-ant", base_url=fake.anthropic_base_url)
        async with provider:  # closes its HTTP client, which would otherwise leak a socket into a later test
            report = await compact_history(
                session,
                AnthropicModel("claude-sonnet-4-5", provider=provider),
                keep_messages=2,
                summary_capabilities=[*prompt_caching(True), CostMeter(Spending())],
            )
        (body,) = [request.body for request in fake.requests]
    assert report.changed and session.cache_epoch == 1
    assert body["cache_control"] == {"type": "ephemeral", "ttl": "5m"}


def test_a_delegated_run_keys_its_requests_by_the_session_too(server: FakeLLMServer, tmp_path: Path) -> None:
    project = tmp_path / "claude_project"
    shutil.copytree(CLAUDE_PROJECT, project)
    server.script(
        tool_calls(call("delegate_task", {"agent_name": "reviewer", "task": "review the last change"})),
        text("No findings."),
        text("The reviewer found nothing."),
    )
    result = run_json("review", cwd=project, env={})
    keys = [request.body.get("prompt_cache_key") for request in server.requests]
    assert "You are the agent 'reviewer'" in json.dumps(server.requests[1].body)  # the delegate's request
    assert keys == [result["session_id"]] * 3
