"""A hung or failing provider never hangs a run silently (issue 10.3): timeouts, retries said aloud, exit codes."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, error, hang, text


def configure(home: Path, server: FakeLLMServer, run: str) -> None:
    config = home / "config.toml"
    config.write_text(config.read_text() + f"[run]\n{run}\n")


def test_a_request_that_never_starts_is_retried_after_the_first_event_timeout(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server, "first_event_timeout = 1")
    server.script(hang(), text("second attempt answered"))
    completed = run_cli("-p", "hi", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "second attempt answered\n"), completed.stderr
    assert completed.stderr == (
        "code-puppy: the model sent nothing for 1 s ([run] first_event_timeout); retrying 1/2 in 0.5 s\n"
    )
    assert len(server.requests) == 2


def test_a_provider_that_never_answers_fails_the_run_after_the_retries(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server, "first_event_timeout = 0.5")
    server.script(hang(), hang(), hang(), text("never"))
    completed = run_cli("-p", "hi", "--output-format", "json", cwd=project)
    assert completed.returncode == 1
    result = json.loads(completed.stdout)
    assert (result["status"], result["output"]) == ("error", None)
    assert result["error"] == "run failed: the model sent nothing for 0.5 s ([run] first_event_timeout)"
    assert [line.split(";")[1] for line in completed.stderr.splitlines()] == [
        " retrying 1/2 in 0.5 s",
        " retrying 2/2 in 1 s",
    ]
    assert len(server.requests) == 3


def test_a_stream_that_goes_silent_fails_after_the_idle_timeout(
    server: FakeLLMServer, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server, "idle_timeout = 1")
    server.script(text("one two three four", chunk_delay=3))
    completed = run_cli("-p", "hi", cwd=project, timeout=30)
    assert completed.returncode == 1
    assert completed.stderr.splitlines()[-1] == (
        "code-puppy: run failed: the model stopped streaming for 1 s ([run] idle_timeout)"
    )
    shown = run_cli("sessions", "show", json_session(project), cwd=project).stdout
    assert "› hi" in shown  # the checkpoint kept the turn


def json_session(project: Path) -> str:
    listed = run_cli("sessions", "list", cwd=project).stdout.splitlines()
    return listed[1].split()[0]


@pytest.mark.parametrize("where", ["flag", "config"])
def test_the_whole_run_timeout_stops_with_exit_3(
    server: FakeLLMServer, project: Path, code_puppy_home: Path, where: str
) -> None:
    server.script(text("too late", delay=10))
    if where == "config":
        configure(code_puppy_home, server, "timeout = 1")
    flags = ("--timeout", "1") if where == "flag" else ()
    completed = run_cli("-p", "hi", *flags, "--output-format", "json", cwd=project, timeout=30)
    assert completed.returncode == 3, completed.stderr
    result = json.loads(completed.stdout)
    assert (result["status"], result["error"]) == ("limit", "stopped by a limit: timeout (1 s)")
    assert result["duration_ms"] < 5000


def test_server_errors_are_retried_with_a_line_each(server: FakeLLMServer, project: Path) -> None:
    server.script(error(503, "busy"), error(500, "oops"), text("third time"))
    completed = run_cli("-p", "hi", cwd=project)
    assert (completed.returncode, completed.stdout) == (0, "third time\n"), completed.stderr
    lines = completed.stderr.splitlines()
    assert len(lines) == 2 and "503" in lines[0] and lines[0].endswith("; retrying 1/2 in 0.5 s")
    assert "500" in lines[1] and lines[1].endswith("; retrying 2/2 in 1 s")


def test_an_unreachable_provider_is_named_with_its_base_url(code_puppy_home: Path, project: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    (code_puppy_home / "config.toml").write_text(f'[models.gone]\nname = "m"\nbase_url = "{url}"\n')
    completed = run_cli("-p", "hi", "-m", "gone", cwd=project)
    assert completed.returncode == 1
    # The socket's reason, not the SDK's "Connection error": a refused port means nothing listens there.
    assert completed.stderr.splitlines() == [
        f"code-puppy: cannot reach {url}/: connection refused; retrying 1/2 in 0.5 s",
        f"code-puppy: cannot reach {url}/: connection refused; retrying 2/2 in 1 s",
        f"code-puppy: run failed: cannot reach {url}/: connection refused",
    ]


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf", "1e400"])
@pytest.mark.parametrize("flag", ["--timeout", "--max-budget-usd"])
def test_a_limit_that_is_not_a_positive_number_is_one_line_exit_2(
    server: FakeLLMServer, project: Path, flag: str, value: str
) -> None:
    completed = run_cli("-p", "hi", flag, value, cwd=project)
    # nan, inf and 1e400 (inf once parsed) would each be no limit at all.
    assert (completed.returncode, completed.stdout, completed.stderr) == (
        2,
        "",
        f"code-puppy: error: {flag}: expected a positive number, got {value!r}\n",
    )
    assert server.requests == []


def test_timeout_needs_a_headless_run(server: FakeLLMServer, project: Path) -> None:
    completed = run_cli("--timeout", "5", cwd=project)
    assert (completed.returncode, completed.stderr) == (
        2,
        "code-puppy: error: --timeout bounds a headless run: use it with -p PROMPT\n",
    )


def test_a_bad_run_table_names_the_key(server: FakeLLMServer, project: Path, code_puppy_home: Path) -> None:
    configure(code_puppy_home, server, "idle_timeout = -1")
    completed = run_cli("-p", "hi", cwd=project)
    assert completed.returncode == 2
    assert "'run.idle_timeout'" in completed.stderr and completed.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("lines", "key", "shown"),
    [
        ("[run]\ntimeout = inf", "run.timeout", "inf"),
        ("[run]\nidle_timeout = inf", "run.idle_timeout", "inf"),
        ("[run]\nfirst_event_timeout = 1e400", "run.first_event_timeout", "inf"),
        ("[budget]\nper_day_usd = inf", "budget.per_day_usd", "inf"),
        ("[budget]\nper_turn_usd = nan", "budget.per_turn_usd", "nan"),
        # Into the server's [models.fake], the config's last table: a price of nan would keep every budget unspent.
        ("input_price = nan\noutput_price = 1", "models.fake.input_price", "nan"),
    ],
)
def test_a_limit_in_the_config_that_is_not_finite_is_one_line_exit_2(
    server: FakeLLMServer, project: Path, code_puppy_home: Path, lines: str, key: str, shown: str
) -> None:
    config = code_puppy_home / "config.toml"
    config.write_text(f"{config.read_text()}{lines}\n")
    completed = run_cli("-p", "hi", cwd=project)
    assert (completed.returncode, completed.stdout, completed.stderr) == (
        2,
        "",
        f"code-puppy: error: {config}: '{key}': input should be a finite number, got {shown}\n",
    )
    assert server.requests == []


SLOW_PLUGINS = {
    # Start-up work a plugin awaits (a connection, say): the timeout interrupts it.
    "startup": "import asyncio\nimport code_puppy\n\n@code_puppy.hookimpl\nasync def startup():\n"
    "    await asyncio.sleep(30)\n",
    # Work done as it is imported, which nothing can interrupt: the run stops as soon as it is over.
    "import": "import time\n\ntime.sleep(4)\n",
}


@pytest.mark.parametrize("slow", SLOW_PLUGINS)
def test_the_timeout_counts_from_the_process_start_through_a_slow_plugin(
    server: FakeLLMServer, project: Path, code_puppy_home: Path, slow: str
) -> None:
    (code_puppy_home / "plugins").mkdir()
    (code_puppy_home / "plugins" / "slow.py").write_text(SLOW_PLUGINS[slow])
    server.script(text("too late"))
    began = time.monotonic()
    completed = run_cli("-p", "hi", "--timeout", "2", "--output-format", "json", cwd=project, timeout=90)
    took = time.monotonic() - began
    assert completed.returncode == 3, completed.stderr
    result = json.loads(completed.stdout)
    assert (result["status"], result["error"], result["output"]) == ("limit", "stopped by a limit: timeout (2 s)", None)
    assert server.requests == []  # stopped while starting: nothing was sent
    assert took < 20  # not the plugin's 30 s: a bound for a loaded machine, not a speed check
