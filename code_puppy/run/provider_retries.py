"""`ProviderRetries`: a model request that failed in a way worth retrying is retried, and the user is told so."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelRateLimitError,
    ModelRequestTimeout,
    ModelServerError,
    ModelUnavailableError,
    RetryModelRequest,
)
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models import Model, ModelRequestContext
from pydantic_ai.settings import ModelSettings

from code_puppy.config import RunConfig
from code_puppy.errors import one_line, say

CONNECT_TIMEOUT = 10.0
"""Seconds to open a connection to the provider."""
MAX_BACKOFF = 30.0
"""The longest wait before a retry, whatever the provider's `retry-after` says."""


def request_settings(run: RunConfig, model: Model) -> ModelSettings:
    """The timeouts of a request to `model`, from `[run]`; retrying is `ProviderRetries`' job, not the SDK's.

    The client's own read timeout is the first-event timeout, so that a model that thinks for minutes before its
    first chunk is not cut off by it; pydantic-ai's `first_event_timeout` bounds that wait over every attempt, and
    the run path's idle limit bounds the silences once streaming has started.
    """
    settings = ModelSettings(max_retries=0, first_event_timeout=run.first_event_timeout)
    if model.system in ("openai", "anthropic"):
        import httpx

        settings["timeout"] = httpx.Timeout(run.first_event_timeout, connect=CONNECT_TIMEOUT)
    else:  # a number: other SDKs take nothing else; pydantic-ai's clients keep their own, shorter connect timeout
        settings["timeout"] = run.first_event_timeout
    return settings


@dataclass
class ProviderRetries(AbstractCapability[Any]):
    """Retries a model request that failed for a reason that may pass, with a backoff, saying so in one line each time.

    Worth retrying: a rate limit, an unavailable or overloaded provider, a server error, a failed connection and a
    request that produced nothing within `[run] first_event_timeout`. Not: a rejected request (bad key, unknown
    model, too long a prompt) or an exhausted quota. The provider SDKs' own silent retries are switched off
    (`request_settings`), so a CI log shows every wait. A request that still fails names what it tried.
    """

    run: RunConfig = field(default_factory=RunConfig)
    """`[run]`: the timeouts every request gets (`request_settings`)."""
    _: KW_ONLY
    retries: int = 2
    """Attempts after the first."""
    report: Callable[[str], None] = say
    """Receives the one-line notices."""

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        # Per attempt, for the model that serves it: the model is chosen per run, and its SDK decides which
        # timeout forms it takes.
        settings = ModelSettings(**(request_context.model_settings or {}))
        settings.update(request_settings(self.run, request_context.model))
        return replace(request_context, model_settings=settings)

    async def on_model_request_error(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, error: Exception
    ) -> ModelResponse:
        if not isinstance(error, RETRYABLE):
            raise error
        what = describe_provider_error(error, request_context.model)
        if request_context.attempt > self.retries:
            raise ProviderFailed(what) from error
        retry = request_context.attempt
        delay = min(MAX_BACKOFF, error.retry_after or 0.5 * 2 ** (retry - 1))
        self.report(f"{what}; retrying {retry}/{self.retries} in {delay:g} s")
        await asyncio.sleep(delay)
        raise RetryModelRequest()


RETRYABLE = (ModelRateLimitError, ModelUnavailableError, ModelServerError, ModelConnectionError, ModelRequestTimeout)


class ProviderFailed(Exception):
    """A model request that failed on every attempt; the message says why and what was tried."""


class ProviderStalled(ProviderFailed):
    """A model's stream went silent for longer than `[run] idle_timeout` after it had started."""


def describe_provider_error(error: ModelAPIError, model: Model) -> str:
    """What went wrong with a request, on one line, naming the base URL when the provider could not be reached."""
    if isinstance(error, ModelRequestTimeout):
        return f"the model sent nothing for {error.timeout:g} s ([run] first_event_timeout)"
    if isinstance(error, ModelConnectionError):
        return f"cannot reach {model.base_url or model.system}: {error.message.rstrip('.')}"
    return one_line(error)
