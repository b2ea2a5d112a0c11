"""The bundled shell_hooks plugin in process: the real plugin loaded by discovery, its hooks called through the
`PluginHost`, real shell commands in a real project. The headless path is tested end to end in
test_bundled_plugins.py, Claude Code's files in a project in test_file_definitions.py."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, cast

import pytest

from code_puppy.config import Settings
from code_puppy.plugins import PromptBlocked, ToolDecision
from code_puppy.plugins.discovery import load_plugins
from code_puppy.plugins.host import PluginHost
from code_puppy.sessions.session import Session
from code_puppy.trust import trust_project

BLOCKED = "Blocked by plugin shell_hooks: "


async def hooks(project: Path, **events: list[dict[str, Any]]) -> PluginHost:
    """The plugins of `project` with `[plugins.shell_hooks]` configured with `events`, started."""
    settings = Settings.model_validate({"plugins": {"shell_hooks": events}})
    host = load_plugins(settings, project, stderr=io.StringIO())
    await host.startup(settings)
    return host


def command(line: str, **options: Any) -> dict[str, Any]:
    """One matcher group of one command."""
    return {"matcher": options.pop("matcher", ""), "hooks": [{"command": line, **options}]}


def reports(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.splitlines()


@pytest.mark.parametrize(
    ("line", "told", "reported"),
    [
        ("exit 0", None, None),
        ("echo 'no shell today' >&2; exit 2", "no shell today", None),
        ("exit 2", "blocked by the hook `exit 2`", None),
        ("""echo '{"decision": "block", "reason": "not now"}'""", "not now", None),
        ("""echo '{"decision": "block"}'""", """blocked by the hook `echo '{"decision": "block"}'`""", None),
        ("""echo '{"decision": "approve", "reason": "fine"}'""", "allow", None),
        (
            """echo '{"hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": "no"}}'""",
            "no",
            None,
        ),
        (
            """echo '{"hookSpecificOutput": {"permissionDecision": "deny"}}'""",
            """denied by the hook `echo '{"hookSpecificOutput": {"permissionDecision": "deny"}}'`""",
            None,
        ),
        ("""echo '{"hookSpecificOutput": {"permissionDecision": "allow"}}'""", "allow", None),
        ("""echo '{"hookSpecificOutput": "deny"}'""", None, None),
        ("""echo '{"decision": {"not": "a string"}}'""", None, None),
        ("echo '[\"block\"]'", None, None),
        ("echo 'block'", None, None),
        ("""echo '{"decision": "block"}'; exit 1""", None, "exited 1: no output"),
        ("echo first >&2; echo; echo last >&2; exit 3", None, "exited 3: last"),
        ("kill -9 $$", None, "exited -9: no output"),
        ("sleep 5", None, "timed out after 0.2s"),
    ],
)
async def test_pre_tool_use_blocks_on_exit_2_or_a_json_decision_and_nothing_else(
    code_puppy_home: Path, project: Path, capsys: pytest.CaptureFixture[str], line: str, told: str, reported: str
) -> None:
    host = await hooks(project, PreToolUse=[command(line, timeout=0.2)])
    decision = await host.pre_tool_call("shell", {"command": "ls"}, Session.in_memory())
    expected = ToolDecision("allow") if told == "allow" else ToolDecision("deny", BLOCKED + told) if told else None
    assert decision == expected
    assert reports(capsys) == (
        [] if reported is None else [f"code-puppy: shell_hooks: PreToolUse hook `{line}` {reported}"]
    )


async def test_a_matcher_is_a_whole_regex_over_the_name_or_its_claude_code_names(
    code_puppy_home: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matchers = ["", "*", "Bash", "read", "read_file", "Read|Write", "(", "shell|grep", "Glob"]
    host = await hooks(
        project, PreToolUse=[command(f"echo '{matcher}' >> fired.log", matcher=matcher) for matcher in matchers]
    )

    async def fired(tool_name: str) -> list[str]:
        (project / "fired.log").write_text("")
        assert await host.pre_tool_call(tool_name, {}, Session.in_memory()) is None
        return sorted((project / "fired.log").read_text().splitlines())

    assert await fired("read_file") == sorted(["", "*", "read_file", "Read|Write"])
    assert await fired("shell") == sorted(["", "*", "Bash", "shell|grep"])
    assert await fired("list_files") == sorted(["", "*", "Glob"])
    assert await fired("web_fetch") == sorted(["", "*"])
    assert reports(capsys) == []


async def test_every_event_gets_its_json_in_the_project_with_the_project_in_the_environment(
    code_puppy_home: Path, project: Path
) -> None:
    record = 'cat > event.json; pwd > where.txt; echo "$CLAUDE_PROJECT_DIR $CODE_PUPPY_PROJECT_DIR" > env.txt'
    host = await hooks(project, PostToolUse=[command(record)])
    session = Session.in_memory()
    await host.post_tool_call("grep", {"pattern": "x", "path": "src"}, ["src/a.py:1: x"], session, "call-1")
    assert json.loads((project / "event.json").read_text()) == {
        "session_id": session.id,
        "transcript_path": None,
        "cwd": str(project),
        "permission_mode": "ask",
        "hook_event_name": "PostToolUse",
        "tool_name": "grep",
        "tool_input": {"pattern": "x", "path": "src"},
        "tool_use_id": "call-1",
        "tool_response": ["src/a.py:1: x"],
    }
    assert (project / "where.txt").read_text() == f"{project}\n"
    assert (project / "env.txt").read_text() == f"{project} {project}\n"


async def test_post_tool_use_blocks_and_context_are_feedback_for_the_model_and_shown_to_the_user(
    code_puppy_home: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lint = "echo 'lint: 3 warnings' >&2; exit 2"
    decision = """echo '{"decision": "block", "reason": "format it"}'"""
    context = """echo '{"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "42 tests"}}'"""
    host = await hooks(
        project,
        PostToolUse=[command(lint), command(decision, matcher="Write"), command("exit 0"), command(context)],
    )
    feedback = await host.post_tool_call("write_file", {"path": "a.py", "content": ""}, "wrote", Session.in_memory())
    assert feedback == [
        f"[plugin shell_hooks] PostToolUse hook `{lint}` says: lint: 3 warnings\n\n"
        f"PostToolUse hook `{decision}` says: format it\n\n42 tests"
    ]
    assert reports(capsys) == [
        f"code-puppy: shell_hooks: PostToolUse hook `{lint}` says (after the call ran; the model is told): "
        "lint: 3 warnings",
        f"code-puppy: shell_hooks: PostToolUse hook `{decision}` says (after the call ran; the model is told): "
        "format it",
    ]


async def test_user_prompt_submit_adds_what_its_hooks_print_and_exit_2_blocks(
    code_puppy_home: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    context = """echo '{"hookSpecificOutput": {"additionalContext": "  from json  "}}'"""
    failed = "echo 'not this'; exit 1"
    host = await hooks(
        project,
        UserPromptSubmit=[
            command("echo '  plain context  '"),
            command(context),
            command(failed),
            command("echo '{}'"),
            command("true"),
        ],
    )
    assert await host.user_prompt_submit("fix it", Session.in_memory()) == ("fix it", ["plain context\n\nfrom json"])
    assert reports(capsys) == [f"code-puppy: shell_hooks: UserPromptSubmit hook `{failed}` exited 1: no output"]

    quiet = await hooks(project, UserPromptSubmit=[command("cat > /dev/null")])
    assert await quiet.user_prompt_submit("fix it", Session.in_memory()) == ("fix it", [])
    gate = await hooks(project, UserPromptSubmit=[command("echo 'not on fridays' >&2; exit 2")])
    with pytest.raises(PromptBlocked) as blocked:
        await gate.user_prompt_submit("deploy", Session.in_memory())
    assert (blocked.value.reason, blocked.value.plugin) == ("not on fridays", "shell_hooks")


async def test_stop_hooks_reasons_become_one_follow_up_and_the_next_stop_knows(
    code_puppy_home: Path, project: Path
) -> None:
    log = "cat >> stops.jsonl; echo >> stops.jsonl"
    host = await hooks(
        project,
        Stop=[
            command(f"{log}; test -f done || {{ echo 'run the tests' >&2; exit 2; }}"),
            command("test -f done || { echo 'and the linter' >&2; exit 2; }"),
        ],
    )
    session = Session.in_memory()
    no_result = cast(Any, None)  # shell_hooks' turn_end does not take the run's result
    assert await host.turn_end(no_result, session) == "run the tests\n\nand the linter"
    (project / "done").touch()
    assert await host.turn_end(no_result, session) is None
    assert await host.turn_end(no_result, session) is None
    (project / "done").unlink()
    assert await host.turn_end(no_result, session) == "run the tests\n\nand the linter"
    await host.user_prompt_submit("next", session)  # a new user turn: not a follow-up any more
    assert await host.turn_end(no_result, session) == "run the tests\n\nand the linter"
    stops = [json.loads(line) for line in (project / "stops.jsonl").read_text().splitlines()]
    assert [(stop["hook_event_name"], stop["stop_hook_active"]) for stop in stops] == [
        ("Stop", False),
        ("Stop", True),
        ("Stop", False),
        ("Stop", False),
        ("Stop", False),
    ]


CLAUDE_RECORDS = "python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)))' >> {}"
"""A hook command appending the event it gets, as one JSON line, to a file."""


def claude_settings(project: Path, relative: str, hooks: dict[str, Any]) -> None:
    path = project / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"permissions": {}, "hooks": hooks}))


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_claude_code_hooks_of_both_files_get_claude_codes_names_and_ours_keep_ours(
    code_puppy_home: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claude_settings(
        project,
        ".claude/settings.json",
        {
            "PreToolUse": [
                {
                    "matcher": "Edit|Grep",
                    "hooks": [{"type": "command", "command": CLAUDE_RECORDS.format("claude.jsonl"), "async": True}],
                },
                {"matcher": "Read", "hooks": [{"type": "command", "command": "sleep 5", "timeout": 0.2}]},
            ],
            "Notification": [{"hooks": [{"type": "command", "command": "touch notified"}]}],
        },
    )
    claude_settings(
        project,
        ".claude/settings.local.json",
        {"Stop": [{"hooks": [{"type": "command", "command": CLAUDE_RECORDS.format("local.jsonl")}]}]},
    )
    trust_project(project)
    host = await hooks(project, PreToolUse=[command(CLAUDE_RECORDS.format("ours.jsonl"), matcher="edit_file")])
    session = Session.in_memory()
    edit = {"path": "a.py", "old_text": "1", "new_text": "2"}
    assert await host.pre_tool_call("edit_file", edit, session, "c1") is None
    assert await host.pre_tool_call("grep", {"pattern": "x", "path": "src"}, session, "c2") is None
    assert await host.pre_tool_call("read_file", {"path": "a.py"}, session, "c3") is None
    assert await host.turn_end(cast(Any, None), session) is None
    transcript = str(code_puppy_home / "transcripts" / f"{session.id}.jsonl")
    # Claude Code's name for the mode (ask is its "default"); our own hooks get ours.
    base = {"session_id": session.id, "transcript_path": transcript, "cwd": str(project), "permission_mode": "default"}
    assert events(project / "claude.jsonl") == [
        base
        | {
            "hook_event_name": "PreToolUse",
            "tool_name": "Edit",
            "tool_input": {"file_path": str(project / "a.py"), "old_string": "1", "new_string": "2"},
            "tool_use_id": "c1",
        },
        base
        | {
            "hook_event_name": "PreToolUse",
            "tool_name": "Grep",
            "tool_input": {"pattern": "x", "path": "src"},
            "tool_use_id": "c2",
        },
    ]
    assert events(project / "ours.jsonl") == [
        base
        | {
            "transcript_path": None,
            "permission_mode": "ask",
            "hook_event_name": "PreToolUse",
            "tool_name": "edit_file",
            "tool_input": edit,
            "tool_use_id": "c1",
        }
    ]
    assert events(project / "local.jsonl") == [base | {"hook_event_name": "Stop", "stop_hook_active": False}]
    assert Path(transcript).read_text() == ""  # an empty session: no messages yet
    assert not (project / "notified").exists()  # nobody was asked for a permission
    assert reports(capsys) == ["code-puppy: shell_hooks: PreToolUse hook `sleep 5` timed out after 0.2s"]


async def test_a_claude_settings_file_that_cannot_be_read_is_one_line_and_the_other_still_runs(
    code_puppy_home: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claude_settings(
        project, ".claude/settings.json", {"Stop": [{"hooks": [{"type": "command", "command": "touch ran"}]}]}
    )
    (project / ".claude" / "settings.local.json").write_text('{"hooks": {"Stop": [{"hooks": [{"command": 7}]}]}}')
    trust_project(project)
    host = await hooks(project)
    assert await host.turn_end(cast(Any, None), Session.in_memory()) is None
    assert (project / "ran").exists()
    (line,) = reports(capsys)
    assert line.startswith("code-puppy: warning: .claude/settings.local.json: its hooks cannot be read (")
    assert line.endswith("); ignored")


async def test_a_trusted_projects_local_claude_settings_run_without_a_shared_one(
    code_puppy_home: Path, project: Path
) -> None:
    claude_settings(
        project, ".claude/settings.local.json", {"Stop": [{"hooks": [{"type": "command", "command": "touch ran"}]}]}
    )
    trust_project(project)
    host = await hooks(project)
    assert await host.turn_end(cast(Any, None), Session.in_memory()) is None
    assert (project / "ran").exists()


async def test_the_users_claude_settings_run_without_trust_unless_code_puppy_home_relocates_everything(
    code_puppy_home: Path, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "user"
    claude_settings(home, ".claude/settings.json", {"Stop": [{"hooks": [{"type": "command", "command": "touch ran"}]}]})
    monkeypatch.setenv("HOME", str(home))
    host = await hooks(project)
    assert await host.turn_end(cast(Any, None), Session.in_memory()) is None
    assert not (project / "ran").exists()  # CODE_PUPPY_HOME is set: nothing of the real home is read
    monkeypatch.delenv("CODE_PUPPY_HOME")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    host = load_plugins(Settings(), project, stderr=io.StringIO())  # no [plugins.shell_hooks]: the file enables it
    await host.startup(Settings())
    assert await host.turn_end(cast(Any, None), Session.in_memory()) is None
    assert (project / "ran").exists()


async def test_an_untrusted_projects_claude_hooks_do_not_run_and_only_files_with_hooks_say_so(
    code_puppy_home: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text('{"permissions": {"allow": []}, "hooks": {}}')
    claude_settings(
        project, ".claude/settings.local.json", {"Stop": [{"hooks": [{"type": "command", "command": "touch ran"}]}]}
    )
    host = await hooks(project)
    assert await host.turn_end(cast(Any, None), Session.in_memory()) is None
    assert not (project / "ran").exists()
    assert reports(capsys) == [
        "code-puppy: note: .claude/settings.local.json: its hooks do not run: this project is not trusted "
        "(`code-puppy trust`)"
    ]


CLAUDE_CODE_NAMES = {
    "shell": ["Bash"],
    "read_file": ["Read"],
    "write_file": ["Write"],
    "edit_file": ["Edit", "MultiEdit"],
    "grep": ["Grep"],
    "list_files": ["Glob", "LS"],
    "delegate_task": ["Agent", "Task"],
}
"""The documented mapping: the names of Claude Code's tools a matcher may use for each of code-puppy's."""


async def test_claude_codes_tool_names_select_the_same_tools_and_are_what_its_hooks_are_told(
    code_puppy_home: Path, project: Path
) -> None:
    names = sorted({name for aliases in CLAUDE_CODE_NAMES.values() for name in aliases})
    host = await hooks(project, PreToolUse=[command(f"echo {name} >> fired.log", matcher=name) for name in names])
    claude_settings(
        project,
        ".claude/settings.json",
        {"PreToolUse": [{"hooks": [{"type": "command", "command": CLAUDE_RECORDS.format("told.jsonl")}]}]},
    )
    trust_project(project)
    for tool, aliases in [*CLAUDE_CODE_NAMES.items(), ("create_directory", []), ("web_fetch", [])]:
        (project / "fired.log").write_text("")
        assert await host.pre_tool_call(tool, {}, Session.in_memory()) is None
        assert sorted((project / "fired.log").read_text().split()) == aliases, tool
    told = [event["tool_name"] for event in events(project / "told.jsonl")]
    # create_directory keeps its own name: a Bash hook would look for a command that is not there.
    assert told == ["Bash", "Read", "Write", "Edit", "Grep", "Glob", "Task", "create_directory", "web_fetch"]


async def test_events_and_hook_types_code_puppy_does_not_have_are_named_once_and_the_rest_runs(
    code_puppy_home: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    touch = {"type": "command", "command": "touch denied.ran"}
    claude_settings(
        project,
        ".claude/settings.json",
        {
            "PermissionDenied": [{"hooks": [touch]}],
            "PostCompact": [{"hooks": [touch]}],
            "Stop": [
                {"hooks": [{"type": "prompt", "prompt": "Is it done?"}, {"type": "command", "command": "touch ran"}]},
                {"hooks": [{"type": "prompt", "prompt": "Really?"}]},
            ],
        },
    )
    claude_settings(project, ".claude/settings.local.json", {"PermissionDenied": [{"hooks": [touch]}]})
    trust_project(project)
    host = await hooks(project)
    assert await host.turn_end(cast(Any, None), Session.in_memory()) is None
    assert await host.turn_end(cast(Any, None), Session.in_memory()) is None
    assert (project / "ran").exists() and not (project / "denied.ran").exists()
    shared = ".claude/settings.json"  # as the notes name a project's files
    assert reports(capsys) == [
        f"code-puppy: note: {shared}: PermissionDenied hooks do not run: code-puppy has no such event",
        f"code-puppy: note: {shared}: PostCompact hooks do not run: code-puppy has no such event",
        f"code-puppy: note: {shared}: `prompt` hooks do not run: code-puppy runs command hooks",
    ]


async def test_the_transcript_is_appended_to_as_the_session_grows_never_rewritten(
    code_puppy_home: Path, project: Path
) -> None:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    claude_settings(project, ".claude/settings.json", {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]})
    trust_project(project)
    host = await hooks(project)
    session = Session.in_memory()
    first_turn = [ModelRequest(parts=[UserPromptPart("one")]), ModelResponse(parts=[TextPart("1")], model_name="m")]
    await session.set_message_history(first_turn)
    await host.turn_end(cast(Any, None), session)
    path = code_puppy_home / "transcripts" / f"{session.id}.jsonl"
    before = path.read_text()
    await session.set_message_history([*first_turn, ModelRequest(parts=[UserPromptPart("two")])])
    await host.turn_end(cast(Any, None), session)
    after = path.read_text()
    assert after.startswith(before)
    records = [json.loads(line) for line in after.splitlines()]
    assert [(r["type"], r["message"]) for r in records] == [
        ("user", {"role": "user", "content": [{"type": "text", "text": "one"}]}),
        (
            "assistant",
            {"role": "assistant", "content": [{"type": "text", "text": "1"}], "type": "message", "model": "m"},
        ),
        ("user", {"role": "user", "content": [{"type": "text", "text": "two"}]}),
    ]
    assert [r["parentUuid"] for r in records] == [None, records[0]["uuid"], records[1]["uuid"]]
    assert {(r["sessionId"], r["cwd"], r["isSidechain"]) for r in records} == {(session.id, str(project), False)}
    # A compaction shortens the history: a boundary record, then the shorter history, still appended.
    await session.set_message_history([ModelRequest(parts=[UserPromptPart("summary")])])
    await host.turn_end(cast(Any, None), session)
    await session.set_message_history([ModelRequest(parts=[UserPromptPart("summary")]), first_turn[1]])
    await host.turn_end(cast(Any, None), session)
    final = path.read_text()
    assert final.startswith(after)
    added = [json.loads(line) for line in final.splitlines()[3:]]
    assert [(r["type"], r.get("subtype"), r["parentUuid"]) for r in added] == [
        ("system", "compact_boundary", records[2]["uuid"]),
        ("user", None, added[0]["uuid"]),
        ("assistant", None, added[1]["uuid"]),
    ]
    assert added[1]["message"]["content"] == [{"type": "text", "text": "summary"}]
