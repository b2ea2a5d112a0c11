"""`write_title`: a short title for a session, written by its model after its first turn (`[sessions] auto_title`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models import Model

from code_puppy.mentions import typed_text
from code_puppy.sessions.catalog import TITLE_LENGTH

TITLE_INSTRUCTIONS = (
    "You name conversations between a developer and a coding agent. Reply with a title of 3 to 6 words saying "
    "what the conversation is about, in the developer's language, with no quotes and no final period. Reply with "
    "the title only."
)
EXCERPT_CHARS = 1500
"""How much of the first prompt, and of the first answer, the title request sends: it stays a tiny request."""


async def write_title(
    model: Model, messages: Sequence[ModelMessage], *, capabilities: Sequence[AbstractCapability[Any]] = ()
) -> str:
    """A title for the conversation that starts with `messages`, on one line and at most `TITLE_LENGTH` characters;
    `''` when there is no prompt to name it by or the model answered nothing usable."""
    prompt = next(
        (
            typed_text(part.content)
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, UserPromptPart)
        ),
        "",
    )
    if not prompt.strip():
        return ""
    answer = next(
        (
            part.content
            for message in messages
            if isinstance(message, ModelResponse)
            for part in message.parts
            if isinstance(part, TextPart) and part.content.strip()
        ),
        "",
    )
    excerpt = f"<developer>\n{prompt[:EXCERPT_CHARS]}\n</developer>"
    if answer:
        excerpt += f"\n<agent>\n{answer[:EXCERPT_CHARS]}\n</agent>"
    agent = Agent(model, instructions=TITLE_INSTRUCTIONS, capabilities=list(capabilities))
    result = await agent.run(excerpt)
    title = " ".join(result.output.split()).strip("\"'`*#. ")
    return title if len(title) <= TITLE_LENGTH else title[: TITLE_LENGTH - 1].rstrip() + "…"
