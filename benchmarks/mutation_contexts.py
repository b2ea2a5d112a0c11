"""The pytest plugin of `benchmarks/mutation.py`'s coverage run (`-p mutation_contexts`).

It names the coverage context of everything a test runs in the pytest process after the test's node id, and writes
each test's time and outcome to the JSON file `MUTATION_TESTS_FILE` names. The children a test starts (the console
script, the pseudo-terminal chat) name theirs from `PYTEST_CURRENT_TEST`, in the coverage config mutation.py writes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import coverage
import pytest

_tests: dict[str, dict[str, float | bool]] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before the fixtures are set up: what they run is the test's too.
    if (current := coverage.Coverage.current()) is not None:
        current.switch_context(item.nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    test = _tests.setdefault(report.nodeid, {"seconds": 0.0, "failed": False})
    test["seconds"] += report.duration
    test["failed"] = bool(test["failed"]) or report.failed


def pytest_sessionfinish() -> None:
    Path(os.environ["MUTATION_TESTS_FILE"]).write_text(json.dumps(_tests))
