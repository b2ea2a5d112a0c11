"""`preview_processing`: what each configured history processor would keep of a stored session, sending nothing.

`code-puppy sessions show ID --groups` runs the session's project's `[history]` processors and condition on its
history plus an empty next prompt, as its next request would, with a stand-in model that answers every request
(a summary too) with a placeholder: nothing reaches a provider. Each processor sees the previous one's output, as
in a run, and its output goes through the same validation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.profiles import ModelProfile
from pydantic_ai.usage import RunUsage

from code_puppy.config import ConfigError, load_settings
from code_puppy.history.errors import HistoryProcessingError
from code_puppy.history.groups import stored_groups
from code_puppy.history.processing import (
    HistoryProcessorContext,
    call_processor,
    evaluate_condition,
    processor_context,
    resolve_history_processing,
)
from code_puppy.history.revision import Revision
from code_puppy.history.tokens import serialize
from code_puppy.history.validation import validate_output
from code_puppy.models import model_resolver

PLACEHOLDER_SUMMARY = "(dry run: no summary is written)"
"""What the stand-in model answers, a summary request included."""


async def preview_processing(
    messages: Sequence[ModelMessage], *, project_dir: Path, model_name: str | None, revision: Revision
) -> list[str]:
    """Lines saying which of the history's groups (as `stored_groups` numbers them) each processor keeps; none when
    the project configures no processors.

    Raises:
        ConfigError: The project's config, or a processor in it, cannot be used (as at a run's start-up).
    """
    settings = load_settings(project_dir)
    history = settings.history
    resolve = model_resolver(settings)
    processing = resolve_history_processing(
        history, resolve_model=resolve, source_of=lambda key: settings.source_of("history", key)
    )
    if not processing.processors:
        return []
    stand_in = FunctionModel(
        _placeholder, model_name=model_name, profile=ModelProfile(context_window=_window(resolve, model_name))
    )
    candidate = [*messages, ModelRequest(parts=[UserPromptPart("")])]
    shown = f"preset {history.preset} · " if history.preset else ""
    context_for = _contexts(stand_in, revision)
    window = stand_in.context_window
    size = f"of a {window}-token window" if window is not None else "(context window unknown)"
    estimate = context_for(candidate).estimated_request_tokens
    lines = [
        f"history processors, a dry run of the next request (nothing is sent; ~{estimate} tokens {size}):",
        f"{shown}compaction {history.compaction}",
    ]
    if processing.condition is not None:
        try:
            verdict = await evaluate_condition(processing.condition, context_for(candidate))
        except HistoryProcessingError as exc:
            return [*lines, f"condition {processing.condition.name}: {exc}"]
        ran = "" if verdict else " (the processors would not run; what they would keep if they did:)"
        lines.append(f"condition {processing.condition.name}: {str(verdict).lower()}{ran}")
    groups = stored_groups(messages)
    forms = [serialize(message) for message in messages]
    for processor in processing.processors:
        context = context_for(candidate)
        try:
            output = await call_processor(processor, context)
            accepted = validate_output(
                output, candidate, [serialize(m) for m in candidate], context.groups, processor=processor.name
            )
        except HistoryProcessingError as exc:
            lines.append(f"{processor.name}: {exc}")
            break
        except Exception as exc:
            lines.append(f"{processor.name}: raised {type(exc).__name__}: {exc}")
            break
        if accepted is not None:
            candidate = accepted.messages
        out = [serialize(message) for message in candidate]
        kept = [g.index for g in groups if _contains(out, forms[g.entry_start : g.entry_end])]
        dropped = [g.index for g in groups if g.index not in kept]
        added = len(out) - sum(g.entry_end - g.entry_start for g in groups if g.index in kept) - 1
        what = [f"keeps {_numbers(kept, 'group')}"]
        if dropped:
            what.append(f"drops {_numbers(dropped)}")
        if added > 0:
            what.append(f"adds {added} summary message{'' if added == 1 else 's'}")
        lines.append(f"{processor.name}: {' · '.join(what)}")
    return lines


def _contexts(model: Model, revision: Revision) -> Callable[[list[ModelMessage]], HistoryProcessorContext]:
    def context_for(messages: list[ModelMessage]) -> HistoryProcessorContext:
        run = RunContext[None](deps=None, model=model, usage=RunUsage(), run_id="dry-run", run_step=1)
        return processor_context(
            list(messages), run, model=model, revision=revision, summary_model=model, resolve_model=lambda _: model
        )

    return context_for


def _placeholder(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart(PLACEHOLDER_SUMMARY)])


def _window(resolve: Callable[[str], Model], model_name: str | None) -> int | None:
    """The session model's context window, when its config or pydantic-ai knows it."""
    if model_name is None:
        return None
    try:
        return resolve(model_name).context_window
    except ConfigError:  # no credentials here, say: the window stays unknown, nothing is sent either way
        return None


def _contains(haystack: Sequence[bytes], needle: Sequence[bytes]) -> bool:
    size = len(needle)
    return any(list(haystack[start : start + size]) == list(needle) for start in range(len(haystack) - size + 1))


def _numbers(indexes: Sequence[int], noun: str = "") -> str:
    if not indexes:
        return f"no {noun}s" if noun else "none"
    label = f"{noun}{'' if len(indexes) == 1 else 's'} " if noun else ""
    return label + ", ".join(map(str, indexes))
