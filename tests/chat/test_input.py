"""Slash-command registry, `/` and `@path` completion, `@path` expansion, per-project history, stdin messages."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from code_puppy.chat.commands import CommandRegistry, split_command
from code_puppy.chat.input import ChatCompleter, ProjectFiles, expand_mentions, history_path, private_history
from code_puppy.headless.stdin_messages import parse_user_message


def registry() -> CommandRegistry:
    commands = CommandRegistry()
    for name in ("help", "model", "new", "sessions", "resume", "usage", "permissions", "steer", "queue", "exit"):
        commands.register(name, lambda args: None, f"{name} help")
    return commands


def test_unknown_commands_get_the_nearest_suggestion() -> None:
    commands = registry()
    assert [commands.suggest(typo) for typo in ("hepl", "sesions", "perm", "q", "zzz")] == [
        "help",
        "sessions",
        "permissions",
        "queue",
        None,
    ]


def test_a_plugin_registers_a_command_and_may_replace_a_builtin() -> None:
    commands = registry()
    commands.register("/lint", lambda args: f"linted {args}", "run the linter")
    commands.register("help", lambda args: "plugin help", "better help")
    assert commands.get("lint") is not None and commands.get("help") is not None
    assert commands.get("help").handler("") == "plugin help"  # type: ignore[union-attr]
    assert "/lint         run the linter" in commands.help_lines()
    with pytest.raises(ValueError, match="one word"):
        commands.register("two words", lambda args: None, "")


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        ("/help", ("help", "")),
        ("/model  openai:gpt-5.1 ", ("model", "openai:gpt-5.1")),
        ("/", None),
        ("//comment", None),
        ("/usr/bin/env is a path", None),
        ("plain text", None),
    ],
)
def test_split_command(line: str, parsed: tuple[str, str] | None) -> None:
    assert split_command(line) == parsed


def completions(completer: ChatCompleter, text: str) -> list[str]:
    return [c.text for c in completer.get_completions(Document(text), CompleteEvent(completion_requested=True))]


def test_completion_of_commands_and_project_paths(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("")
    (tmp_path / "README.md").write_text("")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("")
    completer = ChatCompleter(ProjectFiles(tmp_path), registry().names)
    assert completions(completer, "/se") == ["/sessions"]
    assert completions(completer, "look at @sr") == ["@src/", "@src/app.py"]
    assert completions(completer, "@app") == ["@src/app.py"]  # a substring match anywhere in the path
    assert completions(completer, "@") == ["@src/", "@README.md", "@src/app.py"]
    assert completions(completer, "mail me@example") == []


def test_mentions_attach_files_and_listings_inside_the_project(tmp_path: Path) -> None:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\n")
    (tmp_path / "secret.txt").write_text("outside")
    text, attached = expand_mentions("explain @src/app.py, then @src and @../secret.txt @missing", root)
    assert attached == ["src/app.py", "src"]
    assert text == (
        "explain @src/app.py, then @src and @../secret.txt @missing\n\n"
        "<file path=\"src/app.py\">\nprint('hi')\n</file>\n\n"
        '<directory path="src">\napp.py\n</directory>'
    )
    assert expand_mentions("no mentions here", root) == ("no mentions here", [])


def test_prompt_history_is_kept_per_project(tmp_path: Path) -> None:
    one, two = history_path(tmp_path, tmp_path / "a" / "app"), history_path(tmp_path, tmp_path / "b" / "app")
    assert one != two and one.parent == two.parent == tmp_path / "history"
    assert one == history_path(tmp_path, tmp_path / "a" / "app")


def _modes(*paths: Path) -> tuple[int, ...]:
    return tuple(stat.S_IMODE(path.stat().st_mode) for path in paths)


def test_prompt_history_is_created_private_to_the_user(tmp_path: Path) -> None:
    data = tmp_path / "data"
    previous = os.umask(0o022)
    try:
        history = private_history(data, tmp_path / "app")
    finally:
        os.umask(previous)
    assert history == history_path(data, tmp_path / "app") and history.read_text() == ""
    assert _modes(data, history.parent, history) == (0o700, 0o700, 0o600)


def test_a_prompt_history_left_readable_to_others_is_closed_and_kept(tmp_path: Path) -> None:
    history = history_path(tmp_path, tmp_path / "app")
    history.parent.mkdir(mode=0o755)
    history.write_text("\n# 2026-01-01\n+my secret prompt\n")
    history.chmod(0o644)
    assert private_history(tmp_path, tmp_path / "app") == history
    assert _modes(history.parent, history) == (0o700, 0o600)
    assert history.read_text() == "\n# 2026-01-01\n+my secret prompt\n"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"type": "user", "text": "hi"}', "hi"),
        ('{"type": "user", "message": {"role": "user", "content": "hi"}}', "hi"),
        ('{"type": "user", "message": {"content": [{"type": "text", "text": "a"}, {"type": "image"}]}}', "a"),
    ],
)
def test_stdin_user_messages(line: str, expected: str) -> None:
    assert parse_user_message(line) == expected


@pytest.mark.parametrize(
    ("line", "error"),
    [("{", "not JSON"), ('{"type": "result"}', "not a user message"), ('{"type": "user", "text": " "}', "no text")],
)
def test_bad_stdin_lines_say_why(line: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_user_message(line)


def builtin_registry() -> CommandRegistry:
    from typing import Any, cast

    from code_puppy.chat.slash import register_builtins

    commands = CommandRegistry()
    register_builtins(commands, cast(Any, None))  # the handlers are not called here
    return commands


def test_claude_and_codex_names_run_our_commands() -> None:
    commands = builtin_registry()
    aliases = ("clear", "cost", "quit", "reset", "tokens", "models")
    assert {alias: commands.get(alias).name for alias in aliases} == {  # type: ignore[union-attr]
        "clear": "new",
        "cost": "usage",
        "quit": "exit",
        "reset": "new",  # aider's
        "tokens": "usage",
        "models": "model",
    }
    assert "/new          start a new session (also /clear, /reset)" in commands.help_lines()
    assert set(aliases) <= set(commands.names())  # completed, and never shadowed by a file command


def test_suggestions_are_typos_never_names_that_share_letters() -> None:
    commands = builtin_registry()
    commands.register("compact", lambda args: None, "")
    without_aliases = registry()
    without_aliases.register("compact", lambda args: None, "")
    without_aliases.register("init", lambda args: None, "")
    assert [without_aliases.suggest(name) for name in ("cost", "quit", "clear")] == [None, None, None]
    assert [commands.suggest(name) for name in ("hepl", "compat", "exti", "rebase", "status", "review")] == [
        "help",
        "compact",
        "exit",
        None,
        None,
        None,
    ]


def test_a_plugin_command_named_like_an_alias_replaces_it() -> None:
    commands = builtin_registry()
    commands.register("clear", lambda args: "cleared the screen", "clear the screen")
    assert commands.get("clear").handler("") == "cleared the screen"  # type: ignore[union-attr]
