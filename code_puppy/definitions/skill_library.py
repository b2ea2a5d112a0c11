"""Agent Skills for the agent: each skill validated on its own by the harness `Skills` (so one broken `SKILL.md` is
one line and the others still load), then offered as a deferred capability whose instructions, once the model loads
it, start with the skill's folder and its files: a skill's `references/` and scripts are read from there (the file
tools may read the loaded skills' folders even outside the project, `ProjectFileSystem.read_roots`)."""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic_ai.capabilities import AbstractCapability, Capability
from pydantic_ai_harness.skills import Skills

from code_puppy.definitions.files import Loaded, Problem, folders, skill_files
from code_puppy.definitions.frontmatter import split_frontmatter

MAX_LISTED_FILES = 40
"""Files of a skill's folder named when it is loaded; the rest are counted."""


class SkillCapability(Capability[Any]):
    """One skill, deferred: its name and description in the catalog, its folder and body once loaded."""

    folder: Path

    def __init__(self, *, name: str, description: str, body: str, folder: Path) -> None:
        super().__init__(
            id=name, description=description, instructions=skill_instructions(name, body, folder), defer_loading=True
        )
        self.folder = folder


def skill_instructions(name: str, body: str, folder: Path) -> str:
    """What loading a skill gives the model: its folder (absolute or `~/`), the files in it, then its body."""
    files = _files(folder)
    listed = ", ".join(files[:MAX_LISTED_FILES]) + (
        f" and {len(files) - MAX_LISTED_FILES} more" if len(files) > MAX_LISTED_FILES else ""
    )
    where = f"This skill's folder is {_shown(folder)}; paths its instructions give are relative to it."
    inventory = f"Its files: {listed}." if files else "It holds no other files."
    return f"# Skill: {name}\n\n{where} {inventory}\n\n{body}".rstrip()


def skill_capabilities(project_root: Path) -> Loaded[AbstractCapability[Any]]:
    """One capability per skill that validates, the first of each name (project first, `.code-puppy/` first).

    A skill's scripts are not run by loading it: the model runs them with the shell tool, under the policy.
    """
    loaded: Loaded[AbstractCapability[Any]] = Loaded()
    chosen: dict[str, Path] = {}
    for folder, _scope in folders(project_root, "skills"):
        for skill_file in skill_files(folder):
            name = skill_file.parent.name
            if name in chosen:
                loaded.notes.append(f"skill '{name}' in {skill_file} is shadowed by {chosen[name]}")
                continue
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    Skills(folder, include=[name])
                    fields, body = split_frontmatter(skill_file.read_text(encoding="utf-8"), required=True)
                except (ValueError, OSError, UnicodeDecodeError) as exc:
                    loaded.problems.append(Problem(skill_file, f"{_refusal(exc, skill_file)}; skipped"))
                    continue
            # Fields other agents act on (`allowed-tools`, `model`) are accepted and not acted on, as documented.
            for warning in caught:
                if "exceed" in str(warning.message):
                    loaded.notes.append(str(warning.message))
            chosen[name] = skill_file
            description = fields.get("description", "")
            description = description.strip() if isinstance(description, str) else " ".join(description)
            loaded.items.append(
                SkillCapability(name=name, description=description, body=body, folder=skill_file.parent)
            )
    return loaded


def skill_names(capabilities: list[AbstractCapability[Any]]) -> set[str]:
    """The names of the skills `skill_capabilities` loaded."""
    return {skill.id for skill in capabilities if isinstance(skill, SkillCapability) and skill.id is not None}


def skill_folders(capabilities: Sequence[AbstractCapability[Any]], *, project_root: Path) -> tuple[Path, ...]:
    """The folders of the user's skills `skill_capabilities` loaded: what the file tools may read outside the
    project. A project's skill is read as a project file; its folder is never one of these, so a link out of the
    project (`.claude/skills/x -> ~/.ssh`) opens nothing outside."""
    root = project_root.absolute()
    return tuple(
        skill.folder
        for skill in capabilities
        if isinstance(skill, SkillCapability) and not skill.folder.absolute().is_relative_to(root)
    )


def _shown(folder: Path) -> str:
    """`folder` as `~/…` under the home directory, else absolute: a path the file tools and the shell both take."""
    folder = folder.absolute()
    try:
        return "~/" + folder.relative_to(Path.home()).as_posix()
    except ValueError:
        return str(folder)


def _files(folder: Path) -> list[str]:
    """The files in a skill's folder but `SKILL.md`, relative to it, by path; hidden ones left out."""
    found: list[str] = []
    for directory, subfolders, names in os.walk(folder):
        subfolders[:] = sorted(name for name in subfolders if not name.startswith("."))
        relative = Path(directory).relative_to(folder)
        found += [(relative / name).as_posix() for name in sorted(names) if not name.startswith(".")]
    return [name for name in found if name != "SKILL.md"]


_BAD_NAME = re.compile(r"Invalid skill name '(.*)' in ")
_MISMATCH = re.compile(r"Skill name '(.*)' in .* must match its parent directory '(.*)'")


def _refusal(exc: Exception, skill_file: Path) -> str:
    """The harness's reason as one readable sentence about this skill."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if match := _BAD_NAME.match(text):
        return (
            f"'{match[1]}' cannot be a skill's name (at most 64 lowercase letters, digits and single hyphens, "
            "not starting or ending with a hyphen)"
        )
    if match := _MISMATCH.match(text):
        return f"its name '{match[1]}' differs from its folder's '{match[2]}' (a skill is named by its folder)"
    return text.replace(f" in {skill_file}", "").replace(f"{skill_file} ", "").replace(str(skill_file), "SKILL.md")
