"""Agent Skills for the agent: the harness `Skills` over every skills folder (`definitions.folders`), each skill
validated on its own, so one broken `SKILL.md` is one line and the others still load."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai_harness.skills import Skills

from code_puppy.definitions.files import Loaded, Problem, folders, skill_files


def skill_capabilities(project_root: Path) -> Loaded[AbstractCapability[Any]]:
    """One harness `Skills` per skill that validates, the first of each name (project first, `.code-puppy/` first).

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
                    skills = Skills(folder, include=[name])
                except (ValueError, OSError, UnicodeDecodeError) as exc:
                    loaded.problems.append(Problem(skill_file, f"{_first_line(exc, skill_file)}; skipped"))
                    continue
            # Fields other agents act on (`allowed-tools`, `model`) are accepted and not acted on, as documented.
            for warning in caught:
                if "exceed" in str(warning.message):
                    loaded.notes.append(str(warning.message))
            chosen[name] = skill_file
            loaded.items.append(skills)
    return loaded


def skill_names(capabilities: list[AbstractCapability[Any]]) -> set[str]:
    """The names of the skills `skill_capabilities` loaded."""
    return {name for skills in capabilities if isinstance(skills, Skills) for name in skills.include or ()}


def _first_line(exc: Exception, skill_file: Path) -> str:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text.replace(f"{skill_file} ", "").replace(f" in {skill_file}", "").replace(str(skill_file), "SKILL.md")
