"""Issue 15 in the chat, in a real pseudo-terminal: file commands with `$ARGUMENTS` in `/help`, completion and turns;
`/agent` listing and switching; `/skills`; `/init`."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_llm import FakeLLMServer, call, text, tool_calls
from tests.pty_chat import PtyChat
from tests.test_file_definitions import FIXTURE, PLAN, READ_TOOLS_AND_GIT, system, tools, user


@pytest.fixture
def chat(server: FakeLLMServer, tmp_path: Path) -> Iterator[PtyChat]:
    root = tmp_path / "claude_project"
    shutil.copytree(FIXTURE, root)
    terminal = PtyChat(root)
    terminal.wait_for("session ")
    yield terminal
    terminal.close()


def squeezed(screen: str) -> str:
    return "".join(screen.split())


def test_a_file_command_runs_with_its_arguments(server: FakeLLMServer, chat: PtyChat) -> None:
    server.script(text("Hello there, world."))
    chat.type("/greet world\r")
    chat.wait_turn("Hello there, world.")
    assert user(server.requests[0].body) == ["Say hello to world"]


def test_file_commands_are_in_help_and_completion(chat: PtyChat) -> None:
    chat.type("/help\r")
    screen = chat.wait_for("/frontend:review")
    assert "/frontend:review COMPONENT [FOCUS] Review one frontend component (project)" in screen
    assert "/greet        Say hello to $ARGUMENTS (project)" in screen
    chat.type("/fro")
    item = "/frontend:review  COMPONENT [FOCUS] Review one frontend component (project)"
    chat.wait_for(lambda screen: "› /fro" in screen and item in screen.split("› /fro")[-1])


def test_a_commands_allowed_tools_hold_for_its_turn_only(server: FakeLLMServer, chat: PtyChat) -> None:
    server.script(text("Reviewed the button."), text("Plain answer."))
    chat.type("/frontend:review Button\r")
    chat.wait_turn("Reviewed the button.")
    chat.type("and now?\r")
    chat.wait_turn("Plain answer.")
    assert tools(server.requests[0].body) == ["load_capability", "read_file", "grep"]
    assert "write_file" in tools(server.requests[1].body)


def test_agent_lists_and_switches(server: FakeLLMServer, chat: PtyChat) -> None:
    chat.type("/agent\r")
    screen = chat.wait_for("/agent NAME puts one in charge")
    assert "* default  code-puppy itself" in screen
    assert "reviewer  Expert code reviewer." in screen and "tester  Runs the tests and reports failures" in screen
    server.script(text("Reviewed as the reviewer."))
    chat.type("/agent reviewer\r")
    chat.wait_for("agent reviewer is in charge from the next turn")
    chat.type("look at it\r")
    chat.wait_turn("Reviewed as the reviewer.")
    body: dict[str, Any] = server.requests[0].body
    assert tools(body) == ["load_capability", *READ_TOOLS_AND_GIT]
    assert "senior code reviewer" in system(body)
    chat.type("/agent nobody\r")
    chat.wait_for("unknown agent 'nobody' (agents: lost, reviewer, tester;")  # lost runs on the session's model


def test_skills_lists_what_the_model_can_load(chat: PtyChat) -> None:
    chat.wait_for("broken-skill/SKILL.md")  # the start-up note about the broken one, printed as the chat loads
    chat.type("/skills\r")
    screen = chat.wait_for("(the model loads one when it needs it)")
    listing = screen[screen.rindex("› /skills") :]
    assert "release  Cut a release of this project." in listing
    assert "broken-skill" not in listing


def test_init_asks_for_an_agents_md(server: FakeLLMServer, chat: PtyChat) -> None:
    server.script(text("Wrote AGENTS.md."))
    chat.type("/init\r")
    chat.wait_turn("Wrote AGENTS.md.")
    assert user(server.requests[0].body)[0].startswith("Write a starting AGENTS.md at the root of this project")


def test_the_plan_shows_live_and_stays_after_the_turn(server: FakeLLMServer, chat: PtyChat) -> None:
    server.script(
        tool_calls(call("write_plan", {"items": PLAN})),
        tool_calls(call("update_task_statuses", {"updates": [{"task_id": "read", "status": "completed"}]})),
        text("All done.", delay=1.5),
    )
    chat.type("fix it\r")
    live = chat.wait_for(lambda screen: "☑ Read the code" in screen and "steer›" in screen)
    assert "◐ Fixing the bug" in live and "(1/2 done)" in live
    screen = chat.wait_turn("All done.")
    assert "☑ Read the code\n  ◐ Fixing the bug\n  (1/2 done)" in screen  # kept once the turn is over
