"""`CheckpointLog`: the checkpoints of sessions, in sessions.db beside them.

A checkpoint is a turn that changed the project's files (`kind` "turn": the agent's changes in it, each file's state
before its first change and after its last), or a rewind (`kind` "rewind": what it changed, from the files as they
were, the user's own edits included, to what it restored), so a rewind can be rewound too. The file contents live in
the project's shadow repository (code_puppy/checkpoints/shadow.py); a row holds their ids.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from .schema import Database, timestamp

Entry = tuple[str, str]
Change = tuple[Entry | None, Entry | None]
Kind = Literal["turn", "rewind"]


@dataclass(frozen=True)
class Checkpoint:
    id: int
    session_id: str
    project_dir: str
    kind: Kind
    prompt: str
    """The user's prompt of the turn ("" for a rewind)."""
    run_ids: tuple[str, ...]
    """The turn's runs, in order: the first one's messages start the turn in the history."""
    changes: Mapping[str, Change]
    skipped: tuple[str, ...]
    """Files left out for their size: not restorable."""
    created_at: datetime
    rewound_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session_id": self.session_id,
            "kind": self.kind,
            "prompt": self.prompt,
            "created_at": self.created_at.isoformat(),
            "rewound": self.rewound_at is not None,
            "run_ids": list(self.run_ids),
            "files": [
                {"path": path, "change": "added" if before is None else "deleted" if after is None else "modified"}
                for path, (before, after) in sorted(self.changes.items())
            ],
            "skipped": list(self.skipped),
        }


_COLUMNS = "id, session_id, project_dir, kind, prompt, run_ids, changes, skipped, created_at, rewound_at"


def _checkpoint(row: Sequence[Any]) -> Checkpoint:
    changes: dict[str, list[list[str] | None]] = json.loads(row[6])
    return Checkpoint(
        id=row[0],
        session_id=row[1],
        project_dir=row[2],
        kind=row[3],
        prompt=row[4],
        run_ids=tuple(json.loads(row[5])),
        changes={
            path: (
                (before[0], before[1]) if before else None,
                (after[0], after[1]) if after else None,
            )
            for path, (before, after) in changes.items()
        },
        skipped=tuple(json.loads(row[7])),
        created_at=datetime.fromisoformat(row[8]),
        rewound_at=datetime.fromisoformat(row[9]) if row[9] else None,
    )


class CheckpointLog:
    """The checkpoints in a sessions database."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def add(
        self,
        session_id: str,
        project_dir: Path,
        *,
        kind: Kind,
        changes: Mapping[str, Change],
        prompt: str = "",
        run_ids: Sequence[str] = (),
        skipped: Sequence[str] = (),
        rewinds: Sequence[int] = (),
    ) -> int:
        """Record a checkpoint, and mark `rewinds` (checkpoint ids) rewound in the same transaction; its id."""
        now = timestamp(datetime.now(UTC))
        with self._database.write() as db:
            db.executemany(
                "UPDATE checkpoints SET rewound_at = ? WHERE id = ? AND rewound_at IS NULL",
                [(now, checkpoint_id) for checkpoint_id in rewinds],
            )
            row = db.execute(
                """
                INSERT INTO checkpoints (session_id, project_dir, kind, prompt, run_ids, changes, skipped, created_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id
                """,
                (
                    session_id,
                    str(project_dir.resolve()),
                    kind,
                    prompt,
                    json.dumps(list(run_ids)),
                    json.dumps({path: [before, after] for path, (before, after) in changes.items()}),
                    json.dumps(sorted(skipped)),
                    now,
                ),
            ).fetchone()
        return row[0]

    def of_session(self, session_id: str) -> list[Checkpoint]:
        """A session's checkpoints, oldest first."""
        with self._database.read() as db:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM checkpoints WHERE session_id = ? ORDER BY id", (session_id,)
            ).fetchall()
        return [_checkpoint(row) for row in rows]

    def latest_session(self, project_dir: Path) -> tuple[str, datetime] | None:
        """The session of `project_dir` with the newest checkpoint, and that checkpoint's time."""
        with self._database.read() as db:
            row = db.execute(
                "SELECT session_id, created_at FROM checkpoints WHERE project_dir = ? ORDER BY id DESC LIMIT 1",
                (str(project_dir.resolve()),),
            ).fetchone()
        return None if row is None else (row[0], datetime.fromisoformat(row[1]))

    def get(self, checkpoint_id: int) -> Checkpoint | None:
        with self._database.read() as db:
            row = db.execute(f"SELECT {_COLUMNS} FROM checkpoints WHERE id = ?", (checkpoint_id,)).fetchone()
        return None if row is None else _checkpoint(row)


def checkpoint_lines(found: Sequence[Checkpoint]) -> list[str]:
    """One line per checkpoint: id, time, what it was, files changed; rewound ones marked."""
    lines: list[str] = []
    for item in found:
        when = item.created_at.astimezone().strftime("%Y-%m-%d %H:%M")
        what = f"“{' '.join(item.prompt.split())[:50]}”" if item.kind == "turn" else "(a rewind)"
        count = len(item.changes)
        files = ", ".join(sorted(item.changes)[:4]) + (", …" if count > 4 else "")
        mark = " [rewound]" if item.rewound_at is not None else ""
        lines.append(f"#{item.id:<4} {when}  {what}  {count} file{'' if count == 1 else 's'}: {files}{mark}")
    return lines
