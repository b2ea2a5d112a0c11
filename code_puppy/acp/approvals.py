"""Approvals in an editor session: what asks in the terminal asks the client, with `session/request_permission`.

The same `PermissionPolicy` decides what asks; this answers pydantic-ai's `RequestInput` through the client, as the
chat's `Approver` answers it through its prompt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from acp import RequestError
from acp.interfaces import Client
from acp.schema import AllowedOutcome, PermissionOption, ToolCallUpdate
from pydantic import ValidationError
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

from code_puppy.acp.files import ClientFiles
from code_puppy.acp.updates import diff_content, locations, tool_kind
from code_puppy.core.approvals import Question, Verdict, answer_approvals
from code_puppy.core.project import Project
from code_puppy.terminal_text import printable
from code_puppy.workspace.proposed_edits import proposed_edit

ALLOW_ONCE, ALLOW_ALWAYS, REJECT_ONCE = "allow-once", "allow-always", "reject-once"
VERDICTS: dict[str, Verdict] = {ALLOW_ONCE: "yes", ALLOW_ALWAYS: "always", REJECT_ONCE: "no"}
logger = logging.getLogger(__name__)


async def ask_client(
    client: Client,
    session_id: str,
    project: Project,
    requests: DeferredToolRequests,
    *,
    cancel: Callable[[], None],
    files: ClientFiles | None = None,
) -> DeferredToolResults:
    """Ask the client about each call waiting for approval, as the chat asks its user: allow once, allow always
    (the call's scope, for the session), reject once; a command outside the sandbox only ever once. A client that
    answers "cancelled" cancels the turn (`cancel`); one that answers with a JSON-RPC error (the SDK's example client
    has no permission method: -32601 "Method not found") or with no valid outcome denies the call, and the turn goes
    on. An edit's diff is of the editor's buffer when the edit is made to it (`files`)."""

    async def ask(question: Question) -> Verdict:
        call = question.call
        args = call.args_as_dict()
        text = await files.text_of(project.root, args) if files is not None else None
        edit = proposed_edit(project.root, call.tool_name, args, text=text)
        options = [PermissionOption(option_id=ALLOW_ONCE, name="Allow once", kind="allow_once")]
        if question.always:
            options.append(PermissionOption(option_id=ALLOW_ALWAYS, name="Allow always", kind="allow_always"))
        options.append(PermissionOption(option_id=REJECT_ONCE, name="Reject", kind="reject_once"))
        asked = ToolCallUpdate(
            tool_call_id=call.tool_call_id,
            title=f"{call.tool_name} wants to {question.summary}",
            kind=tool_kind(call.tool_name),
            status="pending",
            content=[diff_content(project.root, edit)] if edit is not None else None,
            locations=locations(project.root, args),
            raw_input=args,
        )
        try:
            response = await client.request_permission(
                session_id=session_id,
                tool_call=ToolCallUpdate.model_validate(spelled(asked.model_dump(by_alias=True))),
                options=options,
            )
        except (RequestError, ValidationError) as exc:  # the client cannot ask its user: nobody allowed the call
            # One line of stderr whatever the client's message holds.
            error = printable(" ".join(str(exc).split()), spelled=True)
            said = f"an error ({error})" if isinstance(exc, RequestError) else "no valid outcome"
            logger.warning("the client answered session/request_permission with %s: %s denied", said, call.tool_name)
            return "no"
        outcome = response.outcome
        if not isinstance(outcome, AllowedOutcome):  # the client cancelled the turn while the question was open
            cancel()
            return "cancel"
        return VERDICTS.get(outcome.option_id, "no")

    return await answer_approvals(project.policy, requests, ask)


def spelled(value: Any) -> Any:
    """`value` (JSON) with every string spelled (`printable`), keys too: what the client shows of a question is
    what is there, and an escape sequence in a command, a path or an argument cannot disguise it."""
    if isinstance(value, str):
        return printable(value, spelled=True)
    if isinstance(value, dict):
        return {spelled(key): spelled(item) for key, item in value.items()}  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, list):
        return [spelled(item) for item in value]  # pyright: ignore[reportUnknownVariableType]
    return value
