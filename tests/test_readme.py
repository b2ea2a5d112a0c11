"""The README is the user's document: it starts with the two set-up commands `.ci/run` reads, its contents link to
its headings, and it names every option and subcommand of the console script and every `CODE_PUPPY_*` variable the
code reads (issue 26)."""

from __future__ import annotations

import re
from pathlib import Path

import click

from code_puppy.cli.root import SUBCOMMANDS, cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    """The text of the README's `## title` section."""
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else len(README)]


def test_the_readme_starts_with_the_two_set_up_commands_ci_runs() -> None:
    assert README.splitlines()[:6] == [
        "# code-puppy",
        "",
        "```sh",
        "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/code-puppy --help",
        "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/pytest -q -n 2",
        "```",
    ]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_to_a_heading_of_the_readme_finds_it() -> None:
    in_code = False
    anchors: set[str] = set()
    for line in README.splitlines():
        in_code = in_code != line.startswith("```")
        if not in_code and (match := re.match(r"#{1,4} (.*)", line)):
            anchors.add(slug(match.group(1)))
    links = set(re.findall(r"\]\(#([^)]+)\)", README))
    assert len(links) > 20  # the contents, at least
    assert links - anchors == set()


def test_the_contents_list_every_section() -> None:
    contents = section("Contents")
    headings = re.findall(r"^## (.*)$", README, flags=re.MULTILINE)
    assert [title for title in headings if title != "Contents"] == re.findall(r"^- \[([^]]+)\]", contents, re.M)


def test_every_option_and_subcommand_of_the_console_script_is_in_the_readme() -> None:
    options = [param.opts for param in cli.params if isinstance(param, click.Option)]
    assert ["-p", "--prompt", "--print"] in options
    # An option is named by any of its spellings (`-c` for `--continue`).
    missing = [names for names in options if not any(re.search(rf"(?<![\w-]){name}\b", README) for name in names)]
    assert missing == []
    assert [name for name in SUBCOMMANDS if f"code-puppy {name}" not in README] == []


def test_every_code_puppy_variable_the_code_reads_is_in_the_environment_table() -> None:
    sources = [*(ROOT / "code_puppy").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]
    read = {name for path in sources for name in re.findall(r"\bCODE_PUPPY_[A-Z_]+\b", path.read_text())}
    assert {"CODE_PUPPY_HOME", "CODE_PUPPY_MODEL", "CODE_PUPPY_DEBUG"} <= read
    internal = {"CODE_PUPPY_SANDBOX_PROBE_API_KEY"}  # `sandbox check` sets it for its own probe
    table = section("Environment variables")
    assert sorted(name for name in read - internal if f"`{name}" not in table) == []
