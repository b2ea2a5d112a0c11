"""Issue 25, part 6: `read_file` reads the loaded skills' folders outside the project (named absolute or `~/…`),
and nothing else outside it; writes there are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai.exceptions import ModelRetry

from code_puppy.workspace.project_files import ProjectFileSystem


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / "skills" / "pdf" / "references").mkdir(parents=True)
    (home / "skills" / "pdf" / "references" / "forms.md").write_text("# forms\nfill them\n")
    (home / "secret.txt").write_text("not for the model\n")
    (home / "skills" / "pdf" / "escape.md").symlink_to(home / "secret.txt")
    (home / "proj").mkdir()
    (home / "proj" / "README.md").write_text("# proj\n")
    monkeypatch.setenv("HOME", str(home))
    return home


async def test_a_skills_files_are_read_by_absolute_or_home_path(home: Path) -> None:
    skill = home / "skills" / "pdf"
    files = ProjectFileSystem(root_dir=home / "proj", read_roots=(skill,), content_hashes=False).get_toolset()
    assert await files.read_file("~/skills/pdf/references/forms.md") == (
        f"[{skill}/references/forms.md | 2 lines]\n     1\t# forms\n     2\tfill them\n"
    )
    assert (await files.read_file(f"{skill}/references/forms.md")).endswith("     2\tfill them\n")
    assert (await files.read_file("~/proj/README.md")).endswith("     1\t# proj\n")  # the project by `~/` too


@pytest.mark.parametrize("path", ["~/secret.txt", "../secret.txt", "~/skills/pdf/escape.md"])
async def test_nothing_else_outside_the_project_is_read(home: Path, path: str) -> None:
    files = ProjectFileSystem(root_dir=home / "proj", read_roots=(home / "skills" / "pdf",)).get_toolset()
    with pytest.raises(ModelRetry, match="outside the root directory"):
        await files.read_file(path)


async def test_a_skills_folder_is_never_written(home: Path) -> None:
    skill = home / "skills" / "pdf"
    files = ProjectFileSystem(root_dir=home / "proj", read_roots=(skill,)).get_toolset()
    with pytest.raises((ModelRetry, PermissionError)):
        await files.write_file(f"{skill}/references/forms.md", "changed\n")
    assert (skill / "references" / "forms.md").read_text() == "# forms\nfill them\n"


def test_a_project_skill_that_links_out_of_the_project_opens_nothing_outside(
    tmp_path: Path, code_puppy_home: Path
) -> None:
    """Issue 25 review: `.claude/skills/evil -> /elsewhere/evil` (a valid SKILL.md there) made `/elsewhere/evil`
    readable. Only the user's skills' folders are read roots; a project's skill is read as a project file."""
    from code_puppy.definitions.skill_library import skill_capabilities, skill_folders

    skill = "---\nname: {name}\ndescription: d\n---\nbody\n"
    elsewhere = tmp_path / "elsewhere" / "evil"
    elsewhere.mkdir(parents=True)
    (elsewhere / "SKILL.md").write_text(skill.format(name="evil"))
    project = tmp_path / "project"
    (project / ".claude" / "skills").mkdir(parents=True)
    (project / ".claude" / "skills" / "evil").symlink_to(elsewhere)
    (project / ".claude" / "skills" / "here").mkdir()
    (project / ".claude" / "skills" / "here" / "SKILL.md").write_text(skill.format(name="here"))
    (code_puppy_home / "skills" / "pdf").mkdir(parents=True)
    (code_puppy_home / "skills" / "pdf" / "SKILL.md").write_text(skill.format(name="pdf"))
    loaded = skill_capabilities(project).items
    assert len(loaded) == 3
    assert skill_folders(loaded, project_root=project) == (code_puppy_home / "skills" / "pdf",)
