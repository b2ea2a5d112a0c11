"""`code-puppy usage`: what code-puppy spent, by day and model."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from code_puppy.cli.common import fail, session_output, store_exists, with_store

if TYPE_CHECKING:
    from datetime import datetime


@click.command("usage")
@click.option("--since", metavar="AGE|DATE", help="Only requests since then: 24h, 7d, 2w, or a date (2026-11-01).")
@click.option(
    "--project",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="PATH",
    help="Only the requests of sessions of the project at PATH (default: every project).",
)
@click.option(
    "--output-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one object, per day and model, and the total.",
)
@click.option("--json", "as_json", is_flag=True, help="The same as --output-format json.")
def usage(*, since: str | None, project: Path | None, output_format: str, as_json: bool) -> None:
    """What code-puppy spent: cost and tokens by day and model, from the sessions database."""
    from code_puppy.paths import find_project_root

    as_json = as_json or output_format == "json"

    moment = _since(since) if since is not None else None
    root = find_project_root(project.resolve()) if project is not None else None
    if not store_exists():
        click.echo('{"days": [], "total": null}' if as_json else "no model requests recorded")
        return
    with_store(
        lambda store: session_output().usage_report(store, sys.stdout, since=moment, project_dir=root, as_json=as_json),
        readonly=True,
    )


def _since(text: str) -> datetime:
    """`24h`, `7d`, `2w` ago, or the local midnight starting a `YYYY-MM-DD` date; exit 2 for anything else."""
    from datetime import datetime, timedelta

    units = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}
    if text[:-1].isdigit() and text[-1:] in units:
        return datetime.now().astimezone() - int(text[:-1]) * units[text[-1]]
    try:
        return datetime.strptime(text, "%Y-%m-%d").astimezone()
    except ValueError:
        fail(f"--since: expected an age like 24h, 7d or 2w, or a date like 2026-11-01; got {text!r}")
