"""Prompt caching (README "Prompt caching"): what joins pydantic-ai's `Caching` in every agent's list.

`Caching` marks the tools, the instructions and the growing conversation as cacheable for every request (`[run]
prompt_cache`). `SessionCacheKey` does per request what depends on the model and the session: a `[models.NAME]
prompt_cache` that differs from `[run]`'s, and OpenAI's `prompt_cache_key`, which `Caching` does not set, as the
session's id. `CacheBusts` tells the user, in one line, when a cache the conversation had established stops being read.
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, replace
from typing import Any, cast

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability, Caching
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models import Model, ModelRequestContext
from pydantic_ai.settings import ModelSettings
from pydantic_ai_harness.warn_on_cache_busts import CacheBustWarning, WarnOnCacheBusts

from code_puppy.config.settings import CacheRetention
from code_puppy.errors import say
from code_puppy.models import entry_prompt_cache
from code_puppy.run.deps import deps_of


def prompt_caching(setting: bool | CacheRetention) -> list[AbstractCapability[Any]]:
    """The capabilities an agent caches its prompts with under `[run] prompt_cache = setting`."""
    return [Caching(setting), SessionCacheKey(setting), CacheBusts()]


@dataclass
class SessionCacheKey(AbstractCapability[Any]):
    """Per request: the prompt cache of the model's `[models.NAME]` entry where it differs from `[run]`'s, and on an
    OpenAI model (any base URL) the session's id as `prompt_cache_key`, so that a session's requests meet the same
    cache; neither when caching is off for the model."""

    default: bool | CacheRetention = True
    """`[run] prompt_cache`, which `Caching` beside it already sets for every request."""

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        # Per attempt, for the model that serves it: the model is chosen per run.
        model = request_context.model
        setting = entry_prompt_cache(model)
        # Provider-specific keys (`openai_prompt_cache_key`) are not `ModelSettings`' own.
        settings: dict[str, Any] = {**(request_context.model_settings or {})}
        if setting is None:
            setting = self.default
        else:
            settings["cache"] = setting
        deps = deps_of(ctx)
        if setting is not False and deps is not None and _speaks_openai(model):
            settings["openai_prompt_cache_key"] = deps.session.id
        return replace(request_context, model_settings=cast(ModelSettings, settings))


def _speaks_openai(model: Model) -> bool:
    # Never imported for a run without an OpenAI model: no model can be one of its classes then.
    openai = sys.modules.get("pydantic_ai.models.openai")
    return openai is not None and isinstance(model, openai.OpenAIChatModel | openai.OpenAIResponsesModel)


@dataclass
class CacheBusts(WarnOnCacheBusts[Any]):
    """The harness's `WarnOnCacheBusts`, its warning told to the user in one line (the turn's warning line) instead of
    the Python warning it raises."""

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CacheBustWarning)
            response = await super().after_model_request(ctx, request_context=request_context, response=response)
        for warning in caught:
            # Its first sentence: how much the request read against what the conversation had cached.
            first = str(warning.message).split(". ", 1)[0]
            line = f"prompt cache: {first[0].lower()}{first[1:]} (the cached prefix changed, or the cache expired)"
            deps = deps_of(ctx)
            (deps.warn if deps is not None and deps.warn is not None else say)(line)
        return response
