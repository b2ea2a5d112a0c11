"""Mutation testing of the risky packages (issue 23): of one-line bugs planted one at a time, how many the tests catch.

    .venv/bin/python benchmarks/mutation.py PACKAGE [--sample 100] [--seed 0] [--mutant ID]... [--tests TEST...]

Needs the `mutation` extra (`.venv/bin/pip install -e '.[test,mutation]'`). Slow, so not in CI: run it by hand, one
package at a time, when the tests of a package change.

The mutants are cosmic-ray's (its core operators: arithmetic, comparison and boolean operators swapped, `not` added,
numbers moved by one, `True`/`False` swapped, `break`/`continue` swapped, an exception handler's type replaced, a
decorator removed, a loop that runs zero times). Mutations inside type annotations are left out: the modules use
`from __future__ import annotations`, so nothing ever evaluates them. A mutation site is one place and one operator
family (`a < b` as `a <= b`, `a > b` or `a == b` is one site); `--sample` sites are drawn with `--seed`, and one of each
site's variants, so the same source and seed give the same mutants. `--mutant ID` runs the mutants named instead
(the ids the report prints).

cosmic-ray writes each mutant into the source file itself and puts the original back after its test run, so the
console-script and pseudo-terminal tests, which run the editable install's `code-puppy` in a child process, run the
mutant too. Do not run anything else in this checkout meanwhile. A run refuses to start while the package's sources
differ from git's HEAD (a run killed with SIGKILL leaves its mutant in place: `git checkout -- FILE` puts it back).

First the package's tests run once under coverage, in pytest and in every Python child, with each line's tests recorded
(`benchmarks/mutation_contexts.py`); a test that fails there is left out. Then each mutant runs only the tests that
execute its statement (all of them for code that runs when its module is imported: a module's top level, class bodies,
defaults; plus, for code that coverage cannot follow, the `unmeasured` tests of the table), fastest first, with `-x` and
a timeout of three times their time plus a minute. It is killed when a test fails, when the run times out (an infinite
loop), or when its module no longer imports (the report says which). A mutant on a statement that none of the tests
executes survives without a run ("tests run: none"): a test elsewhere in the suite may still catch it, which `--tests
FILE_OR_NODE_ID...` (in place of the table's) shows.

Printed: a line per mutant as it finishes, then the score (killed/total, %, minutes) and the survivors (file:line,
the mutation, its id), in Markdown.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

import coverage
from cosmic_ray.ast import ast_nodes, get_ast, get_ast_from_path
from cosmic_ray.commands import init
from cosmic_ray.mutating import mutate_code, use_mutation
from cosmic_ray.plugins import get_operator
from cosmic_ray.work_db import WorkDB
from cosmic_ray.work_item import MutationSpec
from coverage.parser import PythonParser


@dataclass(frozen=True)
class Package:
    sources: tuple[str, ...]
    """The files mutated, relative to the checkout."""
    tests: tuple[str, ...]
    """The tests that exercise them: files, folders or node ids."""
    unmeasured: dict[str, tuple[str, ...]] = field(default_factory=dict[str, tuple[str, ...]])
    """Per source file whose code also runs where coverage cannot follow, the tests that run it there: each of its
    mutants runs them whatever the coverage says."""


PACKAGES = {
    "sandbox": Package(
        sources=(
            "code_puppy/sandbox/__init__.py",
            "code_puppy/sandbox/_landlock_exec.py",
            "code_puppy/cli/sandbox/commands.py",
            "code_puppy/cli/sandbox/probes.py",
            "code_puppy/sandbox/guard.py",
            "code_puppy/sandbox/sandboxed_shell.py",
        ),
        tests=(
            "tests/test_sandbox.py",
            "tests/test_landlock.py",
            "tests/test_sandbox_guard.py",
            "tests/test_auto_mode.py",
            "tests/permissions/test_permissions.py",
            "tests/workspace/test_shell_outputs.py",
            "tests/test_worktrees.py::test_the_main_checkouts_sandbox_guard_leaves_worktrees_to_their_agents",
            "tests/test_bundled_plugins.py::test_verify_loop_runs_its_check_like_the_agents_commands",
            "tests/test_mcp.py::test_a_stdio_server_with_sandbox_true_runs_confined",
            "tests/test_mcp.py::test_sandbox_true_is_for_stdio_servers",
            "tests/test_plugin_hooks.py::test_post_tool_call_sees_the_command_as_written_in_auto_mode",
            "tests/chat/test_chat_pty.py::test_permissions_auto_sandboxes_the_next_commands",
            "tests/chat/test_chat_pty.py::test_the_model_can_ask_to_run_a_command_outside_the_sandbox",
        ),
        # The Landlock launcher runs as `python -I -S` inside the sandbox, where coverage's start-up hook is not read.
        unmeasured={"code_puppy/sandbox/_landlock_exec.py": ("tests/test_landlock.py",)},
    ),
    "checkpoints": Package(
        sources=(
            "code_puppy/checkpoints/__init__.py",
            "code_puppy/checkpoints/shadow.py",
            "code_puppy/checkpoints/git_format.py",
            "code_puppy/checkpoints/ignores.py",
            "code_puppy/checkpoints/watch.py",
            "code_puppy/checkpoints/capability.py",
            "code_puppy/sessions/checkpoints.py",
            "code_puppy/checkpoints/rewind.py",
        ),
        tests=(
            "tests/checkpoints",
            "tests/checkpoints/test_capability.py",
            "tests/test_worktrees.py::test_checkpoints_of_the_main_checkout_leave_worktrees_out",
        ),
    ),
    "journal": Package(
        sources=("code_puppy/sessions/journal.py", "code_puppy/run/turn_journal.py"),
        tests=(
            "tests/test_journal.py",
            "tests/run/test_turn_journal.py",
            "tests/sessions/test_journal_recovery.py",
            "tests/run/test_history_persistence.py",
            "tests/test_sessions_cli.py",
            "tests/test_store_failures.py",
        ),
    ),
    "spending": Package(
        sources=("code_puppy/cost/spending.py", "code_puppy/sessions/costs.py"),
        tests=(
            "tests/cost/test_spending.py",
            "tests/sessions/test_cost_book.py",
            "tests/cost/test_costs.py",
            "tests/chat/test_chat_costs.py",
        ),
    ),
    "trust": Package(
        sources=("code_puppy/trust.py",),
        tests=(
            "tests/test_trust.py",
            "tests/test_plugin_discovery.py",
            "tests/test_mcp_config.py",
            "tests/test_config.py",
            "tests/test_plugins_cli.py::test_plugins_list_and_trust",
            "tests/test_history_cli.py::test_project_processors_need_trust",
            "tests/test_mcp.py::test_mcp_list_reads_a_trusted_projects_mcp_json",
            "tests/test_worktrees.py::test_the_repository_trust_carries_over_to_its_worktrees",
            "tests/permissions/test_permissions.py::test_the_trust_file_and_user_config_ask_when_they_lie_inside_the_project",
            "tests/test_file_definitions.py::test_an_untrusted_projects_claude_hooks_do_not_run",
            "tests/test_file_definitions.py::test_claude_code_hooks_run_unchanged_in_a_trusted_project",
            "tests/chat/test_chat_costs.py::test_a_project_budget_applies_once_the_project_is_trusted",
        ),
    ),
    "permissions": Package(
        sources=("code_puppy/permissions/policy.py", "code_puppy/permissions/risky_options.py"),
        tests=(
            "tests/permissions/test_permissions.py",
            "tests/permissions/test_risky_options.py",
            "tests/chat/test_approvals.py",
            "tests/definitions/test_definitions.py",
            "tests/test_mcp_config.py",
            "tests/test_plugin_hooks.py",
            "tests/test_auto_mode.py",
            "tests/test_worktrees.py",
        ),
    ),
    "shell_hooks": Package(
        sources=(
            "plugins/shell_hooks/__init__.py",
            "plugins/shell_hooks/claude.py",
            "plugins/shell_hooks/settings.py",
            "plugins/shell_hooks/transcript.py",
        ),
        tests=(
            "tests/test_shell_hooks.py",
            "tests/test_claude_hooks.py",
            "tests/test_bundled_plugins.py",
            "tests/test_plugin_discovery.py",
            "tests/test_file_definitions.py::test_an_untrusted_projects_claude_hooks_do_not_run",
            "tests/test_file_definitions.py::test_claude_code_hooks_run_unchanged_in_a_trusted_project",
            "tests/test_file_definitions.py::test_claude_hooks_changed_or_added_after_trust_do_not_run_and_say_so",
            "tests/checkpoints/test_rewind_cli.py::test_what_a_plugin_hook_command_changes_is_part_of_the_turn",
        ),
    ),
}

ROOT = Path(__file__).resolve().parent.parent
PYTEST = (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider")


@dataclass(frozen=True)
class Mutant:
    spec: MutationSpec
    before: str
    """The changed lines as they are, stripped."""
    after: str
    """The changed lines as the mutant has them."""
    at_import: bool
    """Whether the mutated code runs when its module is imported (outside any function body): what every test then
    relies on, though coverage credits it to the test that happened to import the module first."""

    @property
    def operator(self) -> str:
        return self.spec.operator_name.removeprefix("core/")

    @property
    def id(self) -> str:
        return mutant_id(self.spec)

    @property
    def where(self) -> str:
        return f"{self.spec.module_path}:{self.spec.start_pos[0]}"


@dataclass(frozen=True)
class Tests:
    """What the coverage run saw."""

    seconds: dict[str, float]
    """Each passing test's time."""
    failing: list[str]
    lines: dict[tuple[str, int], set[str]]
    """The tests that executed each line of the sources; "" stands for the pytest process importing the module while
    it collects the tests (a module's top level, its definitions), which every test it runs then depends on."""


def mutant_id(spec: MutationSpec) -> str:
    return f"{spec.module_path}@{spec.operator_name.removeprefix('core/')}#{spec.occurrence}"


def in_annotation(tree: object) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    spans: list[tuple[tuple[int, int], tuple[int, int]]] = []
    for node in ast_nodes(tree):
        annotation = getattr(node, "annotation", None) if node.type in ("funcdef", "param") else None
        if node.type == "annassign":
            annotation = node.children[1]
        if annotation is not None:
            spans.append((annotation.start_pos, annotation.end_pos))
    return spans


def mutation_sites(sources: tuple[str, ...]) -> dict[tuple[str, tuple[int, int], str], list[MutationSpec]]:
    """Every mutation cosmic-ray makes in `sources` outside annotations, by site (file, position, operator family)."""
    with tempfile.TemporaryDirectory() as scratch:
        work_db = WorkDB(Path(scratch, "session.sqlite"), WorkDB.Mode.create)
        try:
            init([Path(source) for source in sources], work_db, {})
            specs = [item.mutations[0] for item in work_db.work_items]
        finally:
            work_db.close()
    annotations = {source: in_annotation(get_ast_from_path(Path(source))) for source in sources}
    sites: dict[tuple[str, tuple[int, int], str], list[MutationSpec]] = defaultdict(list)
    for spec in specs:
        path = str(spec.module_path)
        if any(start <= spec.start_pos < end for start, end in annotations[path]):
            continue
        family = spec.operator_name.removeprefix("core/").split("_")[0]
        sites[path, spec.start_pos, family].append(spec)
    return sites


def describe(spec: MutationSpec) -> Mutant | None:
    """The mutant, or None when cosmic-ray cannot make it (its ExceptionReplacer fails on a dotted exception name,
    `except (OSError, json.JSONDecodeError)`)."""
    source = spec.module_path.read_text()
    try:
        mutated = mutate_code(source, get_operator(spec.operator_name)(), spec.occurrence)
    except AttributeError:
        return None
    diff = list(difflib.unified_diff(source.splitlines(), mutated.splitlines(), n=0, lineterm=""))[2:]
    before = " ".join(line[1:].strip() for line in diff if line.startswith("-"))
    after = " ".join(line[1:].strip() for line in diff if line.startswith("+"))
    node = get_ast(source).get_leaf_for_position(spec.start_pos, include_prefixes=True)
    at_import = True
    while node is not None:
        if node.type in ("funcdef", "lambdef") and spec.start_pos >= node.children[-1].start_pos:
            at_import = False
        node = node.parent
    return Mutant(spec, before, after, at_import)


def draw(sites: dict[tuple[str, tuple[int, int], str], list[MutationSpec]], sample: int, seed: int) -> list[Mutant]:
    """`sample` sites drawn with `seed` and one mutant of each; a site whose mutant cannot be made is drawn again."""
    rng = random.Random(seed)
    left: list[tuple[str, tuple[int, int], str]] = sorted(sites)
    mutants: list[Mutant] = []
    while left and len(mutants) < sample:
        drawn = rng.sample(left, min(sample - len(mutants), len(left)))
        mutants += filter(None, [describe(rng.choice(sites[site])) for site in drawn])
        left = sorted(set(left) - set(drawn))
    return mutants


def run_under_coverage(package: Package, scratch: Path) -> Tests:
    data, tests_file = scratch / "coverage", scratch / "tests.json"
    data.mkdir()
    rc = scratch / "coveragerc"
    include = "".join(f"\n    {ROOT / source}" for source in package.sources)
    rc.write_text(
        "[run]\n"
        f"data_file = {data / '.coverage'}\n"
        "parallel = true\n"
        f"include ={include}\n"
        # A child started by a test measures for that test.
        "context = ${PYTEST_CURRENT_TEST}\n"
        # A child that runs none of the sources must not print a warning a test would see.
        "disable_warnings = no-data-collected, module-not-measured, module-not-imported, couldnt-parse\n"
    )
    env = {
        **os.environ,
        "COVERAGE_PROCESS_START": str(rc),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "benchmarks"), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "MUTATION_TESTS_FILE": str(tests_file),
    }
    subprocess.run([*PYTEST, "-p", "mutation_contexts", *package.tests], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    seen: dict[str, dict[str, float | bool]] = json.loads(tests_file.read_text())
    combined = coverage.Coverage(data_file=str(data / ".coverage"), config_file=False)
    combined.combine([str(data)])
    measured = combined.get_data()
    lines: dict[tuple[str, int], set[str]] = defaultdict(set)
    for measured_file in measured.measured_files():
        source = str(Path(measured_file).relative_to(ROOT))
        for line, contexts in measured.contexts_by_lineno(measured_file).items():
            for context in contexts:
                test = context.rsplit(" (", 1)[0] if context.endswith(("(setup)", "(call)", "(teardown)")) else context
                if test in seen or not test:
                    lines[source, line].add(test)
    return Tests(
        seconds={test: float(result["seconds"]) for test, result in seen.items() if not result["failed"]},
        failing=[test for test, result in seen.items() if result["failed"]],
        lines=lines,
    )


def tests_for(mutant: Mutant, package: Package, tests: Tests, parsers: dict[str, PythonParser]) -> list[str]:
    """The tests that execute the mutant's statement, fastest first."""
    source, line = str(mutant.spec.module_path), mutant.spec.start_pos[0]
    if source not in parsers:
        parsers[source] = PythonParser(filename=source)
        parsers[source].parse_source()
    # A statement over several lines reports some of them only, its first always.
    statement = range(parsers[source].first_line(line), line + 1)
    chosen = {test for number in statement for test in tests.lines.get((source, number), ())}
    if mutant.at_import or "" in chosen:
        chosen = set(tests.seconds)
    chosen |= {
        test
        for prefix in package.unmeasured.get(source, ())
        for test in tests.seconds
        if test == prefix or test.startswith((f"{prefix}::", f"{prefix.rstrip('/')}/"))
    }
    return sorted(chosen & tests.seconds.keys(), key=lambda test: tests.seconds[test])


def imports(source: str) -> bool:
    module = source.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    checked = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT, env=env, capture_output=True)
    return checked.returncode == 0


def test_mutant(mutant: Mutant, chosen: list[str], seconds: float) -> str:
    """How the mutant ended: `killed by TEST`, `killed: timeout`, `killed: import`, or `survived`."""
    operator = get_operator(mutant.spec.operator_name)()
    cached = Path(importlib.util.cache_from_source(str(mutant.spec.module_path)))
    # Bytecode is neither written nor (once removed) read: a mutant and the original can share a size and an mtime.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        with use_mutation(mutant.spec.module_path, operator, mutant.spec.occurrence):
            cached.unlink(missing_ok=True)
            with subprocess.Popen(
                [*PYTEST, "-x", *chosen],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            ) as run:
                try:
                    output = run.communicate(timeout=60 + 3 * seconds)[0]
                except subprocess.TimeoutExpired:
                    return "killed: timeout"
                finally:
                    # The tests' own children too, whatever they were doing.
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(run.pid, signal.SIGKILL)
            if run.returncode == 0:
                return "survived"
            if not imports(str(mutant.spec.module_path)):
                return "killed: import"
    finally:
        cached.unlink(missing_ok=True)
    failed = [
        line.split(" ", 1)[1].split(" - ", 1)[0]
        for line in output.splitlines()
        if line.startswith(("FAILED ", "ERROR "))
    ]
    return f"killed by {failed[0] if failed else 'the test run'}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("package", choices=PACKAGES)
    parser.add_argument("--sample", type=int, default=100, help="mutation sites drawn (default 100)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mutant", action="append", default=[], help="run this mutant (an id the report printed)")
    parser.add_argument("--tests", nargs="+", help="run these tests (files or node ids) instead of the table's")
    arguments = parser.parse_args()
    package = PACKAGES[arguments.package]
    if arguments.tests:
        package = replace(package, tests=tuple(arguments.tests))
    os.chdir(ROOT)
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--", *package.sources], capture_output=True, text=True, check=True
    ).stdout
    if changed:
        print(f"mutation: commit or stash the changes to the sources first:\n{changed}", end="", file=sys.stderr)
        return 2
    started = time.monotonic()
    sites = mutation_sites(package.sources)
    if arguments.mutant:
        by_id = {mutant_id(spec): spec for specs in sites.values() for spec in specs}
        unknown = [mutant for mutant in arguments.mutant if mutant not in by_id]
        if unknown:
            print(f"mutation: no such mutant in {arguments.package}: {', '.join(unknown)}", file=sys.stderr)
            return 2
        mutants = list(filter(None, [describe(by_id[mutant]) for mutant in arguments.mutant]))
    else:
        mutants = draw(sites, arguments.sample, arguments.seed)
    mutants.sort(key=lambda mutant: (str(mutant.spec.module_path), mutant.spec.start_pos))
    print(f"{arguments.package}: {len(mutants)} of {len(sites)} mutation sites (seed {arguments.seed})", flush=True)

    with tempfile.TemporaryDirectory() as scratch:
        tests = run_under_coverage(package, Path(scratch))
    covered_minutes = (time.monotonic() - started) / 60
    print(f"coverage run: {len(tests.seconds)} tests pass, {covered_minutes:.1f} min", flush=True)
    for test in tests.failing:
        print(f"  left out, it fails without a mutant: {test}", flush=True)

    # SIGTERM unwinds like Ctrl-C, so the mutant in place is put back.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parsers: dict[str, PythonParser] = {}
    survivors: list[tuple[Mutant, int]] = []
    kills: dict[str, int] = defaultdict(int)
    for number, mutant in enumerate(mutants, 1):
        chosen = tests_for(mutant, package, tests, parsers)
        began = time.monotonic()
        how = test_mutant(mutant, chosen, sum(tests.seconds[test] for test in chosen)) if chosen else "survived"
        if how == "survived":
            survivors.append((mutant, len(chosen)))
        kills[how] += 1
        print(
            f"{number:>3}/{len(mutants)} {how} ({len(chosen)} tests, {time.monotonic() - began:.0f} s)\n"
            f"        {mutant.where}: `{mutant.before}` -> `{mutant.after}` ({mutant.id})",
            flush=True,
        )

    killed = len(mutants) - len(survivors)
    print(
        f"\n## {arguments.package}\n\n"
        f"{killed}/{len(mutants)} killed ({100 * killed / max(len(mutants), 1):.0f}%) in "
        f"{(time.monotonic() - started) / 60:.0f} min: seed {arguments.seed}, {len(mutants)} of {len(sites)} sites, "
        f"{len(tests.seconds)} tests (their coverage run {covered_minutes:.0f} min). Of the killed, "
        f"{kills['killed: timeout']} by a timeout and {kills['killed: import']} because the module failed to import.\n"
    )
    if survivors:
        print("| where | mutation | tests run | id |\n|---|---|---|---|")
        for mutant, ran in survivors:
            print(f"| {mutant.where} | `{mutant.before}` → `{mutant.after}` | {ran or 'none'} | `{mutant.id}` |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
