"""The tools' vocabulary: every built-in tool name code-puppy's parts treat by name, and which ones can change the
project. A new tool the policy must know is added here."""

from __future__ import annotations

from pydantic_ai import ToolDefinition
from pydantic_ai_harness.filesystem import READ_ONLY_TOOL_NAMES

FILE_TOOLS = ("read_file", "write_file", "edit_file", "create_directory", "list_files", "grep")
"""The harness file tools the agent offers (`create_directory` too: a model that cannot make a folder writes a
placeholder file into it instead)."""
FILE_EDITORS = frozenset({"write_file", "edit_file"})
"""File tools that change the one file their `path` names."""
EDITOR_TOOLS = ("read_file", "write_file", "edit_file")
"""File tools an editor's buffers can serve (ACP's fs methods)."""
EDIT_TOOL_NAMES = frozenset({"write_file", "edit_file", "create_directory"})
"""File tools that change the project."""
SHELL_TOOL_NAMES = frozenset({"shell", "run_command", "start_command"})
"""Tools that run a command string."""
READ_ONLY_TOOLS = frozenset({*READ_ONLY_TOOL_NAMES, "check_command"})
"""Built-in tools that change nothing, whatever their arguments."""
PLAN_TOOL_NAMES = frozenset(
    {"write_plan", "read_plan", "add_task", "update_task_status", "update_task_statuses", "remove_task"}
)
"""The harness `Planning` tools: they keep the run's task list and touch nothing else."""
LOAD_SKILL_TOOL = "load_capability"
"""The harness `Skills` tool that loads a skill's instructions: offered whenever there are skills."""
ALWAYS_ALLOWED_TOOL_NAMES = frozenset(
    {*READ_ONLY_TOOLS, *PLAN_TOOL_NAMES, "stop_command", "delegate_task", LOAD_SKILL_TOOL}
)
"""Tools that run without asking: they change nothing by themselves (a delegate's own calls pass through this policy
too, `stop_command` only stops what the run itself started, `load_capability` loads a skill's instructions, the plan
tools keep the task list)."""
POLICY_TOOL_NAMES = ALWAYS_ALLOWED_TOOL_NAMES | EDIT_TOOL_NAMES | SHELL_TOOL_NAMES
"""Every name the policy treats by name; an MCP tool never takes one of them."""
MCP_PERMISSION_KEY = "code_puppy.mcp_permission"
"""`ToolDefinition.metadata` key marking an MCP tool, holding its permission name `mcp__SERVER__TOOL`."""


def is_read_only(tool_def: ToolDefinition) -> bool:
    """Whether a tool changes nothing: a built-in reader, or an MCP tool its server marks `readOnlyHint`."""
    if tool_def.name in READ_ONLY_TOOLS:
        return True
    annotations = (tool_def.metadata or {}).get("annotations")
    return isinstance(annotations, dict) and annotations.get("readOnlyHint") is True  # pyright: ignore[reportUnknownMemberType]
