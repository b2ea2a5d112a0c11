"""`code-puppy agents list` and `code-puppy skills list`: what is defined in files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from code_puppy.cli.common import guarded

if TYPE_CHECKING:
    from code_puppy.definitions.files import Loaded


@click.group("agents")
def agents_group() -> None:
    """Agents defined in files: .code-puppy/agents, .agents/agents, .claude/agents (project and user)."""


@agents_group.command("list")
def agents_list() -> None:
    """Every file-defined agent: name, description, model, tools, and the file it comes from."""

    def run() -> None:
        from code_puppy.paths import find_project_root

        list_agents(find_project_root(Path.cwd()), sys.stdout, sys.stderr)

    sys.exit(guarded(run))


@click.group("skills")
def skills_group() -> None:
    """Agent Skills: .code-puppy/skills, .agents/skills, .claude/skills (project and user)."""


@skills_group.command("list")
def skills_list() -> None:
    """Every skill: name, description, and the SKILL.md it comes from."""

    def run() -> None:
        from code_puppy.paths import find_project_root

        list_skills(find_project_root(Path.cwd()), sys.stdout, sys.stderr)

    sys.exit(guarded(run))


def list_agents(project_root: Path, out: TextIO, err: TextIO) -> None:
    """One block per agent: name, description, model (and the one it runs on), tools, mode, file. An offline listing:
    no credential is needed, and an agent whose model cannot be used is listed on the model it falls back to."""
    from code_puppy.config import load_settings
    from code_puppy.definitions.files import load_agents
    from code_puppy.errors import ConfigError
    from code_puppy.models import choose_model_name, definition_model_name, model_name_problem

    settings = load_settings(project_root)
    try:
        current: str | None = choose_model_name(settings, None)
    except ConfigError:
        current = None  # nothing to resolve against: models are shown as written

    def runs_on(written: str | None) -> str:
        if current is None:
            return written or "inherit"
        name = definition_model_name(settings, written, current)
        if (why := model_name_problem(settings, name)) is not None:
            return f"{current} ({why}: runs on the session's model)"
        return name

    loaded = load_agents(project_root)
    _report(loaded, err)
    if not loaded.items:
        out.write("no agents (add .code-puppy/agents/NAME.md or .claude/agents/NAME.md)\n")
        return
    for definition in loaded.items:
        details = [
            f"model: {definition.model or 'inherit'} → {runs_on(definition.model)}",
            f"tools: {definition.grant.describe()}",
        ]
        if definition.permission_mode:
            details.append(f"at most {definition.permission_mode}")
        out.write(f"{definition.name}  ({definition.scope}: {_shown(definition.path)})\n")
        out.write(f"  {definition.description}\n  {' · '.join(details)}\n")


def list_skills(project_root: Path, out: TextIO, err: TextIO) -> None:
    """One line per skill that loads (the harness validates each, as for a run): name, description, file."""
    from code_puppy.definitions.files import load_skill_infos
    from code_puppy.definitions.skill_library import skill_capabilities, skill_names

    validated = skill_capabilities(project_root)
    _report(validated, err)
    valid = skill_names(validated.items)
    loaded = load_skill_infos(project_root)
    loaded.items = [skill for skill in loaded.items if skill.name in valid]
    if not loaded.items:
        out.write("no skills (add .code-puppy/skills/NAME/SKILL.md or .claude/skills/NAME/SKILL.md)\n")
        return
    for skill in loaded.items:
        out.write(f"{skill.name}  ({skill.scope}: {_shown(skill.path)})\n  {skill.description}\n")


def _report(loaded: Loaded[Any], err: TextIO) -> None:
    for problem in loaded.problems:
        err.write(f"code-puppy: warning: {problem}\n")
    for note in loaded.notes:
        err.write(f"code-puppy: note: {note}\n")


def _shown(path: Path) -> str:
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return str(path)
