"""Claude Code's permission rules (`permissions.deny`/`ask`/`allow` of its settings files) over code-puppy's tools.

A rule is `Tool` or `Tool(specifier)`. `Bash` covers the tools that run a command (`shell`); `Read` the file readers
(`read_file`, `list_files`, `grep`), `Grep`, `Glob` and `LS` the one each names; `Edit`, `Write`, `MultiEdit` and
`NotebookEdit` every file change (`write_file`, `edit_file`, `create_directory`); `Task`/`Agent` `delegate_task`,
`BashOutput` `check_command`, `KillShell` `stop_command`, `TodoWrite` the plan tools, `Skill` `load_capability`
(those by name only); `mcp__SERVER__TOOL`, `mcp__SERVER` (the whole server) and `mcp__SERVER__*` MCP tools. Any
other tool (`WebFetch`, `WebSearch`, …) has no counterpart and is named as not applied.

A command specifier is exact (`npm run test`), a prefix (`git push:*`: `git push` and `git push …`), or a pattern
where `*` is any text (`git * main`; a single trailing ` *` also matches nothing, `ls *` covers `ls`). A path
specifier follows the gitignore spec: `//abs` is absolute, `~/x` under the home folder, `/x` and `./x` anchored at
the project root, a name without a `/` (`.env`, `*.key`) matches at any depth, `**` any folders, and a matched folder
covers everything in it.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from code_puppy.options import CLAUDE_MODES, PermissionMode
from code_puppy.permissions.claude_settings import ClaudeSettingsFile
from code_puppy.tools import EDIT_TOOL_NAMES, LOAD_SKILL_TOOL, PLAN_TOOL_NAMES, READ_ONLY_TOOLS, SHELL_TOOL_NAMES

READ_TOOLS = READ_ONLY_TOOLS - {"check_command"}
"""The tools a `Read` rule covers: every file reader."""
CLAUDE_TOOLS: Mapping[str, frozenset[str]] = {
    "Bash": SHELL_TOOL_NAMES,
    "Read": READ_TOOLS,
    "Grep": frozenset({"grep"}),
    "Glob": frozenset({"list_files"}),
    "LS": frozenset({"list_files"}),
    **dict.fromkeys(("Edit", "Write", "MultiEdit", "NotebookEdit"), EDIT_TOOL_NAMES),
    **dict.fromkeys(("Task", "Agent"), frozenset({"delegate_task"})),
    "BashOutput": frozenset({"check_command"}),
    "KillShell": frozenset({"stop_command"}),
    "TodoWrite": PLAN_TOOL_NAMES,
    "Skill": frozenset({LOAD_SKILL_TOOL}),
}
"""The code-puppy tools each Claude Code tool name of a rule covers."""
PATH_TOOLS = frozenset({"Read", "Grep", "Glob", "LS", "Edit", "Write", "MultiEdit", "NotebookEdit"})
"""The Claude Code tools whose rule specifier is a path pattern."""
DEFAULT_MODES: Mapping[str, PermissionMode] = {
    name: mode for name, mode in CLAUDE_MODES.items() if name != "bypassPermissions"
}
"""`permissions.defaultMode` values with a code-puppy counterpart. `bypassPermissions` (yolo) is never taken from a
file: yolo is only ever the user's own choice (`--permission-mode yolo`, `[permissions] mode`)."""
USED_KEYS = frozenset({"$schema", "permissions", "hooks"})
"""Top-level settings keys code-puppy acts on (`hooks` through the bundled shell_hooks plugin)."""
USED_PERMISSION_KEYS = frozenset({"allow", "deny", "ask", "defaultMode"})
_RULE = re.compile(r"(?P<tool>[A-Za-z_][\w*-]*)(?:\((?P<specifier>.*)\))?", re.DOTALL)
_COMMAND_SPLIT = re.compile(r"&&|\|\||[;|&\n`()]|\$\(")
"""Where a denied or asked-for command may hide inside a command line: every simple command, in a pipeline, a
list, a subshell or a substitution, is checked on its own."""
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_WRAPPERS = frozenset({"env", "command", "exec", "nohup", "sudo", "time", "nice", "builtin"})
"""Words that run the command after them: a deny rule looks past them."""
RuleList = Literal["deny", "ask", "allow"]


@dataclass(frozen=True)
class Rule:
    """One permission rule as written, and where."""

    text: str
    source: str
    """The settings file it comes from, as notes name it."""
    tools: frozenset[str]
    """The code-puppy tools it covers; empty for an MCP rule (matched on the permission name)."""
    specifier: str | None
    root: Path
    """The project root that relative path patterns are anchored at."""
    path_rule: bool = False

    def covers(self, tool_name: str, args: Mapping[str, Any], mcp_permission: str | None) -> bool:
        """Whether the call falls under the rule: for a command, any simple command in it (a deny or an ask rule)."""
        if not self.tools:
            return mcp_permission is not None and _mcp_matches(mcp_permission, self.text)
        if tool_name not in self.tools or mcp_permission is not None:
            return False
        if self.specifier is None or self.specifier.strip() in ("", "*", "**"):
            return True
        if self.path_rule:
            return self.covers_path(args.get("path", "."))
        command = str(args.get("command", ""))
        patterns = self.command_patterns()
        segments = [form for part in _COMMAND_SPLIT.split(command) for form in _forms(part)]
        return any(fnmatch.fnmatchcase(segment, pattern) for segment in segments if segment for pattern in patterns)

    def command_patterns(self) -> tuple[str, ...]:
        """The rule's command specifier as allow-list patterns (`fnmatch`, where only `*` is special)."""
        written = " ".join((self.specifier or "*").split()).replace("\\:", ":")  # `\:` is a literal colon
        escaped = re.sub(r"[\[?]", lambda match: f"[{match.group()}]", written)
        if escaped.endswith(":*"):
            head = escaped[:-2].rstrip()
            return (head, f"{head} *")
        if escaped.endswith(" *") and escaped.count("*") == 1:
            return (escaped[:-2], escaped)
        return (escaped,)

    def covers_path(self, path: object) -> bool:
        """Whether the file or folder `path` (as a tool names it, relative to the project root) is under the
        rule's path pattern, as written or with its symlinks resolved."""
        if not isinstance(path, str):
            return False
        base, regex = _path_pattern(self.specifier or "", self.root)
        written = Path(path).expanduser()
        lexical = Path(os.path.normpath(self.root / written))
        for candidate in {lexical, lexical.resolve()}:
            for anchor in {base, base.resolve()}:
                try:
                    relative = candidate.relative_to(anchor).as_posix()
                except ValueError:
                    continue
                if regex.fullmatch("" if relative == "." else relative):
                    return True
        return False


@dataclass(frozen=True)
class ClaudeRules:
    """The permission rules of Claude Code's settings files: deny first, then ask, then allow (Claude Code's order;
    the first list that has a matching rule decides)."""

    deny: tuple[Rule, ...] = ()
    ask: tuple[Rule, ...] = ()
    allow: tuple[Rule, ...] = ()

    @property
    def has_read_rules(self) -> bool:
        """Whether a deny or ask rule names files to read (`Read(…)`, `Grep(…)`)."""
        return any(rule.path_rule and "grep" in rule.tools for rule in (*self.deny, *self.ask))

    def hides(self, path: Path) -> bool:
        """Whether a search walking a folder leaves `path` out: a deny or ask rule covers reading it (nobody can be
        asked about one line of a search)."""
        return self.verdict("grep", {"path": str(path)}, None) is not None

    def verdict(
        self, tool_name: str, args: Mapping[str, Any], mcp_permission: str | None
    ) -> tuple[Literal["deny", "ask"], Rule] | None:
        """The first deny rule, else the first ask rule, that covers the call."""
        for decision, rules in (("deny", self.deny), ("ask", self.ask)):
            for rule in rules:
                if rule.covers(tool_name, args, mcp_permission):
                    return cast(Literal["deny", "ask"], decision), rule
        return None

    def denies_outright(self, tool_name: str, mcp_permission: str | None) -> bool:
        """Whether a deny rule without a specifier (`Bash`, `Edit`, `mcp__SERVER`) covers every call of the tool."""
        return any(
            rule.specifier is None or rule.specifier.strip() in ("*", "**")
            for rule in self.deny
            if rule.covers(tool_name, {}, mcp_permission)
        )

    def allows(self, tool_name: str, args: Mapping[str, Any]) -> Rule | None:
        """The allow rule (a file tool's, or a bare tool name's) that lets the call run without asking; commands and
        MCP tools go by `allow_list` instead."""
        if tool_name in SHELL_TOOL_NAMES:
            return None
        return next((rule for rule in self.allow if rule.tools and rule.covers(tool_name, args, None)), None)

    @property
    def allow_list(self) -> tuple[str, ...]:
        """The allow rules for commands and MCP tools, as entries of code-puppy's own allow-list (`--allow`): a
        command must match in every segment, never with a word the shell computes or an option that leaves the
        project."""
        entries: list[str] = []
        for rule in self.allow:
            if not rule.tools:
                entries.append(rule.text)
            elif rule.tools == SHELL_TOOL_NAMES:
                entries.extend(rule.command_patterns())
        return tuple(entries)


@dataclass(frozen=True)
class ClaudePermissions:
    """What Claude Code's settings files say about permissions, and the notes code-puppy prints about them once."""

    rules: ClaudeRules
    default_mode: PermissionMode | None
    """`permissions.defaultMode` mapped to code-puppy's mode, from a trusted file; the last file setting it wins."""
    notes: tuple[str, ...]
    """One line each: what is not applied and why."""


def claude_permissions(files: Sequence[ClaudeSettingsFile], project_root: Path) -> ClaudePermissions:
    """Read the permission rules of `files` (`claude_settings_files`). An untrusted project file's deny and ask rules
    still apply, since they only narrow; its allow rules and default mode wait for `code-puppy trust`."""
    lists: dict[RuleList, list[Rule]] = {"deny": [], "ask": [], "allow": []}
    default_mode: PermissionMode | None = None
    notes: list[str] = []
    for file in files:
        permissions: Any = file.data.get("permissions", {})
        if not isinstance(permissions, dict):
            notes.append(f"{file.shown}: `permissions` is not an object; ignored")
            permissions = {}
        permissions = cast(dict[str, Any], permissions)
        unsupported: list[str] = []
        for name in lists:
            written: Any = permissions.get(name, [])
            for text in cast(list[Any], written) if isinstance(written, list) else [written]:
                rule = _rule(text, file.shown, project_root)
                if rule is None:
                    unsupported.append(str(text))
                elif name != "allow" or file.trusted:
                    lists[name].append(rule)
        mode: Any = permissions.get("defaultMode")
        if mode is not None and file.trusted:
            if mode in DEFAULT_MODES:
                default_mode = DEFAULT_MODES[mode]
            else:
                notes.append(f"{file.shown}: permissions.defaultMode {mode!r} is not applied: {_why_no_mode(mode)}")
        if not file.trusted and (permissions.get("allow") or mode is not None):
            notes.append(
                f"{file.shown}: its permissions.allow and defaultMode do not apply: {file.why_not} "
                "(`code-puppy trust`); its deny and ask rules do"
            )
        if unsupported:
            notes.append(f"{file.shown}: rules code-puppy has no tool for, not applied: {_listed(unsupported)}")
        if ignored := _ignored_keys(file.data, permissions):
            notes.append(f"{file.shown}: settings code-puppy does not use, ignored: {_listed(ignored)}")
    rules = ClaudeRules(deny=tuple(lists["deny"]), ask=tuple(lists["ask"]), allow=tuple(lists["allow"]))
    return ClaudePermissions(rules, default_mode, tuple(notes))


def with_command_line(
    permissions: ClaudePermissions, allowed: Sequence[str], disallowed: Sequence[str], project_root: Path
) -> ClaudePermissions:
    """`permissions` with the rules of `--allowedTools` (allow) and `--disallowedTools` (deny) added, as Claude Code
    reads them: each value a comma- or space-separated list of rules; the command line's deny rules come first."""
    notes = list(permissions.notes)
    lists: dict[str, list[Rule]] = {"--allowedTools": [], "--disallowedTools": []}
    for flag, values in (("--allowedTools", allowed), ("--disallowedTools", disallowed)):
        unsupported: list[str] = []
        for text in (rule for value in values for rule in split_rules(value)):
            rule = _rule(text, flag, project_root)
            if rule is None:
                unsupported.append(text)
            else:
                lists[flag].append(rule)
        if unsupported:
            notes.append(f"{flag}: rules code-puppy has no tool for, not applied: {_listed(unsupported)}")
    rules = permissions.rules
    rules = ClaudeRules(
        deny=(*lists["--disallowedTools"], *rules.deny), ask=rules.ask, allow=(*rules.allow, *lists["--allowedTools"])
    )
    return ClaudePermissions(rules, permissions.default_mode, tuple(notes))


def split_rules(value: str) -> list[str]:
    """`"Bash(git diff:*) Edit,Read"` as its rules: commas and spaces separate them, except inside parentheses."""
    rules: list[str] = []
    current = ""
    depth = 0
    for char in value:
        if char == "(":
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        if not depth and (char == "," or char.isspace()):
            if current:
                rules.append(current)
            current = ""
        else:
            current += char
    return [*rules, current] if current else rules


def _forms(segment: str) -> list[str]:
    """One simple command as written (spaces squeezed) and as it runs: quotes removed, leading `VAR=value`
    assignments and wrappers (`env`, `command`, `sudo`, …) dropped, the program without its folder
    (`FOO=1 /usr/bin/git push` is `git push`)."""
    written = " ".join(segment.split())
    try:
        words = shlex.split(segment)
    except ValueError:
        return [written]
    wrapped = False
    while len(words) > 1 and (_ASSIGNMENT.match(words[0]) or words[0] in _WRAPPERS or (wrapped and words[0][0] == "-")):
        wrapped = wrapped or words[0] in _WRAPPERS
        words = words[1:]
    if words:
        words[0] = words[0].rsplit("/", 1)[-1]
    return [written, " ".join(words)]


def _rule(text: object, source: str, root: Path) -> Rule | None:
    """The rule `text` says, or None for one code-puppy has no tool for (or that is not a rule at all)."""
    if not isinstance(text, str) or not (match := _RULE.fullmatch(text.strip())):
        return None
    tool, specifier = match["tool"], match["specifier"]
    if tool.startswith("mcp__"):
        return Rule(text.strip(), source, frozenset(), None, root) if specifier is None else None
    if tool not in CLAUDE_TOOLS or (tool not in PATH_TOOLS | {"Bash"} and specifier not in (None, "", "*")):
        return None
    return Rule(text.strip(), source, CLAUDE_TOOLS[tool], specifier, root, path_rule=tool in PATH_TOOLS)


def _mcp_matches(permission: str, rule: str) -> bool:
    """Whether the MCP tool `mcp__SERVER__TOOL` is the rule's tool, one of its server's (`mcp__SERVER`), or matches
    its `*` pattern."""
    return fnmatch.fnmatchcase(permission, rule) or permission.startswith(rule + "__")


def _path_pattern(specifier: str, root: Path) -> tuple[Path, re.Pattern[str]]:
    """The folder a path specifier is relative to, and the regular expression a path relative to it must match."""
    if specifier.startswith("//"):
        base, pattern, anchored = Path("/"), specifier[2:], True
    elif specifier.startswith("~/"):
        base, pattern, anchored = Path.home(), specifier[2:], True
    elif specifier.startswith(("/", "./")):
        base, pattern, anchored = root, specifier[2:] if specifier.startswith("./") else specifier[1:], True
    else:
        base, pattern, anchored = root, specifier, "/" in specifier.rstrip("/")
    pattern = pattern.rstrip("/")
    if not anchored:
        pattern = f"**/{pattern}"
    return base, re.compile(_glob_regex(pattern), re.DOTALL)


def _glob_regex(pattern: str) -> str:
    """A gitignore-style pattern as a regular expression over `/`-separated paths; a match also covers everything
    under it (a folder's content)."""
    parts = pattern.split("/")
    while parts and parts[-1] == "**":
        parts.pop()
    if not parts:
        return ".*"
    regex = ""
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            regex += "(?:.*/)?"
        else:
            regex += _segment_regex(part) + ("" if last else "/")
    return regex + "(?:/.*)?"


def _segment_regex(part: str) -> str:
    """One path segment of a pattern: `*` any characters but `/`, `?` one, `[…]` a class (`[!…]` negated)."""
    regex, index = "", 0
    while index < len(part):
        char = part[index]
        if char == "*":
            regex += "[^/]*"
        elif char == "?":
            regex += "[^/]"
        elif char == "[" and (end := part.find("]", index + 2)) != -1:
            inner = part[index + 1 : end]
            regex += "[" + ("^" + inner[1:] if inner.startswith("!") else inner).replace("\\", "\\\\") + "]"
            index = end
        else:
            regex += re.escape(char)
        index += 1
    return regex


def _why_no_mode(mode: object) -> str:
    if mode == "bypassPermissions":
        return "a settings file never gives yolo; use --permission-mode yolo or [permissions] mode"
    if mode == "auto":
        return "a settings file never gives auto (commands without asking); use --permission-mode auto"
    return "code-puppy has no such mode (ask, accept-edits, auto, yolo, read-only)"


def _ignored_keys(data: Mapping[str, Any], permissions: Mapping[str, Any]) -> list[str]:
    """The settings keys of a file that code-puppy does not act on, `permissions.` keys included."""
    ignored = [key for key in data if key not in USED_KEYS]
    return ignored + [f"permissions.{key}" for key in permissions if key not in USED_PERMISSION_KEYS]


def _listed(items: Iterable[str]) -> str:
    return ", ".join(items)
