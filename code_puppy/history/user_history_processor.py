"""`UserHistoryProcessor`: the user's history processors, run before every model request and validated.

The names a processor author needs are public in `code_puppy.history`; processing.py says how the processor kinds are
told apart.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model, ModelRequestContext, infer_model

from code_puppy.errors import one_line
from code_puppy.history.errors import HistoryProcessingError
from code_puppy.history.processing import (
    PROCESSOR_FAILURES,
    HistoryProcessor,
    HistoryProcessorState,
    ProcessorCondition,
    call_processor,
    evaluate_condition,
    processor_context,
)
from code_puppy.history.revision import HistoryRevision, Revision, rewrote_history
from code_puppy.history.tokens import estimate_history_tokens, estimate_request_tokens, serialize
from code_puppy.history.validation import validate_output
from code_puppy.run.deps import deps_of, in_main_run

_processing: ContextVar[frozenset[int]] = ContextVar("code_puppy.history_processing", default=frozenset())
"""The agents (by id) whose history processors are running in this context, to refuse a recursive call."""


@dataclass
class UserHistoryProcessor(AbstractCapability[Any]):
    """Before every model request (each step of a tool loop too), runs the user's history processors, in order.

    When the condition holds (or there is none), each processor gets a deep copy of the history as its kind asks
    and its output is validated against its own input (rules V1-V12, `validation.py`). An accepted edit
    becomes both this request's messages and the run's history, so `HistoryPersistence` stores it (the store
    branches and keeps the old history) and later requests, turns and resumes see it. A semantic no-op keeps the
    original message objects. An invalid edit, a crash or a bad condition raises `HistoryProcessingError` before
    anything is sent and changes no history; a cancellation propagates and commits nothing.
    """

    processors: tuple[HistoryProcessor, ...] = ()
    """The processors, in the order they run; none makes this capability inert."""
    _: KW_ONLY
    condition: ProcessorCondition | None = None
    """Decides before each request whether the processors run (level-triggered: asked every time)."""
    summary_model: Model | None = None
    """The model summarizing processors write with (`HistoryProcessorContext.summary_model`); None: the model
    serving the request."""
    resolve_model: Callable[[str], Model] = infer_model
    """Model names to models, for processors that name one (`HistoryProcessorContext.resolve_model`)."""
    summary_capabilities: Sequence[AbstractCapability[Any]] = ()
    """For the summarizing agents (`HistoryProcessorContext.summary_capabilities`)."""
    _own: Revision = field(default_factory=Revision, init=False, repr=False)

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # it holds callables

    async def for_run(self, ctx: RunContext[Any]) -> UserHistoryProcessor:
        return replace(self)

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        if not self.processors:
            return request_context
        key = id(ctx.agent) if ctx.agent is not None else id(self)
        if key in _processing.get():
            raise HistoryProcessingError(
                "a history processor ran the agent whose history it processes; "
                "summarize with a separate agent that has no history processors"
            )
        # A main-conversation edit advances its session's counters (stored with it); any other run keeps its own.
        deps = deps_of(ctx)
        revision: HistoryRevision = deps.session if deps is not None and in_main_run() else self._own
        revision.history_version += 1
        messages = list(request_context.messages)
        if self.condition is not None:
            state = self._state(ctx, request_context, messages, revision)
            if not await evaluate_condition(self.condition, state):
                return request_context
        serialized = [serialize(message) for message in messages]
        edited = False
        for processor in self.processors:
            try:
                copies = copy.deepcopy(messages)
            except Exception as exc:
                raise HistoryProcessingError(f"cannot copy the history for {processor.name}: {exc}") from exc
            context = processor_context(
                copies,
                ctx,
                model=request_context.model,
                revision=revision,
                parameters=request_context.model_request_parameters,
                summary_model=self.summary_model,
                resolve_model=self.resolve_model,
                summary_capabilities=self.summary_capabilities,
            )
            groups = context.groups
            token = _processing.set(_processing.get() | {key})
            try:
                output = await call_processor(processor, context)
            except (HistoryProcessingError, UsageLimitExceeded):
                raise  # a limit the processor's own model requests reached (a summary's budget) is the run's
            except PROCESSOR_FAILURES as exc:
                raise HistoryProcessingError(
                    f"{processor.name} raised {one_line(exc, typed=True)}", processor=processor.name
                ) from exc
            finally:
                _processing.reset(token)
            accepted = validate_output(output, messages, serialized, groups, processor=processor.name)
            if accepted is not None:
                messages, serialized, edited = accepted.messages, accepted.serialized, True
        if edited:
            request_context = replace(request_context, messages=list(messages))
            ctx.messages[:] = messages
            rewrote_history(revision)
        return request_context

    def _state(
        self,
        ctx: RunContext[Any],
        request_context: ModelRequestContext,
        messages: list[ModelMessage],
        revision: HistoryRevision,
    ) -> HistoryProcessorState:
        model = request_context.model
        return HistoryProcessorState(
            adapter_shortname=model.system,
            model_id=model.model_id,
            request_index=ctx.run_step,
            cache_epoch=revision.cache_epoch,
            history_version=revision.history_version,
            estimated_tokens=estimate_history_tokens(messages),
            estimated_request_tokens=estimate_request_tokens(messages, request_context.model_request_parameters),
            context_window=model.context_window,
            message_count=len(messages),
        )
