"""Settings: TOML config from the user and project locations, validated by pydantic models.

Locations (DESIGN §3): `$CODE_PUPPY_HOME` holds everything when set; otherwise platformdirs'
`user_config_dir("code-puppy")` holds config.toml and plugins, `user_data_dir("code-puppy")` holds sessions.db.
A project's `.code-puppy/config.toml` overrides the user config key by key, tables merged; of a project's own files,
only a few preference keys apply before the user trusts their content (`code_puppy.trust`).
"""

from code_puppy.config.loading import PROJECT_KEYS_WITHOUT_TRUST, PROJECT_MCP_FILES, load_settings
from code_puppy.config.settings import (
    HISTORY_PRESETS,
    AllowEntry,
    BudgetConfig,
    CheckpointsConfig,
    CompactionKind,
    HistoryConfig,
    HistoryPreset,
    McpServerConfig,
    ModelEndpoint,
    PermissionsConfig,
    PluginsConfig,
    ProcessorEntry,
    ProcessorSpec,
    RunConfig,
    SandboxConfig,
    SessionsConfig,
    Settings,
    StorageConfig,
    ToolsConfig,
)
from code_puppy.errors import ConfigError
from code_puppy.options import PermissionMode

# The locations live in a module without pydantic, for the chat's fast start.
from code_puppy.paths import config_dir, data_dir, find_project_root

__all__ = [
    "HISTORY_PRESETS",
    "PROJECT_KEYS_WITHOUT_TRUST",
    "PROJECT_MCP_FILES",
    "AllowEntry",
    "BudgetConfig",
    "CheckpointsConfig",
    "CompactionKind",
    "ConfigError",
    "HistoryConfig",
    "HistoryPreset",
    "McpServerConfig",
    "ModelEndpoint",
    "PermissionMode",
    "PermissionsConfig",
    "PluginsConfig",
    "ProcessorEntry",
    "ProcessorSpec",
    "RunConfig",
    "SandboxConfig",
    "SessionsConfig",
    "Settings",
    "StorageConfig",
    "ToolsConfig",
    "config_dir",
    "data_dir",
    "find_project_root",
    "load_settings",
]
