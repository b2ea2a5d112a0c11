"""History processors end to end: the installed `code-puppy` against the fake server, processors on PYTHONPATH."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, TextPart, UserPromptPart

from code_puppy.sessions.session import Session
from code_puppy.sessions.store import SqliteConversationStore
from tests.conftest import CODE_PUPPY, run_cli, stored_info
from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.history.history_cases import C, R, T, U

PROCESSORS = """
import os
import pathlib
import sys
import time

from code_puppy.history import HistoryProcessorContext


def keep_last_cycle(ctx: HistoryProcessorContext):
    return ctx.keep_recent_groups(1)


def keep_five_cycles(ctx: HistoryProcessorContext):
    return ctx.keep_recent_groups(5)


def boom(messages):
    raise RuntimeError("processor exploded")


def tail(messages):
    return messages[-1:]


def two(ctx, messages):
    return messages


NOT_CALLABLE = 3


def slow(messages):
    pathlib.Path(os.environ["SLOW_MARK"]).write_text("started")
    time.sleep(30)
    return messages[-1:]


def always(state) -> bool:
    return True


def exits(messages):
    sys.exit(3)


async def exits_async(messages):
    sys.exit(3)


def interrupted(messages):
    raise KeyboardInterrupt


def exits_deciding(state) -> bool:
    sys.exit(3)
"""


@pytest.fixture
def server(code_puppy_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "hist_procs.py").write_text(PROCESSORS)
    monkeypatch.setenv("PYTHONPATH", str(modules))
    with FakeLLMServer() as fake:
        yield fake


def configure(home: Path, server: Any, history: str = "") -> None:
    base = f'model = "fake"\n[models.fake]\nname = "fake-model"\nbase_url = "{server.base_url}"\n'
    (home / "config.toml").write_text(base + (f"[history]\n{history}\n" if history else ""))


def headless(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    completed = run_cli(*args, "--output-format", "json", cwd=cwd, env=env)
    return completed.returncode, json.loads(completed.stdout), completed.stderr


def conversation(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] in ("user", "assistant", "tool")]


def seed(home: Path, project: Path, messages: list[ModelMessage]) -> str:
    """A stored session of `project` holding `messages`, as an earlier run would have left it; its id."""

    async def write() -> str:
        with SqliteConversationStore(home / "sessions.db") as store:
            session = await Session.start(store, project, model="fake")
            await session.set_message_history(messages)
            return session.id

    return asyncio.run(write())


def load(home: Path, session_id: str) -> list[ModelMessage]:
    async def read() -> list[ModelMessage]:
        with SqliteConversationStore(home / "sessions.db") as store:
            conversation = await store.load(session_id)
            assert conversation is not None
            return conversation.messages

    return asyncio.run(read())


def stored(home: Path, session_id: str) -> tuple[list[str], list[list[str]], int]:
    """The session's history as texts, the histories of its old branches, and its cache epoch."""

    def render(messages: list[Any]) -> list[str]:
        return [
            str(part.content)
            for message in messages
            for part in message.parts
            if isinstance(part, UserPromptPart | TextPart)
        ]

    async def read() -> tuple[list[str], list[list[str]], int]:
        with SqliteConversationStore(home / "sessions.db") as store:
            record = await store.read_record(session_id)
            assert record is not None
            current = await store.read_history(record.head_id)
            branches = [await store.read_history(tip) for tip in record.branches]
            info = stored_info(store, session_id)
            assert info is not None
            return (
                render([e.message for e in current]),
                [render([e.message for e in b]) for b in branches],
                info.cache_epoch,
            )

    return asyncio.run(read())


@pytest.mark.parametrize(
    ("history", "error"),
    [
        (
            'processors = ["no_such_module_x:fn"]',
            "[history] processors: cannot import 'no_such_module_x:fn': ModuleNotFoundError: "
            "No module named 'no_such_module_x'",
        ),
        (
            'processors = ["hist_procs:NOT_CALLABLE"]',
            "[history] processors: 'hist_procs:NOT_CALLABLE' is not callable (an object of type int)",
        ),
        (
            'processors = ["hist_procs:two"]',
            "history processor 'hist_procs:two' takes two arguments but its first, 'ctx', is unannotated: "
            "annotate it as RunContext, or take one argument (the messages or a HistoryProcessorContext)",
        ),
        (
            'processor_condition = "hist_procs:always"',
            "[history] processor_condition 'hist_procs:always' is set without processors: "
            "a condition only decides whether [history] processors run",
        ),
    ],
)
def test_start_up_errors_exit_2_and_send_nothing(
    history: str, error: str, server: Any, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server, history)
    completed = run_cli("-p", "hello", cwd=project)
    assert (completed.returncode, completed.stdout, completed.stderr) == (2, "", f"code-puppy: error: {error}\n")
    assert server.requests == []


def test_a_trimming_processor_persists_and_resume_uses_the_trimmed_history(
    server: Any, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server, 'processors = ["hist_procs:keep_last_cycle"]')
    server.script(text("a1"), text("a2"), text("a3"), text("a4"))
    code, first, _ = headless("-p", "q1", cwd=project)
    assert code == 0
    assert headless("-c", "-p", "q2", cwd=project)[0] == 0
    assert headless("-c", "-p", "q3", cwd=project)[0] == 0
    assert [conversation(r.body) for r in server.requests] == [
        ["q1"],
        ["q1", "a1", "q2"],
        ["q2", "a2", "q3"],  # the first cycle trimmed before anything was sent
    ]
    configure(code_puppy_home, server)  # no processors now: what is stored is what is used
    assert headless("-c", "-p", "q4", cwd=project)[0] == 0
    assert conversation(server.requests[3].body) == ["q2", "a2", "q3", "a3", "q4"]
    history, branches, epoch = stored(code_puppy_home, first["session_id"])
    assert history == ["q2", "a2", "q3", "a3", "q4", "a4"]
    assert branches == [["q1", "a1", "q2", "a2"]]  # the pre-edit history stays in the store
    assert epoch == 1


def test_keep_recent_groups_above_the_number_of_cycles_keeps_them_all(
    server: Any, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server)
    server.script(text("a1"), text("a2"), text("a3"), text("a4"), text("a5"))
    assert headless("-p", "q1", cwd=project)[0] == 0
    for prompt in ("q2", "q3", "q4"):
        assert headless("-c", "-p", prompt, cwd=project)[0] == 0
    configure(code_puppy_home, server, 'processors = ["hist_procs:keep_five_cycles"]')
    assert headless("-c", "-p", "q5", cwd=project)[0] == 0
    assert conversation(server.requests[4].body) == ["q1", "a1", "q2", "a2", "q3", "a3", "q4", "a4", "q5"]


def test_a_crashing_processor_exits_1_and_keeps_the_stored_history(
    server: Any, project: Path, code_puppy_home: Path
) -> None:
    session_id = seed(code_puppy_home, project, [U("q1"), T("a1")])
    configure(code_puppy_home, server, 'processors = ["hist_procs:boom"]')
    completed = run_cli("-c", "-p", "q2", cwd=project)
    assert (completed.returncode, completed.stdout) == (1, "")
    assert completed.stderr == (
        "code-puppy: run failed: HistoryProcessingError hist_procs:boom raised RuntimeError: processor exploded\n"
    )
    assert server.requests == []
    assert stored(code_puppy_home, session_id) == (["q1", "a1", "q2"], [], 0)  # the prompt is kept, no branch


@pytest.mark.parametrize(
    ("history", "error"),
    [
        ('processors = ["hist_procs:exits"]', "hist_procs:exits raised SystemExit: 3"),
        ('processors = ["hist_procs:exits_async"]', "hist_procs:exits_async raised SystemExit: 3"),
        ('processors = ["hist_procs:interrupted"]', "hist_procs:interrupted raised KeyboardInterrupt"),
        (
            'processors = ["hist_procs:tail"]\nprocessor_condition = "hist_procs:exits_deciding"',
            "history processor condition hist_procs:exits_deciding raised SystemExit: 3",
        ),
    ],
)
def test_a_processor_that_exits_or_interrupts_is_that_processors_failure(
    history: str, error: str, server: Any, project: Path, code_puppy_home: Path
) -> None:
    # Not the limit's exit 3, nor Ctrl-C's 130: the processor failed, as if it had raised anything else.
    session_id = seed(code_puppy_home, project, [U("q1"), T("a1")])
    configure(code_puppy_home, server, history)
    completed = run_cli("-c", "-p", "q2", cwd=project)
    assert (completed.returncode, completed.stdout, completed.stderr) == (
        1,
        "",
        f"code-puppy: run failed: HistoryProcessingError {error}\n",
    )
    assert server.requests == []
    assert stored(code_puppy_home, session_id) == (["q1", "a1", "q2"], [], 0)


def test_an_invalid_edit_exits_1_naming_the_rule_and_keeps_the_finished_work(
    server: Any, project: Path, code_puppy_home: Path
) -> None:
    configure(code_puppy_home, server, 'processors = ["hist_procs:tail"]')
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("never"))
    code, result, stderr = headless("-p", "read it", cwd=project)
    assert (code, result["status"], result["output"]) == (1, "error", None)
    assert (stderr, result["error"]) == (
        "",
        "run failed: HistoryProcessingValidationError [V8] hist_procs:tail returned an invalid history: message 0 "
        "holds the result of tool call 'call_0_0' (read_file) without the call; keep or drop whole groups "
        "(ctx.groups)",
    )
    assert len(server.requests) == 1
    assert [
        (type(m).__name__, [p.part_kind for p in m.parts]) for m in load(code_puppy_home, result["session_id"])
    ] == [
        ("ModelRequest", ["user-prompt"]),
        ("ModelResponse", ["tool-call"]),
        ("ModelRequest", ["tool-return"]),
    ]


def test_project_processors_need_trust(server: Any, project: Path, code_puppy_home: Path) -> None:
    configure(code_puppy_home, server)
    (project / ".code-puppy").mkdir()
    project_config = project / ".code-puppy" / "config.toml"
    project_config.write_text('[history]\nprocessors = ["hist_procs:boom"]\ncompaction = "off"\n')
    server.script(text("fine"))
    untrusted = run_cli("-p", "q1", cwd=project)
    assert (untrusted.returncode, untrusted.stdout) == (0, "fine\n")
    assert untrusted.stderr == (
        "code-puppy: note: this project is not trusted, so code-puppy ignores its [history] processors "
        "(run `code-puppy trust` in the project to trust it)\n"
    )
    assert run_cli("trust", cwd=project).returncode == 0
    trusted = run_cli("-p", "q2", cwd=project)
    assert (trusted.returncode, trusted.stderr.splitlines()[-1]) == (
        1,
        "code-puppy: run failed: HistoryProcessingError hist_procs:boom raised RuntimeError: processor exploded",
    )


def test_sessions_show_groups(server: Any, project: Path, code_puppy_home: Path) -> None:
    session_id = seed(
        code_puppy_home, project, [U("what is it?"), C("c1"), R("c1"), T("a demo"), U("thanks"), T("bye")]
    )
    with SqliteConversationStore(code_puppy_home / "sessions.db") as store:
        store.sessions.update(session_id, cache_epoch=2, history_version=9)
    shown = run_cli("sessions", "show", session_id[:8], "--groups", cwd=project)
    lines = shown.stdout.splitlines()
    assert shown.returncode == 0 and lines[0].endswith("· fake · 6 messages")
    tokens = [int(line.split("~")[1].split()[0]) for line in lines[2:] if "~" in line]
    assert lines[1:] == [
        "0 requests · 0 input / 0 output tokens · $0.0000",  # made by code-puppy, never sent: nothing spent
        "cache epoch 2 · history version 9",
        f"2 groups · ~{tokens[0]} tokens (estimated_tokens)",
        f"group 0 · messages 0-3 · closed · ~{tokens[1]} tokens · tools: read_file",
        "  › what is it?",
        f"group 1 · messages 4-5 · closed · ~{tokens[2]} tokens",
        "  › thanks",
    ]
    assert tokens[0] == tokens[1] + tokens[2] and tokens[1] > tokens[2] > 0


def test_sigint_during_a_processor_commits_nothing(server: Any, project: Path, code_puppy_home: Path) -> None:
    session_id = seed(code_puppy_home, project, [U("q1"), T("a1")])
    configure(code_puppy_home, server, 'processors = ["hist_procs:slow"]')
    mark = project / "slow-started"
    process = subprocess.Popen(
        [str(CODE_PUPPY), "-c", "-p", "q2", "--output-format", "json"],
        cwd=project,
        env={**os.environ, "SLOW_MARK": str(mark)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 20
    while not mark.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=20)
    assert time.monotonic() - started < 10  # the 30 s processor thread does not hold the exit
    assert (process.returncode, json.loads(stdout)["status"]) == (130, "interrupted"), stderr
    assert server.requests == []
    assert stored(code_puppy_home, session_id) == (["q1", "a1", "q2"], [], 0)
