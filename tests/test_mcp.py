"""MCP servers end to end: a real MCP server subprocess (tests/mcp_servers/echo_server.py), stdio and HTTP, whose
tools the installed `code-puppy -p` calls through the fake model server; plus the permission gate in process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ToolCallPart

from code_puppy.config import McpServerConfig, PermissionMode, Settings
from code_puppy.core.builder import AgentOptions, build_pydantic_agent
from tests.conftest import CODE_PUPPY, run_cli
from tests.fake_llm import FakeLLMServer, call, error, text, tool_calls
from tests.scripted_model import scripted, tool_returns

ECHO_SERVER = Path(__file__).parent / "mcp_servers" / "echo_server.py"


def processes_tagged(tag: str) -> list[str]:
    """`PID ARGS` of the live processes whose command line carries `tag` (zombies are dead: not counted)."""
    listing = subprocess.run(["ps", "-ww", "-eo", "pid=,stat=,args="], capture_output=True, text=True, check=True)
    rows = [row for row in (line.split(None, 2) for line in listing.stdout.splitlines()) if len(row) == 3]
    return [f"{pid} {args}" for pid, stat, args in rows if tag in args and not stat.startswith("Z")]


def servers_tagged(tag: str) -> list[str]:
    """The tagged echo servers themselves, without the shells that keep their process groups."""
    return [row for row in processes_tagged(tag) if row.split(None, 1)[1].startswith(sys.executable)]


@pytest.fixture
def tag() -> Iterator[str]:
    """A mark on the command line of every echo server the test starts; none may outlive the test."""
    mark = f"mcp-test-{uuid.uuid4().hex}"
    yield mark
    assert processes_tagged(mark) == []


def stdio_server(tag: str, *extra: str, **options: Any) -> str:
    """A `[mcp_servers.NAME]` body running the echo server over stdio."""
    fields = {"command": sys.executable, "args": [str(ECHO_SERVER), "--tag", tag, *extra], **options}
    return "\n".join(f"{key} = {_toml(value)}" for key, value in fields.items())


def _toml(value: Any) -> str:
    """JSON is TOML for strings, numbers, booleans and arrays; tables are written inline."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    return json.dumps(value)


@pytest.fixture
def llm(code_puppy_home: Path) -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


def configure(home: Path, llm: FakeLLMServer, **servers: str) -> None:
    tables = "".join(f"\n[mcp_servers.{name}]\n{body}\n" for name, body in servers.items())
    model = (
        f'model = "fake"\n[sessions]\nauto_title = false\n'
        f'[models.fake]\nname = "fake-model"\nbase_url = "{llm.base_url}"\n'
    )
    (home / "config.toml").write_text(model + tables)


def offered(request_index: int, llm: FakeLLMServer) -> list[str]:
    return sorted(tool["function"]["name"] for tool in llm.requests[request_index].body.get("tools", []))


def tool_results(body: dict[str, Any]) -> list[str]:
    return [message["content"] for message in body["messages"] if message["role"] == "tool"]


PLAN_TOOLS = ["add_task", "read_plan", "remove_task", "update_task_status", "update_task_statuses", "write_plan"]
BUILT_IN = sorted(
    [
        "create_directory",
        "delegate_task",
        "edit_file",
        "grep",
        "list_files",
        "read_file",
        "shell",
        "write_file",
        *PLAN_TOOLS,
    ]
)
ECHO_TOOLS = ["echo_add", "echo_crash", "echo_echo", "echo_env", "echo_grep", "echo_sleep", "echo_write_note"]


def test_stdio_server_tools_are_called_end_to_end(
    code_puppy_home: Path, llm: FakeLLMServer, project: Path, tag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PUPPY_SECRET", "s3cret")
    configure(code_puppy_home, llm, echo=stdio_server(tag, env={"GREETING": "${PUPPY_SECRET}", "UNSET": "${NO:-none}"}))
    llm.script(
        tool_calls(call("echo_add", {"a": 2, "b": 3}), call("echo_env", {"name": "GREETING"})),
        tool_calls(call("echo_env", {"name": "OPENAI_API_KEY"}), call("echo_env", {"name": "UNSET"})),
        text("2 + 3 = 5"),
    )
    completed = run_cli("-p", "add 2 and 3", "--allow", "mcp__echo", cwd=project, env={"OPENAI_API_KEY": "sk-leak"})
    assert (completed.returncode, completed.stdout) == (0, "2 + 3 = 5\n"), completed.stderr
    assert offered(0, llm) == sorted(BUILT_IN + ECHO_TOOLS)
    assert tool_results(llm.requests[1].body) == ["5", "s3cret"]
    # the server's environment is its own: no provider keys, configured variables expanded
    assert tool_results(llm.requests[2].body)[2:] == ["<unset>", "none"]
    # The two calls of one response run concurrently: the server sees them in either order.
    assert sorted((project / "calls.log").read_text().splitlines()[:2]) == ["add 2 3", "env GREETING"]


@pytest.fixture
def http_server(tag: str, project: Path) -> Iterator[str]:
    with subprocess.Popen(
        [sys.executable, str(ECHO_SERVER), "--http", "0", "--token", "tok-123", "--tag", tag],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as process:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
        process.terminate()


def test_http_server_with_an_expanded_header(
    code_puppy_home: Path, llm: FakeLLMServer, project: Path, http_server: str
) -> None:
    server = f'url = "{http_server}"\nheaders = {{ Authorization = "Bearer ${{ECHO_TOKEN}}" }}\ntool_prefix = "web"'
    configure(code_puppy_home, llm, remote=server)
    llm.script(tool_calls(call("web_echo", {"text": "over http"})), text("echoed"))
    completed = run_cli("-p", "echo", "--allow", "mcp__remote", cwd=project, env={"ECHO_TOKEN": "tok-123"})
    assert (completed.returncode, completed.stdout) == (0, "echoed\n"), completed.stderr
    assert tool_results(llm.requests[1].body) == ["over http"]
    assert (project / "calls.log").read_text() == "echo over http\n"


def test_a_server_whose_variable_is_not_set_is_skipped_and_the_run_goes_on(
    code_puppy_home: Path, llm: FakeLLMServer, project: Path
) -> None:
    # Was exit 2 before any request: one server's missing secret stopped every run, even runs that never used it.
    server = 'url = "http://127.0.0.1:9/mcp"\nheaders = { Authorization = "Bearer ${ECHO_TOKEN}" }'
    configure(code_puppy_home, llm, remote=server)
    llm.script(text("answered without it"))
    completed = run_cli("-p", "echo", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "answered without it\n")
    assert completed.stderr == (
        "code-puppy: MCP server 'remote': environment variable ECHO_TOKEN is not set (used in "
        "headers.Authorization); continuing without its tools\n"
    )
    assert [
        tool["function"]["name"] for tool in llm.requests[0].body["tools"] if "remote" in tool["function"]["name"]
    ] == []


def test_servers_that_fail_to_start_are_one_line_each_and_the_run_goes_on(
    code_puppy_home: Path, llm: FakeLLMServer, project: Path, tag: str
) -> None:
    configure(
        code_puppy_home,
        llm,
        broken=stdio_server(tag, "--fail"),
        ghost='command = "/nonexistent/mcp-server"',
        slow=stdio_server(tag, "--hang", timeout=1),
        echo=stdio_server(tag),
    )
    llm.script(tool_calls(call("echo_echo", {"text": "hi"})), text("fine"))
    completed = run_cli("-p", "hi", "--allow", "mcp__echo__echo", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "fine\n")
    assert completed.stderr.splitlines() == [
        "code-puppy: MCP server 'broken' failed to start: Connection closed (stderr: echo server: refusing to "
        "start); continuing without its tools",
        "code-puppy: MCP server 'ghost' failed to start: Connection closed (stderr: sh: 1: /nonexistent/mcp-server: "
        "not found); continuing without its tools",
        "code-puppy: MCP server 'slow' failed to start: no answer within 1 s; continuing without its tools",
        "⚙ echo_echo(hi)",
        "  ↳ hi",
    ]
    assert offered(0, llm) == sorted(BUILT_IN + ECHO_TOOLS)  # the model is offered no tool of a failed server


def test_a_server_that_crashes_at_start_leaves_no_child_running(
    code_puppy_home: Path, llm: FakeLLMServer, project: Path, tag: str
) -> None:
    configure(code_puppy_home, llm, broken=stdio_server(tag, "--crash-with-child"))
    llm.script(text("fine"))
    completed = run_cli("-p", "hi", cwd=project)
    try:
        assert processes_tagged(tag) == []  # the server's child went with it
        assert (completed.returncode, completed.stdout) == (0, "fine\n")
        # At once: the child held the server's stdout open, which the client took for a server still starting.
        assert completed.stderr == (
            "code-puppy: MCP server 'broken' failed to start: Connection closed; continuing without its tools\n"
        )
    finally:
        for process in processes_tagged(tag):
            os.kill(int(process.split()[0]), signal.SIGKILL)


def test_a_server_that_crashes_mid_run_is_withdrawn(
    code_puppy_home: Path, llm: FakeLLMServer, project: Path, tag: str
) -> None:
    configure(code_puppy_home, llm, echo=stdio_server(tag))
    llm.script(tool_calls(call("echo_crash", {})), text("it crashed"))
    completed = run_cli("-p", "crash it", "--output-format", "stream-json", "--allow", "mcp__echo__crash", cwd=project)
    assert completed.returncode == 0, completed.stderr
    assert (
        completed.stderr == "code-puppy: MCP server 'echo' crashed: Connection closed; continuing without its tools\n"
    )
    results = [json.loads(line) for line in completed.stdout.splitlines() if '"tool_result"' in line]
    assert [(r["tool_name"], r["outcome"]) for r in results] == [("echo_crash", "failed")]
    assert "MCP server 'echo' crashed (Connection closed); its tools are no longer available." in results[0]["content"]
    assert offered(0, llm) == sorted(BUILT_IN + ECHO_TOOLS)
    assert offered(1, llm) == BUILT_IN


def test_a_failed_run_stops_its_servers(code_puppy_home: Path, llm: FakeLLMServer, project: Path, tag: str) -> None:
    configure(code_puppy_home, llm, echo=stdio_server(tag))
    llm.script(tool_calls(call("echo_echo", {"text": "up"})), error(400, "bad request"))
    completed = run_cli("-p", "hi", "--allow", "mcp__echo", cwd=project)
    assert completed.returncode == 1
    assert completed.stderr.splitlines()[-1].startswith("code-puppy: run failed: ")
    assert (project / "calls.log").read_text() == "echo up\n"
    # the `tag` fixture checks that no server process is left


def test_name_clashes_are_resolved_by_prefixes(
    code_puppy_home: Path, llm: FakeLLMServer, project: Path, tag: str
) -> None:
    configure(
        code_puppy_home,
        llm,
        echo=stdio_server(tag, tool_prefix=False, allow_tools=["grep", "echo", "add"]),
        other=stdio_server(tag, tool_prefix=False, allow_tools=["echo"]),
    )
    llm.script(tool_calls(call("echo_grep", {"pattern": "x"}), call("grep", {"pattern": "demo"})), text("ok"))
    completed = run_cli(
        "-p", "grep", "--allow", "mcp__echo", cwd=project, env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    )
    assert completed.returncode == 0, completed.stderr
    assert sorted(completed.stderr.splitlines()[:3]) == [
        "code-puppy: MCP tool 'echo' of server 'echo' is offered as 'echo_echo' (name clash)",
        "code-puppy: MCP tool 'echo' of server 'other' is offered as 'other_echo' (name clash)",
        "code-puppy: MCP tool 'grep' of server 'echo' is offered as 'echo_grep' (name clash)",
    ]
    assert offered(0, llm) == sorted([*BUILT_IN, "add", "echo_echo", "echo_grep", "other_echo"])
    echo_grep, builtin_grep = tool_results(llm.requests[1].body)
    assert echo_grep == "echo-grep:x"
    assert "README.md" in builtin_grep


def test_headless_ask_runs_only_allow_listed_mcp_tools(
    code_puppy_home: Path, llm: FakeLLMServer, project: Path, tag: str
) -> None:
    configure(code_puppy_home, llm, echo=stdio_server(tag))
    llm.script(tool_calls(call("echo_write_note", {"text": "hello"}), call("echo_add", {"a": 1, "b": 1})), text("ok"))
    completed = run_cli("-p", "note it", "--allow", "mcp__echo__write_note", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "ok\n")
    assert tool_results(llm.requests[1].body) == [
        "noted",
        "`echo_add` needs the user's approval in 'ask' mode and this run is non-interactive, so it was denied. Do "
        "not retry it; say what you would have done, or the user can re-run with --allow mcp__echo__add or "
        "--permission-mode yolo.",
    ]
    assert (project / "notes.txt").read_text() == "hello\n"
    assert (project / "calls.log").read_text() == "write_note hello\n"  # the denied call never reached the server


def test_no_mcp_runs_without_the_servers(code_puppy_home: Path, llm: FakeLLMServer, project: Path, tag: str) -> None:
    configure(code_puppy_home, llm, echo=stdio_server(tag))
    llm.script(text("plain"))
    completed = run_cli("-p", "hi", "--no-mcp", cwd=project)
    assert (completed.returncode, completed.stdout, completed.stderr) == (0, "plain\n", "")
    assert offered(0, llm) == BUILT_IN


def test_sigint_during_an_mcp_call_leaves_no_server_process(
    code_puppy_home: Path, llm: FakeLLMServer, project: Path, tag: str
) -> None:
    configure(code_puppy_home, llm, echo=stdio_server(tag), other=stdio_server(tag, tool_prefix="o"))
    llm.script(tool_calls(call("echo_sleep", {"seconds": 60})), text("never"))
    process = subprocess.Popen(
        [str(CODE_PUPPY), "-p", "sleep", "--permission-mode", "yolo", "--output-format", "json"],
        cwd=project,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while "sleep 60" not in _read(project / "calls.log") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(servers_tagged(tag)) == 2  # both servers are up, one of them busy in the call
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    assert json.loads(stdout)["status"] == "interrupted"
    assert "Traceback" not in stderr
    assert processes_tagged(tag) == []


def test_sigint_while_a_server_starts_leaves_no_server_process(
    code_puppy_home: Path, llm: FakeLLMServer, project: Path, tag: str
) -> None:
    configure(code_puppy_home, llm, slow=stdio_server(tag, "--hang"))
    with subprocess.Popen(
        [str(CODE_PUPPY), "-p", "hi"], cwd=project, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as process:
        deadline = time.monotonic() + 30
        while not processes_tagged(tag) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_tagged(tag) != []
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    assert (process.returncode, stderr) == (130, "code-puppy: interrupted\n")
    assert llm.requests == []
    assert processes_tagged(tag) == []


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_mcp_list_and_tools(code_puppy_home: Path, project: Path, tag: str) -> None:
    (code_puppy_home / "config.toml").write_text(
        f"[mcp_servers.echo]\n{stdio_server(tag, deny_tools=['crash', 'sleep'])}\n"
        f"[mcp_servers.broken]\n{stdio_server(tag, '--fail')}\n"
        '[mcp_servers.off]\nurl = "http://127.0.0.1:9/mcp"\nenabled = false\n'
        '[mcp_servers.gh]\nurl = "http://127.0.0.1:9/mcp"\nheaders = { Authorization = "Bearer ${NO_SUCH_TOKEN}" }\n'
    )
    listed = run_cli("mcp", "list", cwd=project)
    assert (listed.returncode, listed.stderr) == (0, "")
    assert listed.stdout.splitlines() == [
        "NAME    TRANSPORT  TOOLS  STATUS",
        "echo    stdio      5      running",
        "broken  stdio      -      failed: Connection closed (stderr: echo server: refusing to start)",
        "off     http       -      disabled",
        "gh      http       -      failed: environment variable NO_SUCH_TOKEN is not set (used in "
        "headers.Authorization)",
    ]
    tools = run_cli("mcp", "tools", "echo", cwd=project)
    assert (tools.returncode, tools.stderr) == (0, "")
    assert tools.stdout.splitlines()[:4] == [
        "echo_echo  (allow with: mcp__echo__echo)",
        "    Return the text unchanged.",
        "echo_add  (allow with: mcp__echo__add)",
        "    Add two integers.",
    ]
    assert len(tools.stdout.splitlines()) == 10
    failed = run_cli("mcp", "tools", "broken", cwd=project)
    assert (failed.returncode, failed.stdout) == (1, "")
    assert failed.stderr == (
        "code-puppy: error: MCP server 'broken' failed to start: Connection closed (stderr: echo server: refusing "
        "to start)\n"
    )
    unknown = run_cli("mcp", "tools", "nope", cwd=project)
    assert (unknown.returncode, unknown.stderr) == (
        2,
        "code-puppy: error: unknown MCP server 'nope' (configured: broken, echo, gh, off)\n",
    )


def test_mcp_list_reads_a_trusted_projects_mcp_json(code_puppy_home: Path, project: Path, tag: str) -> None:
    server = {"command": sys.executable, "args": [str(ECHO_SERVER), "--tag", tag], "type": "stdio"}
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"proj": server}}))
    untrusted = run_cli("mcp", "list", cwd=project)
    assert untrusted.stdout == "No MCP servers configured: add [mcp_servers.NAME] to config.toml (see the README).\n"
    assert untrusted.stderr.startswith(
        "code-puppy: note: this project is not trusted, so code-puppy ignores its .mcp.json ("
    )
    assert run_cli("trust", cwd=project).returncode == 0
    trusted = run_cli("mcp", "list", cwd=project)
    assert (trusted.returncode, trusted.stderr) == (0, "")
    assert trusted.stdout.splitlines()[1] == "proj  stdio      7      running"


@pytest.mark.parametrize(
    ("mode", "outcome", "ran"),
    [("ask", "denied", False), ("accept-edits", "denied", False), ("yolo", "success", True)],
)
async def test_permission_policy_gates_mcp_calls_before_they_reach_the_server(
    project: Path, tag: str, mode: PermissionMode, outcome: str, ran: bool
) -> None:
    settings = Settings(mcp_servers={"echo": McpServerConfig.model_validate_json(_stdio_json(tag))})
    script = scripted([ToolCallPart("echo_write_note", {"text": "gated"}, tool_call_id="n")], "done")
    agent = build_pydantic_agent(settings, AgentOptions(model=script.model, project_root=project, permission_mode=mode))
    result = await agent.run("note")
    assert [(name, result_outcome) for name, result_outcome, _ in tool_returns(result.all_messages())] == [
        ("echo_write_note", outcome)
    ]
    assert (project / "notes.txt").exists() is ran
    assert ("write_note gated" in _read(project / "calls.log")) is ran


async def test_read_only_does_not_offer_mcp_tools(project: Path, tag: str) -> None:
    settings = Settings(mcp_servers={"echo": McpServerConfig.model_validate_json(_stdio_json(tag))})
    script = scripted("ok")
    agent = build_pydantic_agent(
        settings, AgentOptions(model=script.model, project_root=project, permission_mode="read-only")
    )
    await agent.run("look")
    assert sorted(tool.name for tool in script.infos[0].function_tools) == sorted(
        ["delegate_task", "grep", "list_files", "read_file", *PLAN_TOOLS]
    )


async def test_servers_stay_up_across_runs_while_the_agent_is_entered(project: Path, tag: str) -> None:
    settings = Settings(mcp_servers={"echo": McpServerConfig.model_validate_json(_stdio_json(tag))})
    script = scripted(
        [ToolCallPart("echo_echo", {"text": "one"}, tool_call_id="a")],
        "first",
        [ToolCallPart("echo_echo", {"text": "two"}, tool_call_id="b")],
        "second",
    )
    agent = build_pydantic_agent(
        settings, AgentOptions(model=script.model, project_root=project, permission_mode="yolo")
    )
    assert processes_tagged(tag) == []  # lazy: building the agent starts nothing
    async with agent:
        assert processes_tagged(tag) == []  # nor does entering it: the first run's tool listing does
        await agent.run("one")
        pids = processes_tagged(tag)
        await agent.run("two")
        assert processes_tagged(tag) == pids != []
    assert processes_tagged(tag) == []
    assert _read(project / "calls.log").splitlines() == ["echo one", "echo two"]


def _stdio_json(tag: str) -> str:
    return json.dumps({"command": sys.executable, "args": [str(ECHO_SERVER), "--tag", tag]})


def test_a_stdio_server_with_sandbox_true_runs_confined(
    code_puppy_home: Path, llm: FakeLLMServer, outside: Path, tag: str
) -> None:
    project, elsewhere = outside / "project", outside / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "echo_server.py").write_text(ECHO_SERVER.read_text())  # a test run under /tmp is hidden inside
    confined = stdio_server(tag, sandbox=True, args=[str(project / "echo_server.py"), "--tag", tag])
    free = stdio_server(tag, cwd="../elsewhere")
    configure(code_puppy_home, llm, inside=confined, outside=free, away=f'{confined}\ncwd = "../elsewhere"')
    with (code_puppy_home / "config.toml").open("a") as config:  # the interpreter's environment may be under /tmp
        config.write(f"[sandbox]\nwritable = [{json.dumps(sys.prefix)}]\n")
    llm.script(
        tool_calls(*(call(f"{name}_write_note", {"text": name}) for name in ("inside", "outside", "away"))),
        text("noted"),
    )
    completed = run_cli(
        "-p", "note it", "--allow", "mcp__inside", "--allow", "mcp__outside", "--allow", "mcp__away", cwd=project
    )
    assert (completed.returncode, completed.stdout) == (0, "noted\n"), completed.stderr
    inside, free_result, away = tool_results(llm.requests[1].body)
    assert (inside, free_result) == ("noted", "noted")
    assert away == '{"error":"Error executing tool write_note"}'  # confined to the project, as commands are
    assert (project / "notes.txt").read_text() == "inside\n"
    assert (elsewhere / "notes.txt").read_text() == "outside\n"  # the one outside the sandbox wrote there
    assert "away" not in (elsewhere / "calls.log").read_text()


def test_sandbox_true_is_for_stdio_servers(code_puppy_home: Path, llm: FakeLLMServer, project: Path) -> None:
    configure(code_puppy_home, llm, web='url = "http://127.0.0.1:9/mcp"\nsandbox = true')
    completed = run_cli("-p", "hi", cwd=project)
    assert completed.returncode == 2
    assert completed.stderr.endswith(
        "config.toml: 'mcp_servers.web': args, env, cwd and sandbox apply to stdio servers (command), not to url\n"
    )
