"""Options that take an allow-listed command outside the project (DESIGN §3 "Permissions", issue 10).

An allow-list entry such as `git diff*` trusts every argument, and some arguments turn a harmless command into one
that writes anywhere (`git diff --no-index --output=/abs/path`), deletes a folder (`pytest --basetemp=DIR`) or runs
another program (`git -c core.pager=…`). This table names such options per tool, so that `grep -C 3` stays allowed
while `git -C /elsewhere` does not: a command carrying one is no longer allowed by the list alone (it asks, or is
denied where nobody can answer). An option whose value is a path (`PATH`) is refused only when the path leaves the
project; any other is refused whatever its value, with the reason given.

A word the shell computes when the command runs (`--out${X}put=/abs`, `-o ~-/x`, a glob, a brace expansion) can
hold any option, so a command with one is not covered either: `$` and `~+`/`~-` anywhere, globs and braces wherever
this check reads the word (a known tool's arguments, a `cd` destination, the name of the program).

It is a list of known cases, not a sandbox: an allow-listed `make` or `pytest` still runs the project's own code.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from code_puppy.permissions.policy import SEGMENT_SPLIT

PATH = "path"
"""The option's value is a path the tool writes to or works in: refused when it leaves the project."""
VALUE = "value"
"""A harmless option that takes a value (listed so that the value is not taken for an operand)."""


@dataclass(frozen=True)
class Rules:
    """What makes one tool's command leave the project."""

    options: Mapping[str, str]
    """Option → `PATH`, or why it is refused whatever its value."""
    global_options: Mapping[str, str] = field(default_factory=dict[str, str])
    """Options that count only before the first operand: git's `-C` and `-c` mean other things after a subcommand."""
    subcommands: Mapping[str, str] = field(default_factory=dict[str, str])
    """First operands that work outside the project by design (`cargo install`), with why."""
    operands: bool = False
    """Whether every operand is a file the tool writes (`tee`)."""
    single_dash: bool = False
    """Whether options are `-name[=v]` (or `--name`), rather than GNU's `--long[=v]` and bundled short flags with
    attached values (`-o/path`)."""
    abbreviations: bool = False
    """Whether the tool accepts unambiguous prefixes of long options (`--outp` for `--output`)."""
    old_style_first_bundle: bool = False
    """Whether a first argument without a dash is a bundle of flags (`tar xf a.tar`)."""


RUNS = "runs the command it names"
GLOBAL = "works outside the project by design (a global install)"

RULES: Mapping[str, Rules] = {
    "git": Rules(
        {
            "--output": PATH,
            "-o": PATH,
            "--output-directory": PATH,
            "--git-dir": PATH,
            "--work-tree": PATH,
            "--exec-path": "runs git's programs from the folder it names",
            "--config-env": "sets configuration, which can run commands",
            "--exec": RUNS,
            "-x": RUNS,
            "--upload-pack": RUNS,
            "--receive-pack": RUNS,
            "--open-files-in-pager": RUNS,
            "-O": RUNS,
        },
        global_options={
            "-C": PATH,
            "-c": "sets configuration, which can run commands (core.pager, core.fsmonitor, aliases)",
            "--namespace": VALUE,
            "--super-prefix": VALUE,
        },
        abbreviations=True,
    ),
    "pytest": Rules(
        {
            "--basetemp": "deletes and recreates the folder it names",
            "-o": "overrides ini options (cache_dir, addopts, …)",
            "--override-ini": "overrides ini options (cache_dir, addopts, …)",
            "-p": "loads the plugin it names",
            "--debug": "writes a debug log to the file it names",
            "--pastebin": "uploads the output",
            **dict.fromkeys(("--junitxml", "--junit-xml", "--result-log", "--report-log", "--log-file"), PATH),
            **dict.fromkeys(("--rootdir", "-c", "--config-file", "--inifile", "--confcutdir"), PATH),
        }
    ),
    "npm": Rules(
        {
            "-g": GLOBAL,
            "--global": GLOBAL,
            "--location": "chooses where packages go (global, user)",
            "--script-shell": "runs scripts with the shell it names",
            **dict.fromkeys(("--prefix", "--cache", "--userconfig", "--globalconfig", "--pack-destination"), PATH),
        },
        subcommands={"link": "links packages globally"},
        abbreviations=True,
    ),
    "yarn": Rules(
        {
            **dict.fromkeys(("--cwd", "--cache-folder", "--modules-folder", "--global-folder", "--link-folder"), PATH),
            **dict.fromkeys(("--prefix", "--filename", "-f", "--out", "-o"), PATH),
        },
        subcommands={"global": GLOBAL, "link": "links packages globally"},
    ),
    "pnpm": Rules(
        {
            "-g": GLOBAL,
            "--global": GLOBAL,
            **dict.fromkeys(("-C", "--dir", "--global-dir", "--store-dir", "--virtual-store-dir"), PATH),
            **dict.fromkeys(("--modules-dir", "--pack-destination", "--cache-dir"), PATH),
        }
    ),
    "cargo": Rules(
        {
            "--config": "overrides configuration, which can run commands",
            "-Z": "enables unstable options",
            **dict.fromkeys(("--target-dir", "--manifest-path", "--out-dir", "--artifact-dir", "-C"), PATH),
            **dict.fromkeys(("--root", "--lockfile-path"), PATH),
        },
        subcommands={"install": GLOBAL},
    ),
    "make": Rules(
        {
            "--eval": "evaluates the makefile text it is given",
            "-E": "evaluates the makefile text it is given",
            **dict.fromkeys(("-C", "--directory", "-f", "--file", "--makefile", "-I", "--include-dir"), PATH),
        },
        abbreviations=True,
    ),
    "go": Rules(
        {
            "-toolexec": RUNS,
            "-exec": RUNS,
            "-w": "writes go's own environment file",
            **dict.fromkeys(("-C", "-o", "-modfile", "-overlay", "-pkgdir", "-trace", "-outputdir"), PATH),
            **dict.fromkeys(("-coverprofile", "-cpuprofile", "-memprofile", "-blockprofile", "-mutexprofile"), PATH),
        },
        subcommands={"install": GLOBAL},
        single_dash=True,
    ),
    "ruff": Rules(
        {
            "--config": "takes settings that can name any path",
            "--cache-dir": PATH,
            "--output-file": PATH,
            "-o": PATH,
        }
    ),
    "mypy": Rules(
        {
            option: PATH
            for option in (
                "--cache-dir",
                "--config-file",
                "--junit-xml",
                "--html-report",
                "--xml-report",
                "--txt-report",
                "--linecount-report",
                "--linecoverage-report",
                "--lineprecision-report",
                "--cobertura-xml-report",
                "--any-exprs-report",
                "--memory-xml-report",
            )
        },
        abbreviations=True,
    ),
    "pip": Rules(
        {
            "--user": "installs into the user's site-packages, outside the project",
            **dict.fromkeys(("-t", "--target", "--prefix", "--root", "--src", "--cache-dir", "--log"), PATH),
            **dict.fromkeys(("--log-file", "--report", "-d", "--dest", "-w", "--wheel-dir"), PATH),
        },
        abbreviations=True,
    ),
    "tar": Rules(
        {
            "-P": "keeps absolute member names, so extracting writes anywhere",
            "--absolute-names": "keeps absolute member names, so extracting writes anywhere",
            **dict.fromkeys(("--to-command", "-I", "--use-compress-program", "--checkpoint-action", "-F"), RUNS),
            **dict.fromkeys(("--info-script", "--new-volume-script", "--rsh-command"), RUNS),
            **dict.fromkeys(("-f", "--file", "-C", "--directory", "--index-file", "-g", "--listed-incremental"), PATH),
        },
        abbreviations=True,
        old_style_first_bundle=True,
    ),
    "sort": Rules(
        {
            "--compress-program": RUNS,
            "-o": PATH,
            "--output": PATH,
            "-T": PATH,
            "--temporary-directory": PATH,
        },
        abbreviations=True,
    ),
    "sed": Rules(
        {"-i": "edits the files it is given in place", "--in-place": "edits the files it is given in place"},
        abbreviations=True,
    ),
    "tee": Rules({}, operands=True),
    "curl": Rules(
        {
            "-K": "reads options from the file it names",
            "--config": "reads options from the file it names",
            **dict.fromkeys(("-o", "--output", "--output-dir", "-D", "--dump-header", "-c", "--cookie-jar"), PATH),
            **dict.fromkeys(("--trace", "--trace-ascii", "--stderr", "--libcurl", "--etag-save"), PATH),
            **dict.fromkeys(("--hsts", "--alt-svc"), PATH),
            "--cookie": VALUE,  # reads cookies: not an abbreviation of `--cookie-jar`
        },
        abbreviations=True,
    ),
    "wget": Rules(
        {
            "-e": "runs wgetrc commands, which can set any output",
            "--execute": "runs wgetrc commands, which can set any output",
            "--config": "reads settings from the file it names",
            **dict.fromkeys(("-O", "--output-document", "-o", "--output-file", "-a", "--append-output"), PATH),
            **dict.fromkeys(("-P", "--directory-prefix", "--save-cookies"), PATH),
        },
        abbreviations=True,
    ),
    "find": Rules(
        {
            "-delete": "deletes what it finds",
            **dict.fromkeys(("-exec", "-execdir", "-ok", "-okdir"), RUNS),
            **dict.fromkeys(("-fprint", "-fprint0", "-fprintf", "-fls"), PATH),
        },
        single_dash=True,
    ),
}
ALIASES = {"py.test": "pytest", "pip3": "pip", "gmake": "make", "gtar": "tar", "bsdtar": "tar"}
RUNNERS = frozenset({"uv", "poetry", "pipenv", "pdm", "hatch", "rye", "npx", "pnpx", "bunx"})
"""Programs that run another: the first known tool among their arguments is checked."""
PREFIXES = frozenset({"env", "timeout", "nice", "nohup", "time", "stdbuf", "xargs", "command", "exec"})
"""Commands that run the rest of the line as another command."""
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?|py")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_WORD = re.compile(r"""(?:'[^']*'|"(?:[^"\\]|\\.)*"|\\.|[^\s'"\\])+""", re.DOTALL)
_PIECE = re.compile(r"""'([^']*)'|"((?:[^"\\]|\\.)*)"|\\(.)|([^'"\\]+)""", re.DOTALL)
_EXPANDS = re.compile(r"\$|^~([+-]\d*|\d+)(/|$)")
"""In a word's unquoted text: what the shell fills in from its state (variables, `$(…)`, `$'…'`, `~+`, `~-`)."""
_MATCHES = re.compile(r"[*?]|\[.*\]|\{.*(,|\.\.).*\}")
"""In a word's unquoted text: a glob or a brace expansion, which the shell turns into other words."""


@dataclass(frozen=True)
class _Word:
    """One word of a command, as `sh` splits it."""

    text: str
    """As written."""
    value: str
    """What the program gets after quote removal, unless the shell expands it."""
    expands: bool
    """Whether the shell fills part of it in when the command runs."""
    matches: bool
    """Whether the shell turns it into the names of the files it matches."""


def risky_option(command: str, project_root: Path) -> str | None:
    """Why `command` must not run on the strength of the allow-list alone, or None when no option leaves the project.

    `command` has passed the allow-list's own checks (no redirection, substitution or subshell). Relative paths count
    from the project root, or from wherever a `cd` in the command may have gone.
    """
    cwds: list[Path | None] = [project_root]
    for segment in SEGMENT_SPLIT.split(command):
        try:
            words = _words(segment)
        except ValueError:
            return f"`{segment.strip()}` cannot be parsed"
        tokens = [word.value for word in words]
        changes_directory = tokens[:1] in (["cd"], ["pushd"])
        tool, start = (None, len(tokens)) if changes_directory else _tool(tokens)
        read = start if tool is None else len(tokens)  # the words this check looks at
        computed = (word.text for index, word in enumerate(words) if word.expands or (word.matches and index < read))
        if (text := next(computed, None)) is not None:
            return f"the shell expands `{text}` when the command runs, so it can hold any option"
        if changes_directory:
            destination = tokens[1] if len(tokens) > 1 else "~"
            cwds += [_resolve(destination, cwd) for cwd in cwds]
        elif tool is not None and (why := _check(tool, tokens[start:], cwds, project_root)):
            return why
    return None


def _words(segment: str) -> list[_Word]:
    """The words of one simple command (ValueError when a quote or an escape is left open)."""
    if _WORD.sub(" ", segment).strip():
        raise ValueError(segment)
    words: list[_Word] = []
    for text in _WORD.findall(segment):
        value: list[str] = []
        unquoted: list[str] = []  # quoted characters as NUL, but for `$` in double quotes, which still expands
        for piece in _PIECE.finditer(text):
            single, double, escaped, plain = piece.groups()
            if plain is not None:
                value.append(plain)
                unquoted.append(plain)
            elif double is not None:
                literal = re.sub(r'\\([$`"\\])', r"\1", double)
                value.append(literal)
                unquoted.append(re.sub(r"[^$]", "\0", literal))
            else:
                literal = single if escaped is None else escaped
                value.append(literal)
                unquoted.append("\0" * len(literal))
        bare = "".join(unquoted)
        words.append(_Word(text, "".join(value), bool(_EXPANDS.search(bare)), bool(_MATCHES.search(bare))))
    return words


def _check(tool: str, args: Sequence[str], cwds: Sequence[Path | None], root: Path) -> str | None:
    rules = RULES[tool]
    if rules.old_style_first_bundle and args and not args[0].startswith("-"):
        args = [f"-{args[0]}", *args[1:]]
    after_operand = False
    index = 0
    while index < len(args):
        token = args[index]
        index += 1
        if token == "--":  # only operands follow
            outside = [value for value in args[index:] if rules.operands and _leaves(value, cwds, root)]
            return _outside(tool, "", outside[0]) if outside else None
        if not token.startswith("-"):
            if not after_operand and token in rules.subcommands:
                return f"`{tool} {token}` {rules.subcommands[token]}"
            after_operand = True
            if rules.operands and _leaves(token, cwds, root):
                return _outside(tool, "", token)
            continue
        table = {**rules.options, **({} if after_operand else rules.global_options)}
        for option, attached in _options(token, table, rules):
            if (kind := table[option]) not in (PATH, VALUE):
                return f"`{option}` ({tool}) {kind}"
            value = attached
            if value is None and index < len(args) and not args[index].startswith("-"):
                value = args[index]
                index += 1
            if kind == PATH and value is not None and _leaves(value, cwds, root):
                return _outside(tool, option, value)
    return None


def _tool(tokens: Sequence[str]) -> tuple[str | None, int]:
    """The known tool a segment runs and where its arguments start, looking through assignments, prefixes, runners
    and `python -m`; for any other program, None and where the words it alone reads start (none behind a prefix or a
    runner, which may run any of them)."""
    behind_runner = False
    for index, token in enumerate(tokens):
        name = Path(token).name
        if (tool := ALIASES.get(name, name)) in RULES:
            return tool, index + 1
        if _PYTHON.fullmatch(name):
            return _python_module(tokens, index + 1)
        if name in PREFIXES or name in RUNNERS:
            behind_runner = True  # its own arguments (`timeout 60`, `uv run --with x`) are passed over
        elif not behind_runner and not _ASSIGNMENT.match(token):
            return None, index + 1
    return None, len(tokens)


def _python_module(tokens: Sequence[str], start: int) -> tuple[str | None, int]:
    """What `python` runs when its arguments begin at `start`, as `_tool` tells it."""
    for index in range(start, len(tokens)):
        arg = tokens[index]
        if arg.startswith("-m"):
            module = arg[2:] or (tokens[index + 1] if index + 1 < len(tokens) else "")
            tool = ALIASES.get(module, module)
            return (tool if tool in RULES else None), index + (1 if arg[2:] else 2)
        if not arg.startswith("-") or arg == "-c":
            return None, index + 1  # a script or `-c CODE`: nothing this table knows
    return None, len(tokens)


def _options(token: str, table: Mapping[str, str], rules: Rules) -> Iterator[tuple[str, str | None]]:
    """The table's options one argument holds, each with its attached value (None: the value may follow)."""
    if rules.single_dash or token.startswith("--"):
        name, equals, value = token.partition("=")
        name = "-" + name.lstrip("-") if rules.single_dash else name
        attached = value if equals else None
        if name in table:
            yield name, attached
        elif rules.abbreviations and len(name) >= 5:
            yield from ((option, attached) for option in table if option.startswith(name))
        return
    for position, letter in enumerate(token[1:], start=2):
        if (option := f"-{letter}") in table:
            yield option, token[position:] or None
            if table[option] in (PATH, VALUE):
                return  # the rest of the argument is this option's value


def _resolve(path: str, cwd: Path | None) -> Path | None:
    """Where `path` lands from `cwd`; None when unknown (`cd -`, an option such as `cd -P DIR`'s, or an unknown
    starting point)."""
    target = Path(path).expanduser()
    if path.startswith("-") or (cwd is None and not target.is_absolute()):
        return None
    return (target if cwd is None else cwd / target).resolve()


def _leaves(path: str, cwds: Sequence[Path | None], root: Path) -> bool:
    targets = [_resolve(path, cwd) for cwd in cwds]
    return any(target is None or (target != root and root not in target.parents) for target in targets)


def _outside(tool: str, option: str, path: str) -> str:
    named = f"`{option} {path}`" if option else f"`{path}`"
    return f"{named} points {tool} outside the project"
