"""Claude Code hooks as Claude Code runs them, on the run path (issue 25, part 2): real hook scripts from public
repositories (tests/fixtures/claude_hooks/README.md) in a trusted project's `.claude/settings.json`, run by the bundled
shell_hooks plugin around an agent driven by a scripted FunctionModel through `run_turn`."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, RunContext

from code_puppy.config import PermissionMode, Settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent, capability
from code_puppy.core.turn import TurnOutcome, run_turn
from code_puppy.definitions.agent_scope import AgentScope
from code_puppy.definitions.files import load_agents
from code_puppy.headless.sinks import TextSink
from code_puppy.plugins import ToolDecision, TurnStopped
from code_puppy.plugins.discovery import load_plugins
from code_puppy.plugins.host import PluginHost
from code_puppy.run.deps import AskUser, RunDeps
from code_puppy.sessions.catalog import title_of
from code_puppy.sessions.search import text_parts
from code_puppy.sessions.session import Session
from code_puppy.sessions.transcripts import read_transcript
from code_puppy.trust import trust_project
from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.scripted_model import Reply, scripted, tool_returns

FIXTURES = Path(__file__).parent / "fixtures" / "claude_hooks"


def claude_project(project: Path, hooks: dict[str, Any], *fixture: str) -> None:
    """`project` with Claude Code `hooks` in its `.claude/settings.json`, the fixture folders' `.claude/` copied in,
    and trusted, as `code-puppy trust` would record it."""
    for name in fixture:
        shutil.copytree(FIXTURES / name / ".claude", project / ".claude", dirs_exist_ok=True)
    (project / ".claude").mkdir(exist_ok=True)
    (project / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks}, indent=2))
    trust_project(project)


def command(line: str, matcher: str | None = None) -> dict[str, Any]:
    group: dict[str, Any] = {"hooks": [{"type": "command", "command": line}]}
    return group | ({"matcher": matcher} if matcher is not None else {})


async def approve_all(ctx: RunContext[Any], requests: DeferredToolRequests, token: str) -> DeferredToolResults:
    ASKED.extend(call.tool_name for call in requests.approvals)
    SUMMARIES.extend(str(requests.metadata[call.tool_call_id]["summary"]) for call in requests.approvals)
    return requests.build_results(approvals={call.tool_call_id: True for call in requests.approvals})


ASKED: list[str] = []
"""The calls `approve_all` was asked about."""
SUMMARIES: list[str] = []
"""What the questions `approve_all` answered said."""


async def turn(
    project: Path,
    *replies: Reply | Any,
    prompt: str = "go",
    mode: PermissionMode = "ask",
    ask: AskUser | None = None,
    session: Session | None = None,
    host: PluginHost | None = None,
) -> tuple[TurnOutcome, PluginHost, Session, Any]:
    """One turn through `run_turn` over a scripted model, with the plugins `project` has (shell_hooks among them)."""
    settings = Settings()
    if host is None:
        host = load_plugins(settings, project, stderr=io.StringIO())
        await host.startup(settings)
    session = session or Session.in_memory()
    script = scripted(*replies)
    agent = build_pydantic_agent(
        settings, AgentOptions(model=script.model, project_root=project, permission_mode=mode, plugins=host)
    )
    host.permission_mode = lambda: mode
    sink = TextSink(io.StringIO(), io.StringIO())
    outcome = await run_turn(agent, RunDeps(session, ask=ask), prompt, sink, plugins=host)
    return outcome, host, session, (agent, script)


def last_returns(messages: list[ModelMessage]) -> list[str]:
    """The contents of the tool returns of the last request in `messages`."""
    request = messages[-1]
    assert isinstance(request, ModelRequest)
    return [str(part.content) for part in request.parts if isinstance(part, ToolReturnPart)]


@pytest.fixture
def ruff_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real lint hook runs `ruff` from PATH: the one installed beside this Python (a dev dependency)."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    assert shutil.which("ruff") is not None


BROKEN = "import os\n\n\ndef total(items):\n    return sum(item.price for item in itemz)\n"
FIXED = "def total(items):\n    return sum(item.price for item in items)\n"


async def test_a_real_post_tool_use_lint_hook_makes_the_model_fix_its_code(
    code_puppy_home: Path, project: Path, ruff_on_path: None
) -> None:
    lint = "python3 $CLAUDE_PROJECT_DIR/.claude/hooks/python_ruff_lint.py"
    claude_project(project, {"PostToolUse": [command(lint, "Edit|MultiEdit|Write")]}, "ruff_lint")
    seen: list[str] = []

    def fix_what_the_hook_said(messages: list[ModelMessage], info: AgentInfo) -> Reply:
        (told,) = last_returns(messages)
        seen.append(told)
        assert "F821 Undefined name `itemz`" in told  # the model sees the hook's complaint with the result
        return [ToolCallPart("write_file", {"path": "cart.py", "content": FIXED}, tool_call_id="w2")]

    write = ToolCallPart("write_file", {"path": "cart.py", "content": BROKEN}, tool_call_id="w1")
    outcome, _, session, (_, script) = await turn(
        project, [write], fix_what_the_hook_said, "fixed it", mode="accept-edits"
    )
    assert outcome.error is None and len(script.seen) == 3
    assert (project / "cart.py").read_text() == FIXED
    # The hook fixed what ruff fixes by itself (the unused import) and sent the rest back, after the tool's result.
    (told,) = seen
    assert told.startswith("Wrote ")
    assert (
        "[plugin shell_hooks] PostToolUse hook `python3 $CLAUDE_PROJECT_DIR/.claude/hooks/python_ruff_lint.py`" in told
    )
    assert "F401" not in told
    # The fixed file passes: the hook exits 0 and the model gets the tool's result alone.
    (second,) = last_returns(script.seen[2])
    assert "shell_hooks" not in second
    assert [name for name, outcome_, _ in tool_returns(session.messages)] == ["write_file", "write_file"]


def test_the_lint_loop_end_to_end_through_the_installed_command(
    server: FakeLLMServer, code_puppy_home: Path, project: Path, ruff_on_path: None
) -> None:
    lint = "python3 $CLAUDE_PROJECT_DIR/.claude/hooks/python_ruff_lint.py"
    claude_project(project, {"PostToolUse": [command(lint, "Edit|MultiEdit|Write")]}, "ruff_lint")
    server.script(
        tool_calls(call("write_file", {"path": "cart.py", "content": BROKEN})),
        tool_calls(call("write_file", {"path": "cart.py", "content": FIXED})),
        text("Fixed."),
    )
    completed = run_cli("-p", "add a total", "--permission-mode", "accept-edits", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "Fixed.\n"), completed.stderr
    told = [m["content"] for m in server.requests[1].body["messages"] if m["role"] == "tool"]
    assert len(told) == 1 and "F821 Undefined name `itemz`" in told[0]
    assert "code-puppy: shell_hooks: PostToolUse hook `python3 $CLAUDE_PROJECT_DIR" in completed.stderr
    after = [m["content"] for m in server.requests[2].body["messages"] if m["role"] == "tool"]
    assert "F821" not in after[-1] and (project / "cart.py").read_text() == FIXED


def test_a_stopping_hook_ends_a_headless_turn_in_one_line(
    server: FakeLLMServer, code_puppy_home: Path, project: Path
) -> None:
    stop = """echo '{"continue": false, "stopReason": "deploy freeze until Monday"}'"""
    claude_project(project, {"PostToolUse": [command(stop, "Write")]})
    server.script(tool_calls(call("write_file", {"path": "a.txt", "content": "a"})), text("never sent"))
    completed = run_cli("-p", "write it", "--permission-mode", "accept-edits", cwd=project)
    assert (completed.returncode, completed.stdout, len(server.requests)) == (1, "", 1)
    assert completed.stderr == (
        "⚙ write_file(a.txt)\ncode-puppy: stopped by plugin shell_hooks: deploy freeze until Monday\n"
    )
    assert (project / "a.txt").read_text() == "a"  # PostToolUse: the call had run


def agentic_layer_hooks(scripts: tuple[str, ...]) -> dict[str, Any]:
    """The hooks of agentic-layer-python's own `.claude/settings.json` that run the scripts we carry, with `uv run`
    (which would download its tools) replaced by `python3`: the scripts need only the standard library."""
    original = json.loads((FIXTURES / "agentic_layer" / "settings.original.json").read_text())
    hooks: dict[str, Any] = {}
    for event, groups in original["hooks"].items():
        for group in groups:
            kept = [
                hook | {"command": hook["command"].replace("uv run ", "python3 ")}
                for hook in group["hooks"]
                if any(script in hook["command"] for script in scripts)
            ]
            if kept:
                hooks.setdefault(event, []).append(group | {"hooks": kept})
    return hooks


def logged(project: Path, session: Session) -> dict[str, list[dict[str, Any]]]:
    """What the real universal_hook_logger.py wrote: each event's payloads, by event name."""
    folder = project / "agents" / "hook_logs" / session.id
    return {
        path.stem: [json.loads(line)["payload"] for line in path.read_text().splitlines()]
        for path in sorted(folder.glob("*.jsonl"))
    }


async def test_a_real_projects_hooks_see_every_event_at_its_moment_with_claude_codes_fields(
    code_puppy_home: Path, project: Path
) -> None:
    claude_project(project, agentic_layer_hooks(("universal_hook_logger.py",)), "agentic_layer")
    ASKED.clear()
    write = ToolCallPart("write_file", {"path": "notes.md", "content": "# notes\n"}, tool_call_id="w1")
    shell = ToolCallPart("shell", {"command": "cat notes.md"}, tool_call_id="s1")
    outcome, host, session, _ = await turn(project, [write], [shell], "done", ask=approve_all, prompt="take notes")
    assert outcome.error is None and ASKED == ["write_file", "shell"]
    await host.pre_compact("manual", "keep the notes", session)
    await host.session_end()
    events = logged(project, session)
    assert sorted(events) == [
        "Notification",
        "PostToolUse",
        "PreCompact",
        "PreToolUse",
        "SessionEnd",
        "SessionStart",
        "Stop",
        "UserPromptSubmit",
    ]
    base = {"session_id": session.id, "cwd": str(project), "permission_mode": "default"}  # Claude Code's "ask"
    (start,) = events["SessionStart"]
    assert start | {"transcript_path": None} == base | {
        "transcript_path": None,
        "hook_event_name": "SessionStart",
        "source": "startup",
        "model": None,
    }
    (prompt,) = events["UserPromptSubmit"]
    assert prompt["prompt"] == "take notes"
    notes = str(project / "notes.md")
    assert [(e["tool_name"], e["tool_input"], e["tool_use_id"]) for e in events["PreToolUse"]] == [
        ("Write", {"file_path": notes, "content": "# notes\n"}, "w1"),
        ("Bash", {"command": "cat notes.md"}, "s1"),
    ]
    written, ran = events["PostToolUse"]
    assert written["tool_response"]["filePath"] == notes and written["tool_response"]["success"] is True
    assert ran["tool_response"] == {"stdout": "# notes\n", "stderr": "", "interrupted": False, "isImage": False}
    assert [e["message"] for e in events["Notification"]] == [
        "code-puppy needs your permission: write file notes.md",
        "code-puppy needs your permission: run `cat notes.md`",
    ]
    assert events["PreCompact"] == [
        base
        | _paths(events)
        | {"hook_event_name": "PreCompact", "trigger": "manual"}
        | {"custom_instructions": "keep the notes"}
    ]
    assert [e["reason"] for e in events["SessionEnd"]] == ["other"]
    # transcript_path is a JSONL file in Claude Code's record shape, appended to as the session grows.
    transcript = Path(written["transcript_path"])
    records = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert [(r["type"], [b["type"] for b in r["message"]["content"]]) for r in records] == [
        ("user", ["text"]),
        ("assistant", ["tool_use"]),
        ("user", ["tool_result"]),
        ("assistant", ["tool_use"]),
        ("user", ["tool_result"]),
        ("assistant", ["text"]),
    ]
    assert [r["parentUuid"] for r in records] == [None, *(r["uuid"] for r in records[:-1])]
    assert {r["sessionId"] for r in records} == {session.id}
    imported = read_transcript(transcript)  # and code-puppy's own import reads it as Claude Code's, every call paired
    assert (imported.format, imported.session_key, imported.problems) == ("claude-code", session.id, [])
    assert [(name, result) for name, result, _ in tool_returns(imported.messages)] == [
        ("Write", "success"),
        ("Bash", "success"),
    ]
    assert records[1]["message"]["content"][0] | {"id": "w1"} == {
        "type": "tool_use",
        "id": "w1",
        "name": "Write",
        "input": {"file_path": notes, "content": "# notes\n"},
    }


def _paths(events: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {"transcript_path": events["PreCompact"][0]["transcript_path"]}


async def test_a_real_pre_tool_use_guards_json_deny_reaches_the_model_and_its_allow_skips_the_question(
    code_puppy_home: Path, project: Path
) -> None:
    claude_project(project, agentic_layer_hooks(("destructive_command_blocker.py",)), "agentic_layer")
    ASKED.clear()
    wipe = ToolCallPart("shell", {"command": "rm -rf /"}, tool_call_id="s1")
    look = ToolCallPart("shell", {"command": "ls"}, tool_call_id="s2")
    outcome, _, session, _ = await turn(project, [wipe, look], "ok", ask=approve_all)
    assert outcome.error is None
    (denied, listed) = tool_returns(session.messages)
    assert denied[:2] == ("shell", "denied")
    assert denied[2].startswith(
        "Blocked by plugin shell_hooks: ⚠️ BLOCKED: Dangerous command detected\n\nCommand: rm -rf /"
    )
    # Its "allow" for a safe command runs it without the question ask mode would have asked.
    assert (listed[:2], "README.md" in listed[2], ASKED) == (("shell", "success"), True, [])


async def test_allow_never_passes_a_protected_path_and_nobody_to_ask_denies(
    code_puppy_home: Path, project: Path
) -> None:
    allow = """echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}'"""
    claude_project(project, {"PreToolUse": [command(allow)]})
    config = ToolCallPart("write_file", {"path": ".claude/agents/x.md", "content": "x"}, tool_call_id="w1")
    plain = ToolCallPart("write_file", {"path": "x.md", "content": "x"}, tool_call_id="w2")
    outcome, _, session, _ = await turn(project, [config, plain], "ok")  # headless: nobody answers
    assert outcome.error is None
    assert [(name, result) for name, result, _ in tool_returns(session.messages)] == [
        ("write_file", "denied"),
        ("write_file", "success"),
    ]
    assert not (project / ".claude" / "agents" / "x.md").exists() and (project / "x.md").read_text() == "x"


async def test_ask_asks_even_in_yolo_and_updated_input_is_what_runs(code_puppy_home: Path, project: Path) -> None:
    rewrite = (
        """python3 -c 'import json,sys; e=json.load(sys.stdin); i=e["tool_input"]; i["content"]=i["content"].upper();"""
        """ print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask","""
        """ "permissionDecisionReason": "check it", "updatedInput": i}}))'"""
    )
    claude_project(project, {"PreToolUse": [command(rewrite, "Write")]})
    ASKED.clear()
    SUMMARIES.clear()
    write = ToolCallPart("write_file", {"path": "loud.txt", "content": "quiet"}, tool_call_id="w1")
    outcome, _, _, _ = await turn(project, [write], "ok", mode="yolo", ask=approve_all)
    assert (outcome.error, ASKED, (project / "loud.txt").read_text()) == (None, ["write_file"], "QUIET")
    assert SUMMARIES == ["write file loud.txt; a hook asks (check it)"]  # the hook's reason, in the question
    (project / "loud.txt").unlink()
    outcome, _, session, _ = await turn(project, [write], "ok", mode="yolo")  # nobody to ask: denied
    assert tool_returns(session.messages)[0][:2] == ("write_file", "denied")
    assert "check it" in tool_returns(session.messages)[0][2] and not (project / "loud.txt").exists()


async def test_continue_false_stops_the_turn_and_the_user_is_told(code_puppy_home: Path, project: Path) -> None:
    stop = """echo '{"continue": false, "stopReason": "out of budget for today"}'"""
    claude_project(project, {"PreToolUse": [command(stop, "Bash")]})
    shell = ToolCallPart("shell", {"command": "touch ran"}, tool_call_id="s1")
    outcome, _, _, (_, script) = await turn(project, [shell], "never asked", mode="yolo")
    assert isinstance(outcome.error, TurnStopped)
    assert (outcome.error.plugin, outcome.error.reason, len(script.seen)) == (
        "shell_hooks",
        "out of budget for today",
        1,
    )
    assert not (project / "ran").exists()


async def test_prompt_and_session_context_reach_the_model_beside_the_prompt_never_in_its_title(
    code_puppy_home: Path, project: Path
) -> None:
    context = (
        """echo '{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "ticket 7"}}'"""
    )
    claude_project(
        project,
        {"SessionStart": [command("echo 'branch: main'", "startup")], "UserPromptSubmit": [command(context)]},
    )
    outcome, host, session, (_, script) = await turn(project, "one", prompt="fix the bug")
    assert outcome.error is None
    first = script.seen[0][-1]
    assert isinstance(first, ModelRequest)
    (prompt,) = [part for part in first.parts if isinstance(part, UserPromptPart)]
    assert [getattr(item, "content", item) for item in prompt.content] == ["fix the bug", "branch: main", "ticket 7"]
    assert title_of(session.messages) == "fix the bug"
    stored = ModelMessagesTypeAdapter.dump_json([first])[1:-1].decode()  # the message as the store keeps it
    assert text_parts(stored) == [("user", "fix the bug")]  # what the search index takes
    await turn(project, "two", prompt="and again", session=session, host=host)  # SessionStart: once per session
    (again,) = [p for p in session.messages[-2].parts if isinstance(p, UserPromptPart)]  # type: ignore[union-attr]
    assert [getattr(item, "content", item) for item in again.content] == ["and again", "ticket 7"]


async def test_failures_and_delegations_run_their_events(code_puppy_home: Path, project: Path) -> None:
    record = "cat >> events.jsonl; echo >> events.jsonl"
    claude_project(
        project,
        {
            "PostToolUseFailure": [command(record)],
            "SubagentStart": [command(record)],
            "SubagentStop": [command(record)],
        },
    )
    missing = ToolCallPart("edit_file", {"path": "nope.py", "old_text": "a", "new_text": "b"}, tool_call_id="e1")
    delegate = ToolCallPart("delegate_task", {"agent_name": "self", "task": "say hi"}, tool_call_id="d1")
    outcome, _, _, _ = await turn(project, [missing], [delegate], "hi", "done", mode="yolo")
    assert outcome.error is None
    events = [json.loads(line) for line in (project / "events.jsonl").read_text().splitlines() if line.strip()]
    assert [(e["hook_event_name"], e.get("tool_name"), e.get("agent_type"), e.get("agent_id")) for e in events] == [
        ("PostToolUseFailure", "Edit", None, None),
        ("SubagentStart", None, "self", "d1"),
        ("SubagentStop", None, "self", "d1"),
    ]
    assert "nope.py" in events[0]["error"] and events[2]["last_assistant_message"] == "hi"


async def test_an_agents_frontmatter_hooks_run_for_its_runs_once_the_project_is_trusted(
    code_puppy_home: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "careful.md").write_text(
        "---\nname: careful\ndescription: Careful.\nhooks:\n  PreToolUse:\n    - matcher: Bash\n      hooks:\n"
        "        - type: command\n          command: \"echo 'not in this agent' >&2; exit 2\"\n---\nBe careful.\n"
    )
    (definition,) = load_agents(project).items
    assert definition.hooks == {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "echo 'not in this agent' >&2; exit 2"}]}
        ]
    }
    shell = ToolCallPart("shell", {"command": "ls"}, tool_call_id="s1")

    async def runs(*, as_agent: bool) -> list[tuple[str, str]]:
        settings = Settings()
        host = load_plugins(settings, project, stderr=io.StringIO())
        await host.startup(settings)
        script = scripted([shell], "ok")
        agent = build_pydantic_agent(
            settings, AgentOptions(model=script.model, project_root=project, permission_mode="yolo", plugins=host)
        )
        scope = capability(agent, AgentScope)
        assert scope is not None
        scope.definition = definition if as_agent else None
        session = Session.in_memory()
        await run_turn(agent, RunDeps(session), "go", TextSink(io.StringIO(), io.StringIO()), plugins=host)
        return [
            (result, text[:48] if result == "denied" else text[:10])
            for _, result, text in tool_returns(session.messages)
        ]

    # They run commands: an untrusted project's agent keeps its prompt, not its hooks.
    assert await runs(as_agent=True) == [("success", "README.md\n")]
    assert capsys.readouterr().err == (
        f"code-puppy: note: {agents / 'careful.md'} (agent careful): its hooks do not run: this project is not "
        "trusted (`code-puppy trust`)\n"
    )
    trust_project(project)
    assert await runs(as_agent=True) == [("denied", "Blocked by plugin shell_hooks: not in this agent")]
    assert await runs(as_agent=False) == [("success", "README.md\n")]  # code-puppy itself: not the agent's hooks


async def test_a_permission_request_hook_answers_for_the_user_and_notification_hears_of_each_question(
    code_puppy_home: Path, project: Path
) -> None:
    answer = (
        """python3 -c 'import json,sys; e=json.load(sys.stdin); ok=e["tool_input"]["command"].startswith("ls");"""
        """ print(json.dumps({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision":"""
        """ {"behavior": "allow" if ok else "deny", "message": "only ls today"}}}))'"""
    )
    claude_project(
        project,
        {
            "PermissionRequest": [command(answer, "Bash")],
            "Notification": [command("cat >> notified.jsonl; echo >> notified.jsonl", "permission_prompt")],
        },
    )
    ASKED.clear()
    look = ToolCallPart("shell", {"command": "ls"}, tool_call_id="s1")
    touch = ToolCallPart("shell", {"command": "touch x"}, tool_call_id="s2")
    write = ToolCallPart("write_file", {"path": "a.txt", "content": "a"}, tool_call_id="w1")
    outcome, _, session, _ = await turn(project, [look, touch, write], "ok", ask=approve_all)
    assert outcome.error is None and ASKED == ["write_file"]  # the hook answered both commands
    returns = tool_returns(session.messages)
    assert [(name, result) for name, result, _ in returns] == [
        ("shell", "success"),
        ("shell", "denied"),
        ("write_file", "success"),
    ]
    assert returns[1][2] == "Denied by plugin shell_hooks: only ls today" and not (project / "x").exists()
    notified = [json.loads(line) for line in (project / "notified.jsonl").read_text().splitlines() if line]
    assert [(n["hook_event_name"], n["notification_type"]) for n in notified] == [
        ("Notification", "permission_prompt")
    ] * 3


async def test_session_start_says_resume_for_a_session_with_history(code_puppy_home: Path, project: Path) -> None:
    claude_project(project, {"SessionStart": [command("cat > start.json", "resume")]})
    settings = Settings()
    host = load_plugins(settings, project, stderr=io.StringIO())
    await host.startup(settings)
    fresh = Session.in_memory()
    assert await host.session_start(fresh) == []
    assert not (project / "start.json").exists()  # the matcher is `resume`: a new session does not match
    resumed = Session.in_memory()
    await resumed.set_message_history([ModelRequest(parts=[UserPromptPart("earlier")])])
    assert await host.session_start(resumed) == []
    assert json.loads((project / "start.json").read_text())["source"] == "resume"


PYTHON_PLUGIN = """
import code_puppy
from code_puppy.plugins import Context, ToolDecision

@code_puppy.hookimpl
def user_prompt_submit(prompt):
    return Context("the user prefers tabs")

@code_puppy.hookimpl
def pre_tool_call(tool_name, args, tool_call_id):
    if tool_name == "write_file":
        return ToolDecision(args=args | {"content": args["content"] + "# reviewed\\n"})

@code_puppy.hookimpl
def post_tool_call(tool_name, result, tool_call_id):
    return f"{tool_call_id}: remember the changelog"

@code_puppy.hookimpl
def tool_call_failed(tool_name):
    raise RuntimeError("a broken plugin")
"""


async def test_a_python_plugin_adds_context_changes_arguments_and_gives_feedback(
    code_puppy_home: Path, project: Path
) -> None:
    (code_puppy_home / "plugins").mkdir()
    (code_puppy_home / "plugins" / "reviewer.py").write_text(PYTHON_PLUGIN)
    write = ToolCallPart("write_file", {"path": "a.py", "content": "x = 1\n"}, tool_call_id="w1")
    missing = ToolCallPart("read_file", {"path": "missing.py"}, tool_call_id="r1")
    outcome, host, _, (_, script) = await turn(project, [write], [missing], "done", mode="yolo")
    assert outcome.error is None
    assert (project / "a.py").read_text() == "x = 1\n# reviewed\n"
    (told,) = last_returns(script.seen[1])
    assert told.endswith("\n\n[plugin reviewer] w1: remember the changelog")
    first = script.seen[0][-1]
    assert isinstance(first, ModelRequest)
    (prompt,) = [part for part in first.parts if isinstance(part, UserPromptPart)]
    assert [getattr(item, "content", item) for item in prompt.content] == ["go", "the user prefers tabs"]
    # The failed read reached tool_call_failed, whose error was reported as the plugin's and broke nothing.
    assert len(script.seen) == 3
    (reviewer,) = [plugin for plugin in host.plugins if plugin.name == "reviewer"]
    assert reviewer.error == "tool_call_failed raised RuntimeError: a broken plugin"


async def test_plugins_decisions_combine_a_question_wins_over_an_allowance_and_arguments_flow_on(
    code_puppy_home: Path, project: Path
) -> None:
    plugins = code_puppy_home / "plugins"
    plugins.mkdir()
    (plugins / "a_asks.py").write_text(
        "import code_puppy\nfrom code_puppy.plugins import ToolDecision\n@code_puppy.hookimpl\n"
        "def pre_tool_call(args):\n    return ToolDecision('ask', 'a wants a look', args={**args, 'content': 'A'})\n"
    )
    (plugins / "b_allows.py").write_text(
        "import code_puppy\nfrom code_puppy.plugins import ToolDecision\nSEEN = []\n@code_puppy.hookimpl\n"
        "def pre_tool_call(args):\n    SEEN.append(args['content'])\n    return ToolDecision('allow')\n"
    )
    settings = Settings()
    host = load_plugins(settings, project, stderr=io.StringIO())
    await host.startup(settings)
    decision = await host.pre_tool_call("write_file", {"path": "x", "content": "0"}, Session.in_memory(), "w1")
    assert decision == ToolDecision("ask", "a wants a look", {"path": "x", "content": "A"})
    (b,) = [plugin.namespace for plugin in host.plugins if plugin.name == "b_allows"]
    assert b.SEEN == ["A"]  # type: ignore[union-attr]


def hooks_mastery_settings() -> dict[str, Any]:
    """claude-code-hooks-mastery's own `.claude/settings.json` hooks for the scripts we carry, `uv run` replaced by
    `python3`; its UserPromptSubmit hook without `--name-agent` (that asks an LLM for a name) and its SessionStart
    hook with the script's own `--load-context` option (git state and TODO.md for the model)."""
    original = json.loads((FIXTURES / "hooks_mastery" / "settings.original.json").read_text())
    carried = {path.name for path in (FIXTURES / "hooks_mastery" / ".claude" / "hooks").glob("*.py")}
    hooks: dict[str, Any] = {}
    for event, groups in original["hooks"].items():
        for group in groups:
            kept = [
                hook
                | {
                    "command": hook["command"]
                    .replace("uv run ", "python3 ")
                    .replace(" --name-agent", "")
                    .replace("session_start.py", "session_start.py --load-context")
                }
                for hook in group["hooks"]
                if hook["command"].split("/")[-1].split()[0] in carried or event == "Setup"
            ]
            if kept:
                hooks.setdefault(event, []).append(group | {"hooks": kept})
    return hooks


async def test_a_popular_hook_collection_runs_at_each_event_blocks_with_exit_2_and_gives_the_model_context(
    code_puppy_home: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claude_project(project, hooks_mastery_settings(), "hooks_mastery")
    (project / "TODO.md").write_text("- ship the cart fix\n")
    (project / ".env").write_text("TOKEN=secret\n")
    secret = ToolCallPart("read_file", {"path": ".env"}, tool_call_id="r1")
    missing = ToolCallPart("edit_file", {"path": "nope.py", "old_text": "a", "new_text": "b"}, tool_call_id="e1")
    delegate = ToolCallPart("delegate_task", {"agent_name": "self", "task": "say hi"}, tool_call_id="d1")
    outcome, host, session, (_, script) = await turn(
        project, [secret, missing], [delegate], "hi", "done", mode="yolo", prompt="ship it"
    )
    assert outcome.error is None
    await host.pre_compact("manual", None, session)
    await host.session_end()
    # SessionStart's additionalContext reached the model beside the prompt.
    first = script.seen[0][-1]
    assert isinstance(first, ModelRequest)
    (prompt,) = [part for part in first.parts if isinstance(part, UserPromptPart)]
    typed, context = [getattr(item, "content", item) for item in prompt.content]
    assert typed == "ship it" and "Session source: startup" in context and "- ship the cart fix" in context
    # Its PreToolUse guard's exit 2 reached the model; the secret did not.
    returns = tool_returns(session.messages)
    assert returns[0] == (
        "read_file",
        "denied",
        "Blocked by plugin shell_hooks: BLOCKED: Access to .env files containing sensitive data is prohibited\n"
        "Use .env.sample for template files instead",
    )
    logs = {path.stem: json.loads(path.read_text()) for path in (project / "logs").glob("*.json")}
    assert {name: len(entries) for name, entries in logs.items()} == {
        "session_start": 1,
        "user_prompt_submit": 1,
        "pre_tool_use": 2,  # the edit and the delegation: the blocked read is not logged by the script
        "post_tool_use": 1,  # the delegation; the failed edit went to PostToolUseFailure
        "post_tool_use_failure": 1,
        "subagent_start": 1,
        "pre_compact": 1,
        "session_end": 1,
    }
    assert logs["post_tool_use_failure"][0]["tool_name"] == "Edit"
    assert logs["subagent_start"][0]["agent_type"] == "self"
    assert "code-puppy: note: .claude/settings.json: Setup hooks do not run: code-puppy has no such event" in (
        capsys.readouterr().err.splitlines()
    )


async def test_a_delegated_agents_frontmatter_hooks_run_inside_its_run(code_puppy_home: Path, project: Path) -> None:
    agents = project / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "careful.md").write_text(
        "---\nname: careful\ndescription: Careful.\nhooks:\n  PreToolUse:\n    - matcher: Bash\n      hooks:\n"
        "        - type: command\n          command: \"echo 'careful runs none' >&2; exit 2\"\n---\nBe careful.\n"
    )
    trust_project(project)
    settings = Settings()
    host = load_plugins(settings, project, stderr=io.StringIO())
    await host.startup(settings)
    delegate = ToolCallPart("delegate_task", {"agent_name": "careful", "task": "list files"}, tool_call_id="d1")
    shell = ToolCallPart("shell", {"command": "ls"}, tool_call_id="s1")
    script = scripted([delegate], [shell], "could not list", [shell], "ok")
    agent = build_pydantic_agent(
        settings,
        AgentOptions(
            model=script.model,
            project_root=project,
            permission_mode="yolo",
            plugins=host,
            agents=load_agents(project).items,
            agent_models={"careful": script.model},
        ),
    )
    session = Session.in_memory()
    await run_turn(agent, RunDeps(session), "go", TextSink(io.StringIO(), io.StringIO()), plugins=host)
    inside = [
        part for message in script.seen[2] for part in getattr(message, "parts", []) if isinstance(part, ToolReturnPart)
    ]
    assert [(part.tool_name, part.outcome, str(part.content)) for part in inside] == [
        ("shell", "denied", "Blocked by plugin shell_hooks: careful runs none")
    ]
    # Back in the main conversation, code-puppy's own shell call is not that agent's to block.
    assert [(name, result) for name, result, _ in tool_returns(session.messages)] == [
        ("delegate_task", "success"),
        ("shell", "success"),
    ]
