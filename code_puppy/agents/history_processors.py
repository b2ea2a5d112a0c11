"""User history processors and their condition: what they receive, and how they are resolved and told apart.

A processor is configured as an import path (`[history] processors = ["pkg.mod:fn"]`, resolved on `sys.path`) or
passed as a callable to `build_pydantic_agent(history_processors=[...])`. It is resolved and classified once, at
start-up, by the annotations of its required positional parameters:

| signature | kind | called with |
|---|---|---|
| `fn(ctx: HistoryProcessorContext)` | `context` | a frozen `HistoryProcessorContext` (groups, estimates, ...) |
| `fn(messages)` (any other one-parameter callable) | `messages` | a deep-copied `list[ModelMessage]` |
| `fn(ctx: RunContext[...], messages)` | `run_context` | a `RunContext` (its `messages` the same copies) and the list |

Each may be `def` or `async def`; a `def` runs in a worker thread, off the event loop. Rejected at start-up (a
`ConfigError`, exit 2): two parameters whose first is not annotated `RunContext` (pydantic-ai would only fail at
run time), one parameter annotated `RunContext`, no or more than two required parameters, `*args`, required
keyword-only parameters. A `processor_condition` takes one `HistoryProcessorState` and returns exactly a bool.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import importlib
import inspect
import threading
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage

from code_puppy.agents.history_errors import HistoryProcessingError
from code_puppy.agents.history_groups import HistoryGroup, keep_recent
from code_puppy.config import ConfigError, HistoryConfig
from code_puppy.errors import one_line

ProcessorKind = Literal["messages", "run_context", "context"]


@runtime_checkable
class HistoryRevision(Protocol):
    """The counters a session keeps about its history, advanced by accepted rewrites and stored with it."""

    cache_epoch: int
    """Rewrites of already-sent history (processor edits, compactions): each can cost the provider's prompt cache."""
    history_version: int
    """Revisions of the history processors see: one per model request, and one per accepted rewrite."""


@dataclass
class Revision:
    """`HistoryRevision` counters of one run, for runs without a session to keep them."""

    cache_epoch: int = 0
    history_version: int = 0


@dataclass(frozen=True)
class HistoryProcessorState:
    """What a `processor_condition` sees before each model request: no messages, nothing to edit."""

    adapter_shortname: str
    """The provider serving the request, as pydantic-ai names it (`openai`, `anthropic`, `google-gla`, ...)."""
    model_id: str
    """pydantic-ai's `model_id` of the model serving the request, e.g. `openai:gpt-5.1`."""
    request_index: int
    """1 for the first model request of a run, then 2, 3, ... through its tool loop."""
    cache_epoch: int
    history_version: int
    estimated_tokens: int
    """The history's estimated tokens, its own system parts included; instructions and tool schemas are not."""
    estimated_request_tokens: int
    """The whole request: history, instructions and tool schemas, anchored on the latest response's reported usage
    (harness `estimate_context_tokens`); after a rewrite it stays high until the next response."""
    context_window: int | None
    """The model's context window in tokens, when known."""
    message_count: int


@dataclass(frozen=True)
class HistoryProcessorContext(HistoryProcessorState):
    """What a context-style processor receives: the history, deep-copied, and its atomic groups."""

    messages: tuple[ModelMessage, ...]
    """Deep copies: changing them changes nothing; return the history you want instead."""
    groups: tuple[HistoryGroup, ...]
    """The atomic groups of `messages` (history_groups.py), in order; the last holds the current request."""
    run_context: RunContext[Any] = field(repr=False, compare=False)
    """The run's context, whose `messages` are the same copies."""

    def keep_recent_groups(self, n: int) -> list[ModelMessage]:
        """The last `n` closed, unprotected groups plus every protected or unfinished one, in order.

        Raises:
            TypeError: If `n` is a bool or not an int.
            ValueError: If `n` is negative.
        """
        return keep_recent(self.messages, self.groups, n)


@dataclass(frozen=True)
class HistoryProcessor:
    """A resolved, classified processor."""

    name: str
    """Its import path, or `module:qualname` for a callable."""
    function: Callable[..., Any]
    kind: ProcessorKind
    is_async: bool


@dataclass(frozen=True)
class ProcessorCondition:
    """A resolved `processor_condition`."""

    name: str
    function: Callable[[HistoryProcessorState], Any]
    is_async: bool


@dataclass(frozen=True)
class HistoryProcessing:
    """The processors of an agent, in order, and their condition."""

    processors: tuple[HistoryProcessor, ...] = ()
    condition: ProcessorCondition | None = None


def resolve_history_processing(
    config: HistoryConfig,
    *,
    processors: Sequence[Callable[..., Any]] | None = None,
    condition: Callable[..., Any] | None = None,
) -> HistoryProcessing:
    """Resolve and check the configured processors and condition; callables given here replace the config's.

    Raises:
        ConfigError: One line naming the import path or callable that cannot be used.
    """
    resolved = (
        tuple(classify_processor(fn, _qualified_name(fn)) for fn in processors)
        if processors is not None
        else tuple(_resolve_processor(path) for path in config.processors)
    )
    predicate: ProcessorCondition | None = None
    if condition is not None:
        predicate = classify_condition(condition, _qualified_name(condition))
    elif config.processor_condition is not None:
        predicate = _resolve_condition(config.processor_condition)
    if predicate is not None and not resolved:
        raise ConfigError(
            f"[history] processor_condition {predicate.name!r} is set without processors: "
            "a condition only decides whether [history] processors run"
        )
    return HistoryProcessing(resolved, predicate)


def classify_processor(function: Callable[..., Any], name: str) -> HistoryProcessor:
    """Tell the processor kinds apart by annotation (module docstring); `ConfigError` for an ambiguous one."""
    required = _required_positional(function, f"history processor {name!r}")
    if len(required) == 1:
        annotation = required[0].annotation
        if _annotated_as(annotation, RunContext):
            raise ConfigError(
                f"history processor {name!r} takes only a RunContext; a processor with a RunContext "
                "also takes the messages: fn(ctx: RunContext, messages)"
            )
        kind: ProcessorKind = "context" if _annotated_as(annotation, HistoryProcessorContext) else "messages"
    elif len(required) == 2:
        first = required[0]
        if not _annotated_as(first.annotation, RunContext):
            shown = "unannotated" if first.annotation is inspect.Parameter.empty else f"annotated {first.annotation!r}"
            raise ConfigError(
                f"history processor {name!r} takes two arguments but its first, {first.name!r}, is {shown}: "
                "annotate it as RunContext, or take one argument (the messages or a HistoryProcessorContext)"
            )
        kind = "run_context"
    else:
        raise ConfigError(
            f"history processor {name!r} takes {len(required)} required arguments; it must take the messages, "
            "a RunContext and the messages, or a HistoryProcessorContext"
        )
    return HistoryProcessor(name, function, kind, _is_async(function))


def classify_condition(function: Callable[..., Any], name: str) -> ProcessorCondition:
    """A condition takes exactly one required argument, the `HistoryProcessorState`."""
    required = _required_positional(function, f"history processor condition {name!r}")
    if len(required) != 1:
        raise ConfigError(
            f"history processor condition {name!r} takes {len(required)} required arguments; "
            "it must take one, a HistoryProcessorState"
        )
    return ProcessorCondition(name, function, _is_async(function))


async def call_processor(processor: HistoryProcessor, context: HistoryProcessorContext) -> object:
    """Call a processor the way its kind says, sync ones in a worker thread."""
    if processor.kind == "context":
        return await call(processor.function, processor.is_async, context)
    messages = list(context.messages)
    if processor.kind == "messages":
        return await call(processor.function, processor.is_async, messages)
    return await call(processor.function, processor.is_async, context.run_context, messages)


async def evaluate_condition(condition: ProcessorCondition, state: HistoryProcessorState) -> bool:
    """The condition's verdict; `HistoryProcessingError` when it raises or answers anything but a bool."""
    try:
        verdict = await call(condition.function, condition.is_async, state)
    except Exception as exc:
        raise HistoryProcessingError(
            f"history processor condition {condition.name} raised {type(exc).__name__}: {exc}",
            processor=condition.name,
        ) from exc
    if type(verdict) is not bool:
        raise HistoryProcessingError(
            f"history processor condition {condition.name} returned {verdict!r} ({type(verdict).__name__}); "
            "it must return exactly True or False",
            processor=condition.name,
        )
    return verdict


async def call(function: Callable[..., Any], is_async: bool, *args: Any) -> Any:
    """Await an async callable; run a sync one in a worker thread with this context's variables.

    The thread is a daemon of its own, not the loop's executor (which `asyncio.run` waits for): a cancelled await
    abandons it, it runs to its end in the background, its result is discarded, and it never delays exit.
    """
    if is_async:
        return await function(*args)
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(succeeded: bool, value: Any) -> None:
        if outcome.done():
            return
        if succeeded:
            outcome.set_result(value)
        else:
            outcome.set_exception(value)

    def work() -> None:
        try:
            value, succeeded = context.run(function, *args), True
        except BaseException as exc:  # handed to the awaiting task, which re-raises it
            value, succeeded = exc, False
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody is waiting
            loop.call_soon_threadsafe(settle, succeeded, value)

    threading.Thread(target=work, name=f"history-processor {getattr(function, '__name__', '')}", daemon=True).start()
    result = await outcome
    return await result if inspect.isawaitable(result) else result


@functools.cache
def _resolve_processor(path: str) -> HistoryProcessor:
    return classify_processor(_import(path, "[history] processors"), path)


@functools.cache
def _resolve_condition(path: str) -> ProcessorCondition:
    return classify_condition(_import(path, "[history] processor_condition"), path)


def _import(path: str, key: str) -> Callable[..., Any]:
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"{key}: {path!r} is not an import path of the form 'module:callable'")
    try:
        target: object = importlib.import_module(module_name)
    except Exception as exc:  # a broken module raises anything at import; it is the user's, report it in one line
        raise ConfigError(f"{key}: cannot import {path!r}: {type(exc).__name__}: {one_line(exc)}") from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(f"{key}: cannot import {path!r}: {module_name} has no attribute {attribute!r}") from None
    if not callable(target):
        raise ConfigError(f"{key}: {path!r} is not callable (an object of type {type(target).__name__})")
    return target


def _required_positional(function: Callable[..., Any], what: str) -> list[inspect.Parameter]:
    try:
        signature = inspect.signature(function, eval_str=True)
    except Exception:  # annotations that do not evaluate (TYPE_CHECKING imports): compare them by name
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{what}: cannot read its signature: {one_line(exc)}") from None
    required: list[inspect.Parameter] = []
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            raise ConfigError(f"{what} takes *{parameter.name}; name its parameters so its kind is clear")
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and parameter.default is inspect.Parameter.empty:
            raise ConfigError(f"{what} has a required keyword-only parameter {parameter.name!r}")
        positional = parameter.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        if positional and parameter.default is inspect.Parameter.empty:
            required.append(parameter)
    return required


def _annotated_as(annotation: object, cls: type) -> bool:
    if annotation is cls or typing.get_origin(annotation) is cls:
        return True
    if isinstance(annotation, str):
        return annotation.split("[", 1)[0].strip().rsplit(".", 1)[-1] == cls.__name__
    return False


def _is_async(function: Callable[..., Any]) -> bool:
    while isinstance(function, functools.partial):
        function = function.func  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(type(function).__call__)


def _qualified_name(function: Callable[..., Any]) -> str:
    module = getattr(function, "__module__", None) or type(function).__module__
    qualname = getattr(function, "__qualname__", None) or type(function).__qualname__
    return f"{module}:{qualname}"
