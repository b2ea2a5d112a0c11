"""User history processors and their condition: what they receive, and how they are resolved and told apart.

A processor is configured as an import path (`[history] processors = ["pkg.mod:fn"]`, resolved on `sys.path`) or
passed as a callable in `AgentOptions(history_processors=[...])`. It is resolved and classified once, at
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

A `{ path = "pkg.mod:factory", args = {...} }` entry names a factory instead: it is called once, at start-up, with
`args` as keyword arguments, and what it returns is classified like any processor (or condition). A factory that
rejects its arguments (`TypeError`, `ValueError`, a pydantic `ValidationError`) is a `ConfigError` naming the config
file, the path and the argument. A processor object may list the models it will call in `model_names`; they are
resolved at start-up too, so a bad name stops code-puppy before anything is sent.
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError
from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model, ModelRequestParameters, infer_model

from code_puppy.config import ConfigError, HistoryConfig, ProcessorSpec
from code_puppy.errors import one_line
from code_puppy.history.errors import HistoryProcessingError
from code_puppy.history.groups import HistoryGroup, keep_recent, partition
from code_puppy.history.revision import HistoryRevision
from code_puppy.history.tokens import estimate_request_tokens

ProcessorKind = Literal["messages", "run_context", "context"]

PROCESSOR_FAILURES = (Exception, SystemExit, KeyboardInterrupt)
"""What a processor or condition raising fails with, as a `HistoryProcessingError` naming it: its `sys.exit()` or
`KeyboardInterrupt` too, which would otherwise end the run as a limit (exit 3) or a Ctrl-C (130). No front end lets
a real Ctrl-C reach one: headless and the ACP server turn SIGINT into a cancellation, the chat reads it as a key."""


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
    """The atomic groups of `messages` (`groups.py`), in order; the last holds the current request."""
    run_context: RunContext[Any] = field(repr=False, compare=False)
    """The run's context, whose `messages` are the same copies."""
    summary_model: Model = field(repr=False, compare=False)
    """The model a summarizing processor writes with: `[history] summary_model`, else the one serving the request.
    Use it from a separate agent without history processors or tools."""
    resolve_model: Callable[[str], Model] = field(repr=False, compare=False)
    """code-puppy's model resolution: a model string or a `[models]` name to a model (its endpoint, key, window)."""
    summary_capabilities: tuple[AbstractCapability[Any], ...] = field(default=(), repr=False, compare=False)
    """Capabilities for the summarizing agent (code-puppy's cost meter, so a summary counts as spending)."""

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
    """The processors of an agent, in order, their condition, and the models summarizing processors use."""

    processors: tuple[HistoryProcessor, ...] = ()
    condition: ProcessorCondition | None = None
    summary_model: Model | None = None
    """`[history] summary_model`, resolved; None: the model serving each request."""
    resolve_model: Callable[[str], Model] = infer_model
    """How the processors' model names become models (code-puppy's resolution, when the builder gives it)."""


def resolve_history_processing(
    config: HistoryConfig,
    *,
    processors: Sequence[Callable[..., Any]] | None = None,
    condition: Callable[..., Any] | None = None,
    resolve_model: Callable[[str], Model] = infer_model,
    source_of: Callable[[str], Path | None] = lambda key: None,
) -> HistoryProcessing:
    """Resolve and check the configured processors, condition and summary model; callables given here replace the
    config's. `source_of` names the config file that set a `[history]` key, for the errors.

    Raises:
        ConfigError: One line naming the import path, factory argument or model that cannot be used.
    """
    resolved = (
        tuple(classify_processor(fn, _qualified_name(fn)) for fn in processors)
        if processors is not None
        else tuple(_resolve_processor(entry, _where("processors", source_of)) for entry in config.processors)
    )
    predicate: ProcessorCondition | None = None
    if condition is not None:
        predicate = classify_condition(condition, _qualified_name(condition))
    elif config.processor_condition is not None:
        predicate = _resolve_condition(config.processor_condition, _where("processor_condition", source_of))
    if predicate is not None and not resolved:
        raise ConfigError(
            f"[history] processor_condition {predicate.name!r} is set without processors: "
            "a condition only decides whether [history] processors run"
        )
    for processor in resolved:
        for name in getattr(processor.function, "model_names", ()):
            _model(resolve_model, name, f"{_where('processors', source_of)}: {processor.name}")
    summary_model = None
    if config.summary_model is not None:
        summary_model = _model(resolve_model, config.summary_model, _where("summary_model", source_of))
    return HistoryProcessing(resolved, predicate, summary_model, resolve_model)


def processor_context(
    messages: Sequence[ModelMessage],
    run_context: RunContext[Any],
    *,
    model: Model,
    revision: HistoryRevision,
    parameters: ModelRequestParameters | None = None,
    summary_model: Model | None = None,
    resolve_model: Callable[[str], Model] = infer_model,
    summary_capabilities: Sequence[AbstractCapability[Any]] = (),
) -> HistoryProcessorContext:
    """What a context-style processor receives for `messages` (its own copies: they become `run_context.messages`),
    served by `model`."""
    copies = list(messages)
    groups = partition(copies)
    return HistoryProcessorContext(
        adapter_shortname=model.system,
        model_id=model.model_id,
        request_index=run_context.run_step,
        cache_epoch=revision.cache_epoch,
        history_version=revision.history_version,
        estimated_tokens=sum(group.estimated_tokens for group in groups),
        estimated_request_tokens=estimate_request_tokens(copies, parameters),
        context_window=model.context_window,
        message_count=len(copies),
        messages=tuple(copies),
        groups=groups,
        run_context=replace(run_context, messages=copies),
        summary_model=summary_model or model,
        resolve_model=resolve_model,
        summary_capabilities=tuple(summary_capabilities),
    )


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
    except PROCESSOR_FAILURES as exc:
        raise HistoryProcessingError(
            f"history processor condition {condition.name} raised {one_line(exc, typed=True)}",
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


def _resolve_processor(entry: str | ProcessorSpec, where: str) -> HistoryProcessor:
    if isinstance(entry, str) or entry.args is None:
        return _import_processor(entry if isinstance(entry, str) else entry.path)
    return classify_processor(*_made(entry, where))


def _resolve_condition(entry: str | ProcessorSpec, where: str) -> ProcessorCondition:
    if isinstance(entry, str) or entry.args is None:
        return _import_condition(entry if isinstance(entry, str) else entry.path)
    return classify_condition(*_made(entry, where))


@functools.cache
def _import_processor(path: str) -> HistoryProcessor:
    return classify_processor(_import(path, "[history] processors"), path)


@functools.cache
def _import_condition(path: str) -> ProcessorCondition:
    return classify_condition(_import(path, "[history] processor_condition"), path)


def _made(spec: ProcessorSpec, where: str) -> tuple[Callable[..., Any], str]:
    """What a factory makes of its `args`, and the name it goes by: the path with the arguments."""
    args = spec.args or {}
    factory = _import(spec.path, where)
    try:
        made = factory(**args)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {spec.path!r} rejected its args: {_first_error(exc)}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {spec.path!r} rejected its args: {one_line(exc)}") from None
    if not callable(made):
        raise ConfigError(
            f"{where}: {spec.path!r} returned an object of type {type(made).__name__}, not a callable: "
            "with args, path names a factory that returns the processor"
        )
    shown = ", ".join(f"{key}={value!r}" for key, value in args.items())
    return made, f"{spec.path}({shown})"


def _first_error(exc: ValidationError) -> str:
    """The argument a factory refused and why; an unknown keyword first, since it also makes others look missing."""
    errors = sorted(exc.errors(), key=lambda error: error["type"] != "unexpected_keyword_argument")
    error = errors[0]
    argument = ".".join(str(part) for part in error["loc"])
    if error["type"] == "unexpected_keyword_argument":
        return f"unknown argument {argument!r}"
    return f"{argument!r}: {error['msg'][0].lower()}{error['msg'][1:]}, got {error['input']!r}"


def _model(resolve: Callable[[str], Model], name: str, where: str) -> Model:
    try:
        return resolve(name)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _where(key: str, source_of: Callable[[str], Path | None]) -> str:
    source = source_of(key)
    return f"{source}: [history] {key}" if source is not None else f"[history] {key}"


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
