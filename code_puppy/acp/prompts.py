"""A prompt's content as the run takes it (text, images, audio) and how its turn ended as an ACP stop reason."""

from __future__ import annotations

import asyncio
import base64
import binascii
from dataclasses import dataclass
from typing import Any

from acp import RequestError
from acp.schema import (
    AudioContentBlock,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    ResourceContentBlock,
    StopReason,
    TextContentBlock,
    TextResourceContents,
)
from pydantic_ai.exceptions import ContentFilterError, OutputTokenLimitExceeded, UsageLimitExceeded
from pydantic_ai.messages import BinaryContent
from pydantic_ai.models import Model

from code_puppy.acp.files import ClientFiles
from code_puppy.core.events import ending
from code_puppy.core.turn import TurnOutcome
from code_puppy.definitions.file_commands import FileCommand

FINISHED: dict[str, StopReason] = {"length": "max_tokens", "content_filter": "refusal"}
"""The stop reason of a turn whose last answer ended for a reason other than being done (pydantic-ai's
`finish_reason`)."""


def prompt_parts(blocks: list[Any]) -> tuple[str, list[BinaryContent]]:
    """The prompt's text (text blocks as they are, resource links as `@path` mentions, embedded text resources as
    context the model reads) and its images and audio, which go with it to the model."""
    pieces: list[str] = []
    attachments: list[BinaryContent] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            pieces.append(block.text)
        elif isinstance(block, ResourceContentBlock):
            pieces.append(f"@{block.uri.removeprefix('file://')}")
        elif isinstance(block, EmbeddedResourceContentBlock) and isinstance(block.resource, TextResourceContents):
            resource = block.resource
            pieces.append(f'<context uri="{resource.uri}">\n{resource.text}\n</context>')
        elif isinstance(block, ImageContentBlock | AudioContentBlock):
            try:
                data = base64.b64decode(block.data, validate=True)
            except binascii.Error:
                raise RequestError(-32602, f"{block.type} content: the data is not base64") from None
            attachments.append(BinaryContent(data=data, media_type=block.mime_type))
        else:
            raise RequestError(-32602, f"content of type {block.type} is not supported")
    return "\n".join(pieces), attachments


def refused_attachment(model: Model, attachments: list[BinaryContent]) -> str | None:
    """Why `model` cannot take one of `attachments` (its profile says it takes no images, or no audio), or None."""
    profile = model.profile
    for attachment in attachments:
        if attachment.is_image and not profile.get("supports_image_input", True):
            return f"the model {model.model_name} does not take images"
        if attachment.is_audio and not profile.get("supports_audio_file_input", True):
            return f"the model {model.model_name} does not take audio"
    return None


@dataclass(frozen=True)
class Prompt:
    """A turn's prompt as the run takes it: its text, images and audio, the model it runs on, and the editor the file
    tools go through (None: the disk)."""

    text: str
    attachments: list[BinaryContent]
    model: Model
    files: ClientFiles | None
    command: FileCommand | None = None
    """The file command the text came from: its `!` lines run when the turn starts."""


def stop_reason(outcome: TurnOutcome) -> StopReason:
    """The turn's ACP stop reason: the model's own finish reason says when its answer was cut off by the output
    limit (`max_tokens`) or withheld by the provider's filter (`refusal`), with or without text; a run that
    fails any other way is the prompt's JSON-RPC error."""
    error = outcome.error
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    if isinstance(error, OutputTokenLimitExceeded):
        return "max_tokens"
    if isinstance(error, ContentFilterError):
        return "refusal"
    status, message = ending(outcome)
    if status == "success":
        finish = outcome.result.response.finish_reason if outcome.result is not None else None
        return FINISHED.get(finish, "end_turn") if finish is not None else "end_turn"
    if isinstance(error, UsageLimitExceeded) or status == "limit":
        return "max_turn_requests"
    raise RequestError(-32603, message or "the run failed")
