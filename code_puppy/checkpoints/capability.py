"""`Checkpoints`: the project's files snapshotted around every tool call that can change them, and the agent's changes
of the turn collected from those snapshots (README "Checkpoints and rewind")."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import AsyncGenerator, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai import RunContext, ToolDefinition
from pydantic_ai.capabilities import AbstractCapability, WrapToolExecuteHandler
from pydantic_ai.messages import ToolCallPart

from code_puppy.checkpoints.git_format import Change
from code_puppy.checkpoints.shadow import CheckpointError, ShadowRepo
from code_puppy.tools import EDIT_TOOL_NAMES, FILE_EDITORS, MCP_PERMISSION_KEY, SHELL_TOOL_NAMES, is_read_only

REUSE_WITHIN = 1.0
"""Seconds after a snapshot in which the next call of the same model response may start from it."""


@dataclass(frozen=True)
class TurnChanges:
    """What the agent changed in a turn: each file's state before its first change and after its last."""

    changes: dict[str, Change]
    skipped: tuple[str, ...] = ()
    """Files too big to snapshot (`[checkpoints] max_file_mb`) at the time of a call: not restorable."""
    failure: str | None = None
    """Why a snapshot failed (the turn's checkpoint may miss changes), in one line."""


@dataclass
class Checkpoints(AbstractCapability[Any]):
    """Snapshots the project before and after each call of a tool that can change it (the file editors, the
    shell tools, MCP tools not marked read-only) and each command a plugin's hook runs through `SessionView.tracked`,
    and keeps the agent's changes of the turn: the union of what changed during each, so what the user changed in
    between is never taken for the agent's.

    First in the capability list, so its wrap is the outermost: the snapshots enclose the permission policy, the
    plugins' hooks and the sandbox's own restoring. The agent is built once, so the turn is the caller's to mark:
    `begin_turn` and `take`.

    The calls of one model response run back to back (or at once), with no model request in between: the snapshot
    before each call after the first is the last one taken in that response (if under `REUSE_WITHIN` ago: not after a
    slow read-only call in between), not a new one, as nobody can meaningfully edit between them. The first call of a
    response is always checked: the user may have edited while the model thought (on Linux, the folder watcher can
    prove nothing changed since the latest snapshot, which is then reused: `ShadowRepo.unchanged`). A file editor's
    snapshots look at its file alone (`tracked`'s `edits`), and a later call of the response that can change anything
    starts from them only if the response's first snapshot looked at everything.
    """

    shadow: ShadowRepo
    _changes: dict[str, Change] = field(default_factory=dict[str, Change], init=False, repr=False)
    _skipped: set[str] = field(default_factory=set[str], init=False, repr=False)
    _failure: str | None = field(default=None, init=False, repr=False)
    _maintaining: threading.Thread | None = field(default=None, init=False, repr=False)
    _latest: tuple[Hashable, str, float, bool] | None = field(default=None, init=False, repr=False)
    """The model response (run id, step) of the latest snapshot, its tree, when it was taken, and whether everything
    in the project was looked at since the response came (not only the files of file editors)."""
    _pending: tuple[Hashable, asyncio.Future[str | None]] | None = field(default=None, init=False, repr=False)
    """The snapshot being taken before the first call of a response, which the calls started with it wait for."""

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    def begin_turn(self) -> None:
        """A user turn starts: nothing of it changed yet."""
        self._changes, self._skipped, self._failure = {}, set(), None
        self._latest = self._pending = None

    def take(self) -> TurnChanges:
        """The turn's changes (files changed and then put back as they were are left out); the turn is over."""
        changes = {path: change for path, change in self._changes.items() if change[0] != change[1]}
        taken = TurnChanges(changes, tuple(sorted(self._skipped)), self._failure)
        self.begin_turn()
        return taken

    def maintain(self) -> None:
        """Between turns: keep the shadow repository small (`ShadowRepo.maintain`); a failure only costs space."""
        with contextlib.suppress(CheckpointError):
            self.shadow.maintain()

    def maintain_in_background(self) -> None:
        """`maintain` in a thread of its own, so the turn does not wait for it (unless one still runs). The next
        snapshot waits for it through the repository's lock; the thread is no daemon, so the process waits for it
        before it exits and a pack is never cut short."""
        if self._maintaining is not None and self._maintaining.is_alive():
            return
        self._maintaining = threading.Thread(target=self.maintain, name="checkpoints-maintain")
        self._maintaining.start()

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        handler: WrapToolExecuteHandler,
    ) -> Any:
        if not _can_change_project(tool_def):
            return await handler(args)
        response = None if ctx.run_id is None else (ctx.run_id, ctx.run_step)
        edits = self._edited(args.get("path")) if tool_def.name in FILE_EDITORS else None
        async with self.tracked(response=response, edits=edits):
            return await handler(args)

    def _edited(self, path: object) -> tuple[str, ...] | None:
        """The project-relative file a file editor's `path` names, as written and through any symlinks (None: not
        one inside the project, so the snapshot after the call looks at everything)."""
        if not isinstance(path, str) or not path:
            return None
        root = self.shadow.root
        given = Path(path) if os.path.isabs(path) else root / path
        found: set[str] = set()
        for candidate in (os.path.normpath(given), os.path.realpath(given)):
            try:
                relative = Path(candidate).relative_to(root)
            except ValueError:
                return None
            if not relative.parts or any(part.casefold() == ".git" for part in relative.parts):
                return None
            found.add(relative.as_posix())
        return tuple(sorted(found))

    @contextlib.asynccontextmanager
    async def tracked(
        self, *, response: Hashable | None = None, edits: tuple[str, ...] | None = None
    ) -> AsyncGenerator[None]:
        """Enclose something the agent does (a tool call, a command a plugin's hook runs): what changes in the project
        meanwhile is the agent's. `response` names the model response a tool call belongs to (None: not a tool call,
        always snapshotted before). `edits` are the only files it can change (a file editor's): the snapshots before
        and after it look at them alone when the latest snapshot holds them, as nothing else can be the call's (what
        else changed meanwhile, the next whole snapshot sees, and it is not taken for the agent's)."""
        before, whole = await self._before(response, edits)
        try:
            yield
        finally:
            if before is not None:
                # Cancelled or not, what the call changed is the agent's: a Ctrl-C must not hide it from the rewind.
                after, after_whole = self._snapshot_now(edits)
                if after is not None:
                    self._absorb(before, after)
                self._remember(response, after, whole=whole or after_whole)

    async def _before(self, response: Hashable | None, edits: tuple[str, ...] | None) -> tuple[str | None, bool]:
        """The snapshot before a call, and whether everything in the project was looked at since the response came:
        the latest of its response if so, the whole one being taken for it (calls run at once), or a new one."""
        latest = self._latest
        if latest is not None and latest[0] == response and latest[3] and time.monotonic() - latest[2] < REUSE_WITHIN:
            return latest[1], True
        if response is not None and self._pending is not None and self._pending[0] == response:
            return await asyncio.shield(self._pending[1]), True
        if edits is not None and (tree := await asyncio.to_thread(self._files_only, edits)) is not None:
            self._remember(response, tree, whole=False)
            return tree, False
        pending = asyncio.ensure_future(self._snapshot())
        if response is not None:
            self._pending = (response, pending)
        try:
            before = await asyncio.shield(pending)
        finally:
            if self._pending is not None and self._pending[1] is pending:
                self._pending = None
        self._remember(response, before, whole=True)
        return before, True

    def _remember(self, response: Hashable | None, tree: str | None, *, whole: bool) -> None:
        """The latest snapshot, for the next call of the same response (none outside a response, or when it failed)."""
        if response is None or tree is None:
            self._latest = None
        else:
            self._latest = (response, tree, time.monotonic(), whole)

    async def _snapshot(self) -> str | None:
        """The snapshot before a call: the latest one when nothing changed since it (`ShadowRepo.unchanged`), else a
        new one."""
        return (await asyncio.to_thread(self._snapshot_now, None, reuse=True))[0]

    def _snapshot_now(self, edits: tuple[str, ...] | None = None, *, reuse: bool = False) -> tuple[str | None, bool]:
        """A snapshot of `edits` alone if it can be, else of everything (`reuse`: the latest one, if nothing changed
        since it); its tree, and whether it is the latter."""
        if edits is not None and (tree := self._files_only(edits)) is not None:
            return tree, False
        try:
            if reuse and (tree := self.shadow.unchanged()) is not None:
                return tree, True
            return self.shadow.snapshot(), True
        except CheckpointError as exc:
            self._failure = str(exc)
            return None, True

    def _files_only(self, edits: tuple[str, ...]) -> str | None:
        """`ShadowRepo.snapshot_files`; None when only a whole snapshot will do, or it failed (one is taken next)."""
        try:
            return self.shadow.snapshot_files(edits)
        except CheckpointError as exc:
            self._failure = str(exc)
            return None

    def _absorb(self, before: str, after: str) -> None:
        self._skipped |= self.shadow.skipped
        try:
            changed = self.shadow.changes(before, after)
        except CheckpointError as exc:
            self._failure = str(exc)
            return
        for path, (old, new) in changed.items():
            first = self._changes.get(path, (old, new))[0]
            self._changes[path] = (first, new)


def _can_change_project(tool_def: ToolDefinition) -> bool:
    if tool_def.name in EDIT_TOOL_NAMES or tool_def.name in SHELL_TOOL_NAMES:
        return True
    return (tool_def.metadata or {}).get(MCP_PERMISSION_KEY) is not None and not is_read_only(tool_def)
