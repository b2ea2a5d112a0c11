"""`ProviderRetries`: a model request that failed in a way worth retrying is retried, and the user is told so."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field, replace
from http import HTTPStatus
from typing import Any, cast

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelQuotaExceededError,
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
from code_puppy.models import PLACEHOLDER_API_KEY

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
        if isinstance(error, ModelHTTPError) and error.status_code in (401, 403):
            raise ProviderFailed(refused_key(error, request_context.model)) from error
        if not isinstance(error, RETRYABLE):
            if isinstance(error, ModelHTTPError):
                what = describe_provider_error(error, request_context.model)
                raise ProviderFailed(with_advice(what, error)) from error
            raise error
        what = describe_provider_error(error, request_context.model)
        if request_context.attempt > self.retries:
            raise ProviderFailed(with_advice(what, error)) from error
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
        return f"cannot reach {model.base_url or model.system}: {_socket_reason(error) or error.message.rstrip('.')}"
    if isinstance(error, ModelHTTPError):
        return _http_error_words(error, model)
    return one_line(error)


def _http_error_words(error: ModelHTTPError, model: Model) -> str:
    """An HTTP error status in words: what the server at the base URL answered, with the provider's own sentence."""
    status = error.status_code
    server = f"the server at {(model.base_url or model.system).rstrip('/')}"
    said = provider_said(error)
    answer = f"{status}: {said}" if said else str(status)
    if isinstance(error, ModelQuotaExceededError):
        return f"{server} says the account's quota or credits are used up ({answer})"
    if status == 404:
        return f"{server} does not know the model '{model.model_name}' ({answer})"
    if status == 429:
        return f"{server} rate limited the request ({answer})"
    if status >= 500:
        return f"{server} answered {answer}" if said else f"{server} answered {status} ({_reason(status)})"
    return f"{server} rejected the request ({answer})"


def with_advice(what: str, error: Exception) -> str:
    """A failure's words with what the user can do about it, where there is one thing to say."""
    if not isinstance(error, ModelHTTPError) or isinstance(error, ModelQuotaExceededError):
        return what
    if error.status_code == 404:
        model = error.model_name
        pull = f" (for Ollama: ollama pull {model})" if "pull" in provider_said(error).lower() else ""
        return f"{what}; check the model name{pull}, and the base URL if it may be wrong"
    if error.status_code == 429:
        return f"{what}; wait, or lower the request rate"
    return what


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "a server error"


def _socket_reason(error: BaseException) -> str | None:
    """The socket's own words under the SDK's "Connection error." (`connection refused`), found down the chain."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno is not None:
            return os.strerror(cause.errno).lower()
        cause = cause.__cause__ or cause.__context__
    return None


def refused_key(error: ModelHTTPError, model: Model) -> str:
    """A 401 or 403 in the user's words: which environment variable's key was refused, and what to check."""
    key = getattr(getattr(model, "client", None), "api_key", None)
    where = model.base_url or model.system
    said = provider_said(error)
    said = f' (the provider said: "{said}")' if said else ""
    if key == PLACEHOLDER_API_KEY:
        return (
            f"{where} refused the request ({error.status_code}): it wants an API key; name the variable that holds "
            f"it with api_key_env in the model's [models] entry{said}"
        )
    variable = key_variable(key, model.system) if isinstance(key, str) else None
    whose = f"the key in {variable}" if variable else f"the API key for {model.system}"
    if error.status_code == 401:
        return f"the provider refused {whose} (401): check that it is current and meant for {where}{said}"
    return (
        f"the provider refused access to {model.model_name} with {whose} (403): check that the key's account or "
        f"project may use this model{said}"
    )


def key_variable(key: str, system: str) -> str | None:
    """The environment variable that holds `key`: the provider's usual one (`OPENAI_API_KEY`) first, then any other."""
    usual = f"{system.upper().replace('-', '_')}_API_KEY"
    holders = sorted(name for name, value in os.environ.items() if value == key and key)
    return usual if usual in holders else next(iter(holders), None)


def provider_said(error: ModelHTTPError) -> str:
    """The provider's own sentence about an HTTP error, short: from the body the SDK kept, else from the raw reply
    (an SDK keeps only the `error` field, which is a number in `{"error": 500, "message": "..."}`)."""
    said = _message_in(error.body)
    if said:
        return said
    response = getattr(error.__cause__, "response", None)
    try:
        raw: object = response.json() if response is not None else None
    except Exception:  # not JSON, or not read: nothing more to say than the status
        raw = None
    return _message_in(raw)


def _message_in(body: object) -> str:
    """The message in an error body: OpenAI's and Anthropic's `error.message`, a plain `message`, Ollama's `error`
    string, FastAPI's `detail`; or a body that is itself a string (an SDK keeps `error` alone)."""
    message: object = body
    if isinstance(body, dict):
        fields = cast(dict[str, Any], body)
        inner = fields.get("error")
        inner_message = cast(dict[str, Any], inner).get("message") if isinstance(inner, dict) else inner
        message = next(
            (m for m in (inner_message, fields.get("message"), fields.get("detail")) if isinstance(m, str) and m), None
        )
    if isinstance(message, str) and message.strip() and not message.lstrip().startswith("<"):  # not an HTML page
        return one_line(Exception(message), limit=160)
    return ""
