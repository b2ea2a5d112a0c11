"""`/undo` and `/rewind` in the chat: the agent's file changes put back, the conversation branched to before a turn.

Imported before the prompt shows, so heavy modules are imported inside the functions, which only run once the
runtime has loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from code_puppy.chat.control import ChatControl
    from code_puppy.chat.runtime import ChatRuntime
    from code_puppy.checkpoints.rewind import Only, RewindResult

_KINDS = {"both": None, "code": "code", "conversation": "conversation"}
_UNDO_NOTE = "undo-note"
"""The kind of the note `/undo` leaves for the model; a `/rewind` since drops it: it may name a turn no longer there,
and the files are as the rewind left them."""
REWIND_USAGE = "/rewind N [both|code|conversation]: go back to before turn N of the list (/rewind shows it)"


async def undo(chat: ChatControl, args: str) -> str:
    """Put back the files of the session's latest checkpoint; the model hears of it with the next message."""
    from code_puppy.checkpoints.rewind import files_line

    if args:
        return "usage: /undo (it undoes the file changes of the latest turn that made some; /rewind goes further)"
    runtime = await chat.ready()
    result = await _with_consent(chat, runtime, only="code")
    if result is None:
        return "nothing was changed"
    if not result.checkpoints:
        return "nothing to undo: no turn of this session changed files (or they are all undone)"
    what = _what(result)
    if not result.writes:
        return f"undid {what}: the files were already as they were before it"
    chat.attach(
        f"<note>The user undid the file changes of {what}: {files_line(result)} are back as they were before it. "
        "Do not assume those changes are still there; read the files again before changing them.</note>",
        _UNDO_NOTE,
    )
    overwritten = f"; your edits to {', '.join(result.conflicts)} are kept as a checkpoint" if result.conflicts else ""
    return f"undid {what} · changed back {files_line(result)}{overwritten}"


async def rewind(chat: ChatControl, args: str) -> str:
    """`/rewind` lists the turns; `/rewind N [both|code|conversation]` goes back to before turn N."""
    runtime = await chat.ready()
    words = args.split()
    if not words:
        return _turn_list(runtime)
    if not words[0].isdigit() or int(words[0]) < 1 or len(words) > 2 or (len(words) == 2 and words[1] not in _KINDS):
        return f"usage: {REWIND_USAGE}"
    only: Only | None = _KINDS[words[1]] if len(words) == 2 else None  # type: ignore[assignment]  # checked above
    result = await _with_consent(chat, runtime, to_turn=int(words[0]), only=only)
    if result is None:
        return "nothing was changed"
    if result.nothing:
        return f"there is no turn {words[0]} (/rewind lists them)"
    from code_puppy.checkpoints.rewind import describe_rewind

    chat.detach(_UNDO_NOTE)
    if result.turn is not None:
        chat.put_input(result.turn.prompt)
    return "\n".join(describe_rewind(result))


async def _with_consent(
    chat: ChatControl, runtime: ChatRuntime, *, to_turn: int | None = None, only: Only | None = None
) -> RewindResult | None:
    """Rewind; when files the user changed since stand in the way, ask first (None: the user said no)."""
    result = await runtime.rewind(to_turn=to_turn, only=only)
    if not result.conflicts or result.applied:
        return result
    answer = await chat.confirm(
        [f"You changed {', '.join(result.conflicts)} since the agent did."],
        "Overwrite them? Your versions are kept as a checkpoint (/undo brings them back) [y/n]",
        always=False,
    )
    if answer != "yes":
        return None
    return await runtime.rewind(to_turn=to_turn, only=only, force=True)


def _what(result: RewindResult) -> str:
    checkpoint = result.checkpoints[0]
    if checkpoint.kind == "rewind":
        return "the last rewind"
    return f"the turn “{' '.join(checkpoint.prompt.split())[:50]}”"


def _turn_list(runtime: ChatRuntime) -> str:
    """The session's turns, newest first, numbered for `/rewind N`: time, prompt, the files changed since."""
    from code_puppy.checkpoints.rewind import user_turns
    from code_puppy.sessions.checkpoints import CheckpointLog

    turns = list(reversed(user_turns(runtime.session.messages)))
    if not turns:
        return "no turns to rewind in this session"
    live = [
        item for item in CheckpointLog(runtime.store.database).of_session(runtime.session.id) if not item.rewound_at
    ]
    lines: list[str] = []
    for number, turn in enumerate(turns, start=1):
        when = turn.started.astimezone().strftime("%H:%M") if turn.started else "--:--"
        mine = [item for item in live if turn.run_id in item.run_ids]
        files = sorted({path for item in mine for path in item.changes})
        changed = f"{len(files)} file{'' if len(files) == 1 else 's'}: {', '.join(files[:4])}" if files else "no files"
        lines.append(f"{number:>3}  {when}  “{' '.join(turn.prompt.split())[:50]}”  {changed}")
    return "\n".join([*lines, REWIND_USAGE + " (both by default)"])
