"""The README's configuration reference is generated from the settings' docstrings, and kept in sync: a key added to
`code_puppy/config/settings.py` without regenerating the reference fails here, naming the command that updates it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

from code_puppy.config import Settings
from code_puppy.config.reference import COMMAND, END, README, START, field_docs, render, updated

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_holds_the_reference_as_generated() -> None:
    text = (ROOT / "README.md").read_text()
    assert README == ROOT / "README.md"
    assert updated(text) == text, f"the README's configuration reference is out of date: run `{COMMAND}`"


def test_every_key_of_every_table_is_in_the_reference_with_its_description() -> None:
    reference = render()
    tables = {name: _models_in(field.annotation) for name, field in Settings.model_fields.items()}
    headings = [line.removeprefix("#### ") for line in reference.splitlines() if line.startswith("#### `[")]
    assert [heading for heading in headings if "written as a table" not in heading] == [
        f"`[{name}.NAME]`" if "dict" in str(Settings.model_fields[name].annotation) else f"`[{name}]`"
        for name, models in tables.items()
        if models
    ]
    models: list[type[BaseModel]] = [Settings]
    while models:
        model = models.pop()
        for name, field in model.model_fields.items():
            models += [arg for arg in _models_in(field.annotation) if arg not in models]
            if model is Settings and _models_in(field.annotation):
                continue  # a table: its heading, above, and its keys
            described = field_docs(model).get(name)
            assert described, f"{model.__name__}.{name} has no docstring"
            if name != "options":  # `[plugins.NAME]`, checked below
                assert f"| `{name}` |" in reference, name
            assert " ".join(described.split()).replace("|", "\\|") in reference
    assert "| `[plugins.NAME]` | table | `{}` | trusted |" in reference


def test_the_project_column_follows_what_an_untrusted_project_may_set() -> None:
    reference = render().splitlines()
    described = "The default model: a pydantic-ai model string or a name from `[models]`."
    assert f"| `model` | string | unset | yes | {described} |" in reference
    assert sum(" | yes | " in line for line in reference) == 2  # `model` and `[history] compaction`, nothing else
    compaction = next(line for line in reference if line.startswith("| `compaction` |"))
    kinds = '`"tiered"` or `"summarize"` or `"sliding"` or `"off"`'
    assert compaction.startswith(f'| `compaction` | {kinds} | `"tiered"` | yes |')


def test_the_command_rewrites_only_the_text_between_the_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# before\n{START}\nstale\n{END}\nafter\n")
    done = subprocess.run(
        [sys.executable, "-m", "code_puppy.config.reference", str(readme)], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"updated the configuration reference in {readme}\n", "")
    assert readme.read_text() == f"# before\n{START}\n{render()}{END}\nafter\n"
    again = subprocess.run(
        [sys.executable, "-m", "code_puppy.config.reference", str(readme)], capture_output=True, text=True, check=False
    )
    assert again.stdout == f"the configuration reference in {readme} is up to date\n"


def test_a_file_without_the_markers_is_one_line_and_exit_2(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    done = subprocess.run(
        [sys.executable, "-m", "code_puppy.config.reference", str(readme)], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"{COMMAND}: {readme}: the markers {START} and {END} are not both there\n"
    assert readme.read_text() == "# no markers\n"


def _models_in(annotation: object) -> list[type[BaseModel]]:
    from typing import get_args

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]
