"""Allow-listed commands with options that write, delete or run things outside the project (issue 10, item 7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from code_puppy.permissions.policy import PermissionPolicy
from tests.conftest import run_cli
from tests.fake_llm import call, text, tool_calls

REFUSED = [
    ("git diff --no-index --output=/elsewhere/x a b", "`--output /elsewhere/x` points git outside the project"),
    ("git diff --no-index --output /elsewhere/x a b", "`--output /elsewhere/x` points git outside the project"),
    ("git diff --outp=/elsewhere/x", "`--output /elsewhere/x` points git outside the project"),
    ("git format-patch -o ../patches HEAD~1", "`-o ../patches` points git outside the project"),
    ("git archive -o/elsewhere/a.zip HEAD", "`-o /elsewhere/a.zip` points git outside the project"),
    ("git -C /elsewhere status", "`-C /elsewhere` points git outside the project"),
    ("git --git-dir=/elsewhere/.git log", "`--git-dir /elsewhere/.git` points git outside the project"),
    ("git --work-tree ../other status", "`--work-tree ../other` points git outside the project"),
    (
        "git -c core.pager=sh log",
        "`-c` (git) sets configuration, which can run commands (core.pager, core.fsmonitor, aliases)",
    ),
    ("git --exec-path=/elsewhere status", "`--exec-path` (git) runs git's programs from the folder it names"),
    ("git rebase -x 'make' main", "`-x` (git) runs the command it names"),
    ("/usr/bin/git diff --output=/elsewhere/x", "`--output /elsewhere/x` points git outside the project"),
    ("pytest --basetemp=tmp", "`--basetemp` (pytest) deletes and recreates the folder it names"),
    ("pytest -q --basetemp /elsewhere", "`--basetemp` (pytest) deletes and recreates the folder it names"),
    ("pytest -o cache_dir=/elsewhere", "`-o` (pytest) overrides ini options (cache_dir, addopts, …)"),
    ("pytest -ocache_dir=/elsewhere", "`-o` (pytest) overrides ini options (cache_dir, addopts, …)"),
    ("pytest --junitxml=/elsewhere/r.xml", "`--junitxml /elsewhere/r.xml` points pytest outside the project"),
    ("pytest --junit-xml ~/r.xml", "`--junit-xml ~/r.xml` points pytest outside the project"),
    ("pytest -p evil_plugin", "`-p` (pytest) loads the plugin it names"),
    ("pytest --rootdir=/elsewhere", "`--rootdir /elsewhere` points pytest outside the project"),
    ("py.test --result-log=/elsewhere/log", "`--result-log /elsewhere/log` points pytest outside the project"),
    ("python -m pytest --basetemp=x", "`--basetemp` (pytest) deletes and recreates the folder it names"),
    (
        "python3.11 -m pytest --junitxml=/elsewhere/r.xml",
        "`--junitxml /elsewhere/r.xml` points pytest outside the project",
    ),
    ("uv run pytest -p x", "`-p` (pytest) loads the plugin it names"),
    ("timeout 60 pytest --basetemp=x", "`--basetemp` (pytest) deletes and recreates the folder it names"),
    ("CI=1 pytest --basetemp=x", "`--basetemp` (pytest) deletes and recreates the folder it names"),
    ("npm install -g left-pad", "`-g` (npm) works outside the project by design (a global install)"),
    ("npm install --prefix=/elsewhere", "`--prefix /elsewhere` points npm outside the project"),
    ("yarn global add x", "`yarn global` works outside the project by design (a global install)"),
    ("pnpm -C /elsewhere install", "`-C /elsewhere` points pnpm outside the project"),
    ("cargo build --target-dir /elsewhere", "`--target-dir /elsewhere` points cargo outside the project"),
    ("cargo install ripgrep", "`cargo install` works outside the project by design (a global install)"),
    ("make -C /elsewhere", "`-C /elsewhere` points make outside the project"),
    ("make -f ../Makefile", "`-f ../Makefile` points make outside the project"),
    ("go build -o /usr/local/bin/app ./cmd", "`-o /usr/local/bin/app` points go outside the project"),
    ("go test -toolexec=evil ./...", "`-toolexec` (go) runs the command it names"),
    ("go install ./...", "`go install` works outside the project by design (a global install)"),
    ("ruff check --cache-dir=/elsewhere", "`--cache-dir /elsewhere` points ruff outside the project"),
    ("ruff check --output-file /elsewhere/r.json", "`--output-file /elsewhere/r.json` points ruff outside the project"),
    ("mypy --cache-dir=/elsewhere .", "`--cache-dir /elsewhere` points mypy outside the project"),
    ("tar -czf /elsewhere/a.tgz .", "`-f /elsewhere/a.tgz` points tar outside the project"),
    ("tar xzf a.tgz -C /", "`-C /` points tar outside the project"),
    ("tar -xPf a.tar", "`-P` (tar) keeps absolute member names, so extracting writes anywhere"),
    ("sort -o /elsewhere/x data.txt", "`-o /elsewhere/x` points sort outside the project"),
    ("sort -ro/elsewhere/x data.txt", "`-o /elsewhere/x` points sort outside the project"),
    ("tee ../x", "`../x` points tee outside the project"),
    ("tee -a -- /elsewhere/x", "`/elsewhere/x` points tee outside the project"),
    ("curl -sSLo /elsewhere/x https://example.com", "`-o /elsewhere/x` points curl outside the project"),
    (
        "curl --output-dir /elsewhere -O https://example.com/x",
        "`--output-dir /elsewhere` points curl outside the project",
    ),
    ("wget -O ~/.bashrc https://example.com", "`-O ~/.bashrc` points wget outside the project"),
    ("sed -i s/a/b/ notes.txt", "`-i` (sed) edits the files it is given in place"),
    ("find . -name '*.pyc' -delete", "`-delete` (find) deletes what it finds"),
    ("find . -exec rm {} +", "`-exec` (find) runs the command it names"),
    ("pip install --target /elsewhere x", "`--target /elsewhere` points pip outside the project"),
    ("python -m pip install --user x", "`--user` (pip) installs into the user's site-packages, outside the project"),
    ("git status && git diff --output=/elsewhere/x", "`--output /elsewhere/x` points git outside the project"),
    ("cd /elsewhere && git diff --output=x", "`--output x` points git outside the project"),
    ("git diff --output=link/x", "`--output link/x` points git outside the project"),
    ("git commit -m 'unterminated", "`git commit -m 'unterminated` cannot be parsed"),
]
"""(command, why it is refused); `link` in the project is a symlink to a folder outside it."""


def expands(word: str) -> str:
    return f"the shell expands `{word}` when the command runs, so it can hold any option"


COMPUTED = [
    "--out${NOPE}put=/elsewhere/x",
    "${NOPE:---output=/elsewhere/x}",
    "--output=$HOME/x",
    '"--out${NOPE}put=/elsewhere/x"',
    "--out$'put'=/elsewhere/x",
    "--outpu?=/elsewhere/x",
    "--outp*=/elsewhere/x",
    "--outpu[t]=/elsewhere/x",
    "--{output,stat}=/elsewhere/x",
    "--output={a..b}",
    "~-/x",
    "~+",
    "~2/x",
    "src/*.py",
]
"""Words the shell computes when `git diff WORD` runs: whatever they hold, no allow-list entry covers them."""
REFUSED += [(f"git diff {word}", expands(word)) for word in COMPUTED]
REFUSED += [
    ("pytest --base${X}temp=/elsewhere", expands("--base${X}temp=/elsewhere")),
    ("ls $HOME", expands("$HOME")),  # `$` counts wherever it is
    ("p?test --basetemp=..", expands("p?test")),  # a file named `pytest` makes it pytest
    ("timeout 60 *", expands("*")),  # behind a prefix every word may be the command
    ("python *.py", expands("*.py")),
    ("cd s* && git diff --output=x", expands("s*")),
    (
        "curl --output-d /elsewhere -O https://example.com/x",
        "`--output-dir /elsewhere` points curl outside the project",
    ),
    (
        "curl -s --dump-he /elsewhere/h https://example.com",
        "`--dump-header /elsewhere/h` points curl outside the project",
    ),
    ("mypy --cache-d=/elsewhere .", "`--cache-dir /elsewhere` points mypy outside the project"),
    ("npm install --pref=/elsewhere", "`--prefix /elsewhere` points npm outside the project"),
    ("pip install --targ /elsewhere x", "`--target /elsewhere` points pip outside the project"),
    ("tar -xf a.tar --direc=/elsewhere", "`--directory /elsewhere` points tar outside the project"),
    ("sed --in-pl s/a/b/ notes.txt", "`--in-place` (sed) edits the files it is given in place"),
    (
        "wget --output-d /elsewhere/x https://example.com",
        "`--output-document /elsewhere/x` points wget outside the project",
    ),
    ("tar cf /elsewhere/a.tar .", "`-f /elsewhere/a.tar` points tar outside the project"),  # `cf` is `-cf`
    ("go build --o=/elsewhere/app .", "`-o /elsewhere/app` points go outside the project"),
    ("go test -coverprofile=/elsewhere/c.out ./...", "`-coverprofile /elsewhere/c.out` points go outside the project"),
    ("git --namespace ns -C /elsewhere status", "`-C /elsewhere` points git outside the project"),
    ("git --super-prefix p/ -C /elsewhere status", "`-C /elsewhere` points git outside the project"),
    ("npm link", "`npm link` links packages globally"),
    ("yarn link", "`yarn link` links packages globally"),
    ("pushd /elsewhere && git diff --output=x", "`--output x` points git outside the project"),
    ("cd && git diff --output=x", "`--output x` points git outside the project"),  # home
    ("cd - && git diff --output=x", "`--output x` points git outside the project"),  # wherever it was
    ("cd -P /elsewhere && git diff --output=x", "`--output x` points git outside the project"),  # cd's option
    ("python -mpytest --basetemp=x", "`--basetemp` (pytest) deletes and recreates the folder it names"),
    ("python -u -m pytest --basetemp=x", "`--basetemp` (pytest) deletes and recreates the folder it names"),
    ("py -m pytest --basetemp=x", "`--basetemp` (pytest) deletes and recreates the folder it names"),
]
THROUGH = ["pip3", "poetry run", "pipenv run", "pdm run", "hatch run", "rye run", "npx", "pnpx", "bunx", "env", "nice"]
THROUGH += ["nohup", "time", "stdbuf -oL", "xargs", "command", "exec", "gmake", "gtar", "bsdtar"]
"""What runs `pytest` (or is `make`, `tar`, `pip`): each in front of a refused command must keep it refused."""
REFUSED += [
    (f"{runner} pytest -p x", "`-p` (pytest) loads the plugin it names")
    for runner in THROUGH
    if runner not in ("pip3", "gmake", "gtar", "bsdtar")
]
REFUSED += [
    ("pip3 install --user x", "`--user` (pip) installs into the user's site-packages, outside the project"),
    ("gmake -C /elsewhere", "`-C /elsewhere` points make outside the project"),
    ("gtar -cf /elsewhere/a.tar .", "`-f /elsewhere/a.tar` points tar outside the project"),
    ("bsdtar -cf /elsewhere/a.tar .", "`-f /elsewhere/a.tar` points tar outside the project"),
]
LEAVING_BY = {
    "git": "--output -o --output-directory --git-dir --work-tree -C",
    "pytest": "--junitxml --junit-xml --result-log --report-log --log-file --rootdir -c --config-file --inifile "
    "--confcutdir",
    "npm": "--prefix --cache --userconfig --globalconfig --pack-destination",
    "yarn": "--cwd --cache-folder --modules-folder --global-folder --link-folder --prefix --filename -f --out -o",
    "pnpm": "-C --dir --global-dir --store-dir --virtual-store-dir --modules-dir --pack-destination --cache-dir",
    "cargo": "--target-dir --manifest-path --out-dir --artifact-dir -C --root --lockfile-path",
    "make": "-C --directory -f --file --makefile -I --include-dir",
    "go": "-C -o -modfile -overlay -pkgdir -trace -outputdir -coverprofile -cpuprofile -memprofile -blockprofile "
    "-mutexprofile",
    "ruff": "--cache-dir --output-file -o",
    "mypy": "--cache-dir --config-file --junit-xml --html-report --xml-report --txt-report --linecount-report "
    "--linecoverage-report --lineprecision-report --cobertura-xml-report --any-exprs-report --memory-xml-report",
    "pip": "-t --target --prefix --root --src --cache-dir --log --log-file --report -d --dest -w --wheel-dir",
    "tar": "-f --file -C --directory --index-file -g --listed-incremental",
    "sort": "-o --output -T --temporary-directory",
    "curl": "-o --output --output-dir -D --dump-header -c --cookie-jar --trace --trace-ascii --stderr --libcurl "
    "--etag-save --hsts --alt-svc",
    "wget": "-O --output-document -o --output-file -a --append-output -P --directory-prefix --save-cookies",
    "find": "-fprint -fprint0 -fprintf -fls",
}
"""Every option, per tool, whose value is a path the tool writes to or works in."""
RUNS = "runs the command it names"
REFUSED_WHATEVER_THE_VALUE = {
    "git": {
        "--exec-path": "runs git's programs from the folder it names",
        "--config-env": "sets configuration, which can run commands",
        "--exec": RUNS,
        "-x": RUNS,
        "--upload-pack": RUNS,
        "--receive-pack": RUNS,
        "--open-files-in-pager": RUNS,
        "-O": RUNS,
        "-c": "sets configuration, which can run commands (core.pager, core.fsmonitor, aliases)",
    },
    "pytest": {
        "--basetemp": "deletes and recreates the folder it names",
        "-o": "overrides ini options (cache_dir, addopts, …)",
        "--override-ini": "overrides ini options (cache_dir, addopts, …)",
        "-p": "loads the plugin it names",
        "--debug": "writes a debug log to the file it names",
        "--pastebin": "uploads the output",
    },
    "npm": {
        "-g": "works outside the project by design (a global install)",
        "--global": "works outside the project by design (a global install)",
        "--location": "chooses where packages go (global, user)",
        "--script-shell": "runs scripts with the shell it names",
    },
    "pnpm": {
        "-g": "works outside the project by design (a global install)",
        "--global": "works outside the project by design (a global install)",
    },
    "cargo": {"--config": "overrides configuration, which can run commands", "-Z": "enables unstable options"},
    "make": {"--eval": "evaluates the makefile text it is given", "-E": "evaluates the makefile text it is given"},
    "go": {"-toolexec": RUNS, "-exec": RUNS, "-w": "writes go's own environment file"},
    "ruff": {"--config": "takes settings that can name any path"},
    "pip": {"--user": "installs into the user's site-packages, outside the project"},
    "tar": {
        "-P": "keeps absolute member names, so extracting writes anywhere",
        "--absolute-names": "keeps absolute member names, so extracting writes anywhere",
        "--to-command": RUNS,
        "-I": RUNS,
        "--use-compress-program": RUNS,
        "--checkpoint-action": RUNS,
        "-F": RUNS,
        "--info-script": RUNS,
        "--new-volume-script": RUNS,
        "--rsh-command": RUNS,
    },
    "sort": {"--compress-program": RUNS},
    "sed": {"-i": "edits the files it is given in place", "--in-place": "edits the files it is given in place"},
    "curl": {"-K": "reads options from the file it names", "--config": "reads options from the file it names"},
    "wget": {
        "-e": "runs wgetrc commands, which can set any output",
        "--execute": "runs wgetrc commands, which can set any output",
        "--config": "reads settings from the file it names",
    },
    "find": {"-delete": "deletes what it finds", "-exec": RUNS, "-execdir": RUNS, "-ok": RUNS, "-okdir": RUNS},
}
"""Every option, per tool, refused whatever its value, with why."""
REFUSED += [
    (f"{tool} {option} /elsewhere/x", f"`{option} /elsewhere/x` points {tool} outside the project")
    for tool, options in LEAVING_BY.items()
    for option in options.split()
]
REFUSED += [
    (f"{tool} {option} x", f"`{option}` ({tool}) {why}")
    for tool, options in REFUSED_WHATEVER_THE_VALUE.items()
    for option, why in options.items()
]
ALLOWED = [
    "grep -C 3 pattern src",
    "grep -rn -o foo .",
    "git diff -C",
    "git log -c -1",
    "git status --short",
    "git ls-files -o --exclude-standard",
    "git diff --output=changes.diff",
    "git -C sub status",
    "git log -1 --format=%H",
    "pytest -q",
    "pytest -k 'not slow' -x",
    "pytest --junitxml=reports/junit.xml",
    "python -m pytest tests",
    "python script.py --basetemp=/x",
    "go build -o bin/app ./cmd",
    "make -C docs html",
    "tar -xzf a.tgz",
    "tar tf a.tar",
    "sort -o sorted.txt data.txt",
    "tee out.txt",
    "curl -fsSL https://example.com -o page.html",
    "cargo build --release",
    "npm test",
    "ruff check --output-file=ruff.json .",
    "echo --output=/elsewhere/x",
    "cd sub && pytest -q",
    "git log --format='%H ${x} *'",  # single quotes keep it literal
    'git commit -m "plain words, no [expansion]"',
    "git diff --output='$HOME/x'",  # a folder named `$HOME` in the project
    r"git log --grep=\$x\*",
    "git stash show stash@{0}",
    "[ -f setup.py ] && pytest -q",
    "cd ~ && ls",
    "ls *.py",  # nothing checks an unknown program's arguments
    "python script.py *.txt",
    "python -m http.server 8000 --bind ?",
    "echo pytest --basetemp=x",  # an unknown program's arguments are its own
    "python -c -mpytest -p x",  # `-c` takes the next word as code
    "python -m",
    "git diff -- --output=/elsewhere/x",  # after `--`, operands
    "tee -- inside.txt",
    "tee -",  # a file named `-`, here
    'git diff "--out\\put=/elsewhere/x"',  # in double quotes a backslash before `p` stays: not `--output`
    "git diff --output",
    "git -C . status",
    "git --namespace /elsewhere status",  # a value, not a path
    "git commit -m 'fix: no -c here'",  # `commit` is an operand, not a bundle of flags
    "git diff --no-index /etc/hosts a.txt",  # git diff reads its operands
    "cargo test install",  # a test filter, not `cargo install`
    "cargo build --target /opt/targets/custom.json",  # not `--target-dir`: cargo takes no abbreviations
    "curl --cookie /etc/cookies.txt https://example.com",  # reads them: not `--cookie-jar`
    "go build -o=bin/app .",
]


@pytest.fixture
def policy(tmp_path: Path) -> PermissionPolicy:
    root = tmp_path / "proj"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (root / "link").symlink_to(tmp_path / "outside")
    return PermissionPolicy(root.resolve(), mode="accept-edits", allow=["*"])


LEAVING_AFTER_CD = [
    ("sort --out=/elsewhere/x data.txt", "`--output /elsewhere/x` points sort outside the project"),
    ("make --dir=/elsewhere", "`--directory /elsewhere` points make outside the project"),
    ("cd sub || git diff --output=../x", "`--output ../x` points git outside the project"),
    ("cd sub; git diff --output=../x", "`--output ../x` points git outside the project"),
    ("cd -P /elsewhere && git diff --output=x", "`--output x` points git outside the project"),
]
"""Refused under the narrow entries of `test_narrow_entries_refuse_abbreviated_options_and_paths_from_either_cwd`;
after `cd sub ||` or `cd sub;` the command may run in the project root or in `sub`, and `../x` leaves from the root;
after `cd -P /elsewhere` it runs in `/elsewhere`."""


@pytest.mark.parametrize(("command", "why"), LEAVING_AFTER_CD)
def test_narrow_entries_refuse_abbreviated_options_and_paths_from_either_cwd(
    policy: PermissionPolicy, command: str, why: str
) -> None:
    policy.mode, policy.allow = "ask", ["sort*", "make*", "git diff*", "cd *"]
    assert policy.decide("shell", {"command": command}) == (
        "ask",
        f"`{command}` matches the shell allow-list, but {why}, and an allow-list entry covers a command only without "
        "such options. It needs the user's approval and this run is non-interactive, so it was denied. Do not retry "
        "it; say what you would have run.",
    )


@pytest.mark.parametrize(("command", "why"), REFUSED)
def test_allow_listed_commands_with_options_that_leave_the_project_are_refused(
    policy: PermissionPolicy, command: str, why: str
) -> None:
    assert policy.decide("shell", {"command": command}) == (
        "deny",
        f"`{command}` matches the shell allow-list, but {why}, and an allow-list entry covers a command only without "
        "such options. Do not retry it.",
    )


@pytest.mark.parametrize("command", ALLOWED)
def test_allow_listed_commands_without_them_still_run(policy: PermissionPolicy, command: str) -> None:
    assert policy.decide("shell", {"command": command}) == ("allow", "")


@pytest.mark.parametrize("command", ["pytest --basetemp=/elsewhere", "pytest --base${X}temp=/elsewhere"])
def test_a_refused_command_asks_in_ask_mode_and_yolo_runs_it(policy: PermissionPolicy, command: str) -> None:
    policy.mode = "ask"
    assert policy.decide("shell", {"command": command})[0] == "ask"
    policy.mode = "yolo"
    assert policy.decide("shell", {"command": command}) == ("allow", "")


@pytest.mark.parametrize(
    ("option", "why"),
    [
        ("--output=OUT", "`--output OUT` points git outside the project"),
        ("--out${NOPE}put=OUT", expands("--out${NOPE}put=OUT")),
        ("${NOPE:---output=OUT}", expands("${NOPE:---output=OUT}")),
    ],
    ids=["literal", "variable-inside", "variable-default"],
)
@pytest.mark.parametrize("mode", ["ask", "yolo"])
def test_an_allow_listed_git_diff_cannot_write_outside_the_project(
    server: Any, project: Path, tmp_path: Path, mode: str, option: str, why: str
) -> None:
    (project / "a.txt").write_text("one\n")
    (project / "b.txt").write_text("two\n")
    outside = tmp_path / "outside.diff"
    command = f"git diff --no-index {option.replace('OUT', str(outside))} a.txt b.txt"
    server.script(tool_calls(call("shell", {"command": command})), text("done"))
    completed = run_cli("-p", "diff them", "--allow", "git diff*", "--permission-mode", mode, cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "done\n"), completed.stderr
    (result,) = [m["content"] for m in server.requests[1].body["messages"] if m["role"] == "tool"]
    if mode == "yolo":  # the command does write there: what the allow-list must not let through
        assert "+two" in outside.read_text()
        return
    assert result == (
        f"`{command}` matches the shell allow-list, but {why.replace('OUT', str(outside))}, and an allow-list entry "
        "covers a command only without such options. It needs the user's approval and this run is non-interactive, "
        "so it was denied. Do not retry it; say what you would have run."
    )
    assert not outside.exists()
