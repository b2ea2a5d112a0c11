"""`--compat claude`: a headless run's `json` and `stream-json` output in Claude Code's headless schema (the messages
`claude -p --output-format stream-json` writes), so scripts and CI actions written for `claude -p` read it unchanged.

`stream-json` is a `system` message of subtype `init`, then an `assistant` message per finished content block (text,
thinking, tool_use) and a `user` message per tool result, then the `result` message; `json` is the `result` message
alone. The fields and their types follow the public Claude Agent SDK's message types
(tests/fixtures/claude_sdk/README.md names the sources).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, TextIO

from pydantic_ai.messages import (
    AgentStreamEvent,
    FunctionToolResultEvent,
    PartEndEvent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
)

from code_puppy import __version__
from code_puppy.core.events import RunOutcome
from code_puppy.core.project import Project
from code_puppy.definitions.file_commands import load_commands
from code_puppy.options import CLAUDE_MODES
from code_puppy.sessions.costs import CostTotals, RequestCost

_CLAUDE_NAMES = {ours: theirs for theirs, ours in CLAUDE_MODES.items()}
"""Our permission modes by Claude Code's names for them; `auto` is `auto` in both."""


@dataclass
class ClaudeSink:
    """Claude Code's headless messages on `out`: the `result` message alone (`json`), or every message (`stream`).

    A note on stderr says when `total_cost_usd` leaves requests out because their model has no known price.
    """

    stream: bool
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    project: Project | None = None
    """The project the run is in, for the `init` message (its model, mode, tools), once it is open."""
    _session_id: str = ""
    _initialized: bool = False
    _message_id: str | None = None
    """The assistant message (one model response) the next finished block belongs to."""
    _calls: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict[str, tuple[str, dict[str, Any]]])
    """The tool calls the model made, by id: what a denial names."""
    _denials: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    _models: dict[str, CostTotals] = field(default_factory=dict[str, CostTotals])
    _windows: dict[str, int] = field(default_factory=dict[str, int])
    """Each model's context window, as `modelUsage` shows it (0: unknown)."""
    _api_seconds: float = 0.0
    _request_could_start: float = field(default_factory=time.monotonic)
    """When the next model request could start: the run began, a tool returned, or the previous request ended."""

    def _emit(self, message: dict[str, Any]) -> None:
        print(json.dumps(message, default=str), file=self.out, flush=True)

    def _message(self, type: str, **fields: Any) -> None:
        if self.stream:
            self._emit({"type": type, **fields, "session_id": self._session_id, "uuid": str(uuid.uuid4())})

    def start(self, session_id: str) -> None:
        self._session_id = session_id

    def run_started(self, index: int) -> None:
        self._request_could_start = time.monotonic()
        self._message_id = None
        if not self._initialized:
            self._init(built=True)

    def _init(self, *, built: bool) -> None:
        """The `init` message: once, before anything else; when the agent is `built` (the first run starts), it names
        its tools."""
        self._initialized = True
        project = self.project
        if not self.stream or project is None:
            return
        model = project.model()
        self._message(
            "system",
            subtype="init",
            cwd=os.getcwd(),
            tools=_tool_names(project) if built else [],
            mcp_servers=[{"name": name, "status": "pending"} for name in project.settings.mcp_servers],
            model=model.model_name,
            permissionMode=_CLAUDE_NAMES.get(project.mode, project.mode),
            slash_commands=[command.name for command in load_commands(project.root).items],
            apiKeySource=_KEY if model.system == "anthropic" and _KEY in os.environ else "none",
            claude_code_version=__version__,
            output_style="default",
            agents=[definition.name for definition in project.agent_definitions.items],
            skills=sorted(project.skill_names),
            plugins=[
                {"name": plugin.name, "path": plugin.location}
                for plugin in project.plugins.plugins
                if plugin.status == "enabled"
            ],
        )

    def event(self, event: AgentStreamEvent) -> None:
        if isinstance(event, PartEndEvent):
            block = self._block(event.part)
            if block is not None:
                self._assistant(block)
        elif isinstance(event, FunctionToolResultEvent):
            self._request_could_start = time.monotonic()
            part = event.part
            if part.outcome == "denied":
                name, args = self._calls.get(part.tool_call_id, (part.tool_name, {}))
                self._denials.append({"tool_name": name, "tool_use_id": part.tool_call_id, "tool_input": args})
            result = {
                "type": "tool_result",
                "tool_use_id": part.tool_call_id,
                "content": part.model_response_str(),
                "is_error": part.outcome != "success",
            }
            self._message("user", message={"role": "user", "content": [result]}, parent_tool_use_id=None)

    def _block(self, part: Any) -> dict[str, Any] | None:
        if isinstance(part, TextPart):
            return {"type": "text", "text": part.content} if part.content else None
        if isinstance(part, ThinkingPart):
            return {"type": "thinking", "thinking": part.content, "signature": part.signature or ""}
        if isinstance(part, ToolCallPart):
            try:
                args = part.args_as_dict()
            except ValueError:  # arguments that are not JSON: what the model wrote
                args = {"arguments": part.args}
            self._calls[part.tool_call_id] = (part.tool_name, args)
            return {"type": "tool_use", "id": part.tool_call_id, "name": part.tool_name, "input": args}
        return None

    def _assistant(self, block: dict[str, Any]) -> None:
        """One finished block as an assistant message; the blocks of one model response share the message's id, and
        its usage and stop reason are not final (the `result` message has the totals), as Claude Code's are."""
        if self._message_id is None:
            self._message_id = f"msg_{uuid.uuid4().hex[:24]}"
        model = self.project.model().model_name if self.project is not None else ""
        message = {
            "id": self._message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [block],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        self._message("assistant", message=message, parent_tool_use_id=None)

    def request(self, cost: RequestCost) -> None:
        now = time.monotonic()
        self._api_seconds += now - self._request_could_start
        self._request_could_start = now
        self._message_id = None
        self._models[cost.model] = self._models.get(cost.model, CostTotals()) + CostTotals.of(cost)
        if self.project is not None and not self._windows.get(cost.model):
            self._windows[cost.model] = _context_window(self.project, cost.model)

    def warning(self, text: str) -> None:
        print(f"code-puppy: note: {text}", file=self.err, flush=True)

    def finish(self, outcome: RunOutcome) -> None:
        if self._session_id and not self._initialized:
            self._init(built=False)
        self._emit(self._result(outcome))
        if unpriced := [name for name, used in self._models.items() if used.unpriced]:
            names = ", ".join(unpriced)
            print(
                f"code-puppy: note: total_cost_usd leaves out the requests to {names}: no price is known for it"
                " (give its [models.NAME] entry input_price and output_price)",
                file=self.err,
                flush=True,
            )

    def _result(self, outcome: RunOutcome) -> dict[str, Any]:
        """The `result` message: `success` with the answer in `result`, or an error subtype with `errors`."""
        usage = outcome.usage
        subtype = _subtype(outcome, self.project)
        ended: dict[str, Any] = {
            "type": "result",
            "subtype": subtype,
            "is_error": subtype != "success",
            "duration_ms": outcome.duration_ms,
            "duration_api_ms": round(self._api_seconds * 1000),
            "num_turns": usage.requests,
        }
        if subtype == "success":
            ended["result"] = outcome.output or ""
        else:
            ended["errors"] = [outcome.error or outcome.status]
        cache_read, cache_write = usage.cache_read_tokens, usage.cache_write_tokens
        ended |= {
            "stop_reason": None,
            "session_id": outcome.session_id or "",
            "total_cost_usd": outcome.cost_usd or 0.0,
            # Anthropic's `input_tokens` leaves out the tokens read from and written to the cache; ours counts them.
            "usage": {
                "input_tokens": max(0, usage.input_tokens - cache_read - cache_write),
                "cache_creation_input_tokens": cache_write,
                "cache_read_input_tokens": cache_read,
                "output_tokens": usage.output_tokens,
                "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
                "service_tier": "standard",
                "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": cache_write},
            },
            "modelUsage": {
                name: {
                    "inputTokens": max(0, used.input_tokens - used.cache_read_tokens - used.cache_write_tokens),
                    "outputTokens": used.output_tokens,
                    "cacheReadInputTokens": used.cache_read_tokens,
                    "cacheCreationInputTokens": used.cache_write_tokens,
                    "webSearchRequests": 0,
                    "costUSD": used.priced_usd,
                    "contextWindow": self._windows.get(name, 0),
                    "maxOutputTokens": 0,
                }
                for name, used in self._models.items()
            },
            "permission_denials": self._denials,
            "uuid": str(uuid.uuid4()),
        }
        if (reason := _TERMINAL_REASONS.get(subtype)) is not None and outcome.status in ("success", "limit"):
            ended["terminal_reason"] = reason
        return ended


_KEY = "ANTHROPIC_API_KEY"
_TERMINAL_REASONS = {"success": "completed", "error_max_turns": "max_turns", "error_max_budget_usd": "budget_exhausted"}


def _subtype(outcome: RunOutcome, project: Project | None) -> str:
    """Claude Code's `subtype` for how the run ended: `--max-turns`/`--max-requests` and a budget have their own."""
    if outcome.status == "success":
        return "success"
    if outcome.status == "limit" and project is not None:
        limit = project.options.max_requests
        if limit is not None and outcome.usage.requests >= limit:
            return "error_max_turns"
        if any(spent >= budget for _, budget, spent in project.spending.standing()):
            return "error_max_budget_usd"
    return "error_during_execution"


def _tool_names(project: Project) -> list[str]:
    """The tools the agent carries, by name (MCP servers' tools join when the servers start, with the first request;
    the permission mode decides which calls run)."""
    names: list[str] = []
    for toolset in project.agent.toolsets:
        toolset.apply(lambda leaf: names.extend(getattr(leaf, "tools", None) or ()))
    return names


def _context_window(project: Project, model_name: str) -> int:
    """The context window of the model requests named `model_name` went to, when pydantic-ai knows it; else 0."""
    model = project.model()
    return (model.context_window or 0) if model.model_name == model_name else 0
