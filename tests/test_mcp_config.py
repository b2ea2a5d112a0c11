"""MCP configuration: `[mcp_servers]`, `.mcp.json` behind project trust, `${VAR}` expansion, tool names, permissions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from code_puppy.config import ConfigError, McpServerConfig, PermissionMode, load_settings
from code_puppy.mcp.server import McpServer, expand_env
from code_puppy.mcp.servers import assign_names
from code_puppy.permissions.policy import PermissionPolicy, mcp_allowed
from code_puppy.tools import POLICY_TOOL_NAMES
from code_puppy.trust import project_trust, trust_project


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_stdio_and_http_servers_from_the_user_config(code_puppy_home: Path, project: Path) -> None:
    write(
        code_puppy_home / "config.toml",
        '[mcp_servers.files]\ncommand = "npx"\nargs = ["-y", "server-files"]\nenv = { DEBUG = "1" }\n'
        "timeout = 5\nallow_tools = ['read_*']\n"
        '[mcp_servers.github]\nurl = "https://api.example.com/mcp"\n'
        'headers = { Authorization = "Bearer ${GITHUB_TOKEN}" }\ntool_prefix = "gh"\nenabled = false\n',
    )
    assert load_settings(project).mcp_servers == {
        "files": McpServerConfig(
            command="npx", args=("-y", "server-files"), env={"DEBUG": "1"}, timeout=5, allow_tools=("read_*",)
        ),
        "github": McpServerConfig(
            url="https://api.example.com/mcp",
            headers={"Authorization": "Bearer ${GITHUB_TOKEN}"},
            tool_prefix="gh",
            enabled=False,
        ),
    }


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("args = ['x']", "'mcp_servers.bad': set either command (a stdio server) or url (an HTTP server)"),
        ("command = 'x'\nurl = 'http://y'", "'mcp_servers.bad': set either command (a stdio server) or url"),
        ("url = 'http://y'\nenv = { A = 'b' }", "'mcp_servers.bad': args, env, cwd and sandbox apply to stdio servers"),
        ("command = 'x'\nheaders = { A = 'secret' }", "'mcp_servers.bad': headers apply to HTTP servers (url)"),
        ("command = 'x'\ntool_prefix = 'a b'", "'mcp_servers.bad.tool_prefix': tool_prefix must be true, false or"),
        ("command = 'x'\ntimeout = 0", "'mcp_servers.bad.timeout': input should be greater than 0, got 0"),
        ("command = 'x'\nargs = 'y'", "'mcp_servers.bad.args': input should be a valid tuple, got 'y'"),
        ("command = 'x'\nautostart = true", "unknown key 'mcp_servers.bad.autostart'"),
    ],
)
def test_bad_server_table_is_one_line_naming_file_and_key(
    code_puppy_home: Path, project: Path, table: str, message: str
) -> None:
    path = write(code_puppy_home / "config.toml", f"[mcp_servers.bad]\n{table}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(project)
    assert str(caught.value).startswith(f"{path}: {message}")
    assert "secret" not in str(caught.value)


def test_trust_is_the_listed_absolute_path(code_puppy_home: Path, project: Path) -> None:
    assert not project_trust(project).listed
    write(code_puppy_home / "trusted_projects.json", "not json")
    assert not project_trust(project).listed
    write(code_puppy_home / "trusted_projects.json", json.dumps({"path": str(project)}))
    assert not project_trust(project).listed
    trust_project(project / "sub" / "..")
    assert project_trust(project).listed


MCP_JSON = {
    "mcpServers": {
        "docs": {"command": "uvx", "args": ["docs-server"], "env": {"A": "1"}, "type": "stdio", "alwaysAllow": ["x"]},
        "remote": {"url": "http://127.0.0.1:9/mcp", "headers": {"X-Key": "${KEY}"}, "disabled": True},
    }
}


def test_untrusted_project_servers_are_ignored_with_a_note(
    code_puppy_home: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(project / ".mcp.json", json.dumps(MCP_JSON))
    write(project / ".code-puppy" / "config.toml", "[mcp_servers.evil]\ncommand = 'rm'\n[permissions]\nmode = 'ask'\n")
    assert load_settings(project).mcp_servers == {}
    assert capsys.readouterr().err == (
        "code-puppy: note: this project is not trusted, so code-puppy ignores its .mcp.json, [mcp_servers], "
        "[permissions] (run `code-puppy trust` in the project to trust it)\n"
    )


def test_trusted_project_reads_mcp_json_and_its_toml_overrides_key_by_key(
    code_puppy_home: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(code_puppy_home / "config.toml", "[mcp_servers.docs]\ncommand = 'user-docs'\ntimeout = 9\n")
    write(project / "mcp.json", json.dumps({"mcpServers": {"docs": {"command": "plain-mcp-json"}}}))
    write(project / ".mcp.json", json.dumps(MCP_JSON))
    write(project / ".code-puppy" / "config.toml", "[mcp_servers.docs]\ntool_prefix = false\n")
    trust_project(project)
    assert load_settings(project).mcp_servers == {
        "docs": McpServerConfig(command="uvx", args=("docs-server",), env={"A": "1"}, timeout=9, tool_prefix=False),
        "remote": McpServerConfig(url="http://127.0.0.1:9/mcp", headers={"X-Key": "${KEY}"}, enabled=False),
    }
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "invalid JSON: "),
        ('{"servers": {}}', 'expected an object {"mcpServers": {"NAME": {...}}}'),
        ('{"mcpServers": {"a": []}}', "'mcpServers.a': expected an object"),
        ('{"mcpServers": {"a": {"command": 3}}}', "'mcp_servers.a.command': input should be a valid string, got 3"),
    ],
)
def test_bad_mcp_json_names_the_file(code_puppy_home: Path, project: Path, text: str, message: str) -> None:
    path = write(project / ".mcp.json", text)
    trust_project(project)
    with pytest.raises(ConfigError) as caught:
        load_settings(project)
    assert str(caught.value).startswith(f"{path}: {message}")


def test_env_references_are_expanded_with_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKEN", "t0k")
    config = McpServerConfig(
        url="http://${HOST:-127.0.0.1}:8/mcp", headers={"Authorization": "Bearer ${TOKEN}", "X-Empty": "${NONE:-}"}
    )
    assert expand_env("gh", config) == McpServerConfig(
        url="http://127.0.0.1:8/mcp", headers={"Authorization": "Bearer t0k", "X-Empty": ""}
    )
    stdio = McpServerConfig(command="${TOOL:-npx}", args=("--token=${TOKEN}",), env={"T": "${TOKEN}"})
    assert expand_env("s", stdio) == McpServerConfig(command="npx", args=("--token=t0k",), env={"T": "t0k"})


def test_a_missing_variable_is_a_config_error_naming_it() -> None:
    config = McpServerConfig(url="http://x/mcp", headers={"Authorization": "Bearer ${GITHUB_TOKEN}"})
    with pytest.raises(ConfigError) as caught:
        expand_env("github", config)
    assert str(caught.value) == (
        "MCP server 'github': environment variable GITHUB_TOKEN is not set (used in headers.Authorization)"
    )


def test_names_are_prefixed_by_server_by_default(project: Path) -> None:
    server = McpServer("my.docs", McpServerConfig(command="x"), project)
    assert server.preferred_name("search") == "my_docs_search"
    assert (
        McpServer("d", McpServerConfig(command="x", tool_prefix="kb"), project).preferred_name("search") == "kb_search"
    )
    assert McpServer("d", McpServerConfig(command="x", tool_prefix=False), project).preferred_name("search") == "search"


def test_clashes_rename_every_claimant_and_never_drop_a_tool() -> None:
    wanted = [
        ("a", "grep", "grep"),  # clashes with a built-in
        ("a", "search", "search"),  # two servers want `search`
        ("b", "search", "search"),
        ("b", "echo", "echo"),  # unique: kept
        ("c", "a_search", "c_a_search"),
        ("a_search", "x", "a_search"),  # wants what server a's renamed tool took
    ]
    assert assign_names(wanted, POLICY_TOOL_NAMES) == [
        "a_grep",
        "a_search",
        "b_search",
        "echo",
        "c_a_search",
        "a_search_2",
    ]


def test_tools_are_filtered_by_their_own_names(project: Path) -> None:
    server = McpServer(
        "s", McpServerConfig(command="x", allow_tools=("read_*", "list"), deny_tools=("read_secret",)), project
    )
    assert [t for t in ("read_a", "read_secret", "list", "write") if server.offers(t)] == ["read_a", "list"]


@pytest.mark.parametrize(
    ("allow", "allowed"),
    [
        (["mcp__echo__write_note"], True),
        (["mcp__echo"], True),
        (["mcp__echo__*"], True),
        (["mcp__*"], True),
        (["mcp__echo__add"], False),
        (["mcp__ech"], False),
        (["write_note", "echo_write_note"], False),  # shell patterns and model-facing names never allow MCP tools
    ],
)
def test_mcp_allow_list_entries(allow: list[str], allowed: bool) -> None:
    assert mcp_allowed("mcp__echo__write_note", allow) is allowed


@pytest.mark.parametrize(
    ("mode", "allow", "decision"),
    [
        ("ask", [], "ask"),
        ("ask", ["mcp__echo"], "allow"),
        ("accept-edits", [], "deny"),
        ("accept-edits", ["mcp__echo__write_note"], "allow"),
        ("yolo", [], "allow"),
        ("read-only", ["mcp__echo"], "deny"),
    ],
)
def test_mcp_tools_in_the_decision_table(tmp_path: Path, mode: PermissionMode, allow: list[str], decision: str) -> None:
    policy = PermissionPolicy(tmp_path, mode=mode, allow=allow)
    args: dict[str, Any] = {"text": "x"}
    assert policy.decide("echo_write_note", args, mcp_permission="mcp__echo__write_note")[0] == decision


def test_an_mcp_tool_named_like_a_read_tool_is_still_an_mcp_tool(tmp_path: Path) -> None:
    policy = PermissionPolicy(tmp_path, mode="ask")
    assert policy.decide("read_file", {"path": "a"})[0] == "allow"
    assert policy.decide("read_file", {"path": "a"}, mcp_permission="mcp__read__file")[0] == "ask"
