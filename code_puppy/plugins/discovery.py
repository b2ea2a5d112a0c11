"""Plugin discovery (DESIGN §3), in order: the bundled plugins, the `code_puppy.plugins` entry points, the user's
plugins folder, and the project's `.code-puppy/plugins/` once the user trusts its content.

A plugin is `NAME/__init__.py` or `NAME.py` in a folder, or an entry point named NAME. A later plugin with an
earlier one's name replaces it, with a one-line note. A plugin that cannot be imported is reported and left out.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TextIO

from code_puppy.config import Settings, config_dir
from code_puppy.errors import one_line
from code_puppy.plugins import ENTRY_POINT_GROUP
from code_puppy.plugins.hashed import HashedFolder
from code_puppy.plugins.host import Plugin, PluginHost
from code_puppy.trust import plugins_files, plugins_trust, project_plugins_dir, trust_project

AskTrust = Callable[[str], bool]
"""Asks the user a yes/no question; only the interactive chat has one, headless runs never ask."""


def load_plugins(
    settings: Settings,
    project_root: Path,
    *,
    ask: AskTrust | None = None,
    debug: bool = False,
    stderr: TextIO | None = None,
) -> PluginHost:
    """Find, import and register the plugins of `project_root`; `[plugins] disabled` ones, and bundled ones without
    a `[plugins.NAME]` table (they would do nothing), are listed, not imported."""
    host = PluginHost(project_dir=project_root, debug=debug, stderr=stderr)
    project, hashed = _project_plugins(project_root, ask, host)
    found = [
        *plugins_in(bundled_plugins_dir(), "bundled"),
        *(Plugin(point.name, "entry point", point.value) for point in entry_points(group=ENTRY_POINT_GROUP)),
        *plugins_in(config_dir() / "plugins", "user"),
        *project,
    ]
    active: dict[str, Plugin] = {}
    for plugin in found:
        if plugin.status == "enabled":
            if (earlier := active.get(plugin.name)) is not None:
                earlier.status = "replaced"
                host.note(
                    f"the {plugin.source} plugin {plugin.name} ({plugin.location}) replaces the {earlier.source} one"
                )
            active[plugin.name] = plugin
    for plugin in found:
        if plugin.status == "enabled" and plugin.name in settings.plugins.disabled:
            plugin.status = "disabled"
        elif (
            plugin.status == "enabled"
            and plugin.source == "bundled"
            and plugin.name not in settings.plugins.options
            and not (plugin.name == "shell_hooks" and claude_hooks_present(project_root))
        ):
            plugin.status = "idle"  # a bundled plugin does nothing until its [plugins.NAME] table configures it
        elif plugin.status == "enabled":
            try:
                plugin.namespace = _import(plugin, hashed)
            except Exception as exc:
                plugin.status = "failed"
                host.add(plugin)
                host.fail(plugin.name, f"cannot be loaded from {plugin.location}: {one_line(exc, typed=True)}", exc)
                continue
        host.add(plugin)
    return host


def claude_hooks_present(project_root: Path) -> bool:
    """Whether a Claude Code settings file (the project's, or the user's unless `CODE_PUPPY_HOME` relocates
    everything) or a file-defined agent's frontmatter has hooks: the bundled shell_hooks plugin runs them, the
    project's only once trusted."""
    from code_puppy.paths import AGENT_CONFIG_DIRS, code_puppy_home

    files = [project_root / ".claude" / "settings.json", project_root / ".claude" / "settings.local.json"]
    agents = [project_root / layout / "agents" for layout in AGENT_CONFIG_DIRS] + [config_dir() / "agents"]
    if code_puppy_home() is None:
        files.append(Path.home() / ".claude" / "settings.json")
        agents += [Path.home() / layout / "agents" for layout in (".claude", ".agents")]
    for path in files:
        try:
            if '"hooks"' in path.read_text(encoding="utf-8"):
                return True
        except (OSError, UnicodeDecodeError):
            continue
    return any(_frontmatter_has_hooks(path) for folder in agents if folder.is_dir() for path in folder.rglob("*.md"))


def _frontmatter_has_hooks(path: Path) -> bool:
    try:
        head, _, rest = path.read_text(encoding="utf-8").partition("\n---")
    except (OSError, UnicodeDecodeError):
        return False
    return head.startswith("---") and bool(rest) and any(line.startswith("hooks:") for line in head.splitlines())


def bundled_plugins_dir() -> Path | None:
    """The bundled plugins: `code_puppy/bundled_plugins` in the wheel, the top-level `plugins/` in a source checkout."""
    package = Path(__file__).parent.parent  # code_puppy/
    if (shipped := package / "bundled_plugins").is_dir():
        return shipped
    checkout = package.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "plugins").is_dir():
        return checkout / "plugins"
    return None


def plugins_in(folder: Path | None, source: str) -> list[Plugin]:
    """The `NAME/__init__.py` and `NAME.py` plugins in `folder`, by name."""
    if folder is None or not folder.is_dir():
        return []
    found: list[Plugin] = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(("_", ".")):
            continue
        if (path / "__init__.py").is_file():
            found.append(Plugin(path.name, source, str(path)))
        elif path.suffix == ".py" and path.is_file():
            found.append(Plugin(path.stem, source, str(path)))
    return found


def _project_plugins(
    project_root: Path, ask: AskTrust | None, host: PluginHost
) -> tuple[list[Plugin], HashedFolder | None]:
    """The project's plugins, enabled only when the user trusts the folder's current content (asking if possible),
    and that content as read for the trust check, which is what they run from."""
    found = plugins_in(project_plugins_dir(project_root), "project")
    if not found:
        return found, None
    folder = project_plugins_dir(project_root)
    files = plugins_files(project_root)
    trust = plugins_trust(project_root, files)
    names = ", ".join(plugin.name for plugin in found)
    if trust != "trusted" and ask is not None:
        changed = " They changed since you trusted them." if trust == "changed" else ""
        if ask(
            f"This project has plugins ({names}) in {folder}: Python code that runs inside code-puppy.{changed} "
            "Trust the project as it is now (its plugins and config files) and run them?"
        ):
            trust_project(project_root)
            trust = plugins_trust(project_root, files)  # "changed" if the folder changed while the user was asked
    if trust == "trusted":
        hashed = HashedFolder(folder, files)
        hashed.install()
        return found, hashed
    if trust == "changed":
        host.note(
            f"not running the plugins in {folder} ({names}): they changed since you trusted them "
            "(`code-puppy plugins trust` trusts them again)"
        )
    else:
        host.note(
            f"not running the plugins in {folder} ({names}): this project is not trusted "
            "(`code-puppy plugins trust` trusts them)"
        )
    for plugin in found:
        plugin.status = trust
    return found, None


def _import(plugin: Plugin, hashed: HashedFolder | None) -> object:
    """The plugin's module (or an entry point's object), imported under a name of its own; a project's plugin from
    `hashed`, the trusted content of its folder."""
    if plugin.source == "entry point":
        return EntryPoint(plugin.name, plugin.location, ENTRY_POINT_GROUP).load()
    path = Path(plugin.location)
    package = path.is_dir()
    file = path / "__init__.py" if package else path
    name = re.sub(r"\W", "_", f"code_puppy_plugin_{plugin.source}_{plugin.name}")
    if plugin.source == "project":
        assert hashed is not None  # project plugins are imported only once trusted
        spec = hashed.spec(name, file.relative_to(hashed.folder).as_posix())
    else:
        spec = importlib.util.spec_from_file_location(
            name, file, submodule_search_locations=[str(path)] if package else None
        )
    assert spec is not None and spec.loader is not None  # a .py file always has a source loader
    module = importlib.util.module_from_spec(spec)
    for loaded in [loaded for loaded in sys.modules if loaded.startswith(f"{name}.")]:
        del sys.modules[loaded]  # submodules of an earlier load of the same name
    sys.modules[name] = module  # relative imports inside a package plugin find it here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
