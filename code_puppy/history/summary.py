"""`summarize_older_turns`: finished turns older than the last few become one summary, written by a separate model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated

from pydantic import Field, validate_call
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import UsageLimits

from code_puppy.cost.spending import BudgetReached
from code_puppy.errors import one_line, say
from code_puppy.history.groups import HistoryGroup
from code_puppy.history.processing import HistoryProcessorContext
from code_puppy.history.processors import STRICT, Fraction

SUMMARY_HEADER = "[Summary of the earlier conversation, written by code-puppy in place of the turns it covers]"
"""How a summary request starts: the model reads it as a summary, and the next summary folds it in."""
SUMMARY_ACK = "Understood. I will continue from this summary."
"""The text response that closes a summary's group, so the summary is a finished turn like any other."""
SUMMARY_INSTRUCTIONS = (
    "You summarize the earlier part of a conversation between a user and a coding agent, so that the agent can "
    "continue without it. Keep what the agent will need: the user's goals and decisions, files and commands that "
    "mattered and what they showed, changes made, open problems and next steps. Be factual and concise; write no "
    "preamble."
)
TOOL_RESULT_CHARS = 2_000
"""Characters of each tool result the summarizer is shown."""


@dataclass(frozen=True)
class SummarizeOlderTurns:
    """Once the request passes `trigger_fraction` of the context window, replaces every finished turn older than the
    last `keep` with one summary: a user-text request that says it is a summary, and a text response.

    The summary is written by a separate agent without history processors or tools, on `model` (resolved through
    code-puppy's models), else `[history] summary_model`, else the session's model. Its usage is added to the run's,
    so the session counts it (a request towards `--max-requests` too). A summary that fails leaves the history as it
    is and says so in one line; the run goes on, and the summary is not tried again in that run. While the window is
    unknown, nothing is summarized. A history whose only older turn is an earlier summary is left alone, so a request
    estimate that stays high after a summary does not summarize again.
    """

    keep: int = 4
    model: str | None = None
    trigger_fraction: float = 0.6
    _failed: set[str | None] = field(default_factory=set[str | None], init=False, repr=False, compare=False)
    """Runs in which a summary failed."""

    @property
    def model_names(self) -> tuple[str, ...]:
        """The model this processor calls by name, checked at start-up."""
        return (self.model,) if self.model is not None else ()

    async def __call__(self, ctx: HistoryProcessorContext) -> list[ModelMessage]:
        unchanged = list(ctx.messages)
        window = ctx.context_window
        if window is None or ctx.estimated_request_tokens <= self.trigger_fraction * window:
            return unchanged
        eligible = [group for group in ctx.groups if group.eligible]
        older = eligible[: max(len(eligible) - self.keep, 0)]
        if all(_is_summary(ctx.messages[group.entry_start]) for group in older):
            return unchanged
        run_id = ctx.run_context.run_id
        if run_id in self._failed:
            return unchanged
        model = ctx.resolve_model(self.model) if self.model is not None else ctx.summary_model
        limits = ctx.run_context.usage_limits
        if limits is not None and limits.request_limit is not None:
            # The run's own pending request was allowed already: the summary must not spend it.
            limits = replace(limits, request_limit=max(0, limits.request_limit - 1))
        agent = Agent(
            model,
            instructions=SUMMARY_INSTRUCTIONS,
            name="summarize_older_turns",
            capabilities=list(ctx.summary_capabilities),
        )
        try:
            result = await agent.run(
                _transcript(ctx.messages, older),
                usage=ctx.run_context.usage,
                usage_limits=limits or UsageLimits(request_limit=None),
            )
        except BudgetReached:
            raise  # a spent budget stops the run; going on without the summary would not
        except Exception as exc:
            self._failed.add(run_id)
            say(
                f"note: summarize_older_turns: the summary failed ({type(exc).__name__}: {one_line(exc)}); "
                "the history is left as it was"
            )
            return unchanged
        summary = [
            ModelRequest(parts=[UserPromptPart(f"{SUMMARY_HEADER}\n\n{result.output.strip()}")]),
            ModelResponse(parts=[TextPart(SUMMARY_ACK)]),
        ]
        replaced = {group.index for group in older}
        out: list[ModelMessage] = []
        for group in ctx.groups:
            if group.index == older[0].index:
                out += summary
            if group.index not in replaced:
                out += ctx.messages[group.entry_start : group.entry_end]
        return out


@validate_call(config=STRICT)
def summarize_older_turns(
    keep: Annotated[int, Field(ge=0)] = 4,
    model: Annotated[str, Field(min_length=1)] | None = None,
    trigger_fraction: Fraction = 0.6,
) -> SummarizeOlderTurns:
    """A processor that summarizes the finished turns older than the last `keep` once the request passes
    `trigger_fraction` of the context window; `model` is a model string or a `[models]` name."""
    return SummarizeOlderTurns(keep, model, trigger_fraction)


def _is_summary(message: ModelMessage) -> bool:
    first = message.parts[0] if message.parts else None
    return (
        isinstance(first, UserPromptPart)
        and isinstance(first.content, str)
        and first.content.startswith(SUMMARY_HEADER)
    )


def _transcript(messages: Sequence[ModelMessage], groups: Sequence[HistoryGroup]) -> str:
    """The turns to summarize as plain text: any model can read it, and no tool call can come apart from its result."""
    lines: list[str] = ["Summarize this conversation:", ""]
    for group in groups:
        for message in messages[group.entry_start : group.entry_end]:
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    content = part.content if isinstance(part.content, str) else " ".join(map(str, part.content))
                    lines.append(f"User: {content}")
                elif isinstance(part, SystemPromptPart):
                    lines.append(f"System: {part.content}")
                elif isinstance(part, TextPart):
                    lines.append(f"Assistant: {part.content}")
                elif isinstance(part, ToolCallPart):
                    lines.append(f"Assistant called {part.tool_name}({part.args_as_json_str()})")
                elif isinstance(part, ToolReturnPart):
                    lines.append(f"{part.tool_name} returned: {part.model_response_str()[:TOOL_RESULT_CHARS]}")
    return "\n".join(lines)
