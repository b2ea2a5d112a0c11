"""Headless with no model set: one line naming the three ways to set one, exit 2, and no choice offered, whatever
the environment holds (a provider key, a local server): a script never gets a model it did not ask for."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, text

NO_MODEL = (
    "code-puppy: error: no model chosen: pass -m MODEL (e.g. -m anthropic:claude-sonnet-5-5), set CODE_PUPPY_MODEL, "
    'or set model = "..." in config.toml (the chat offers the models it finds)\n'
)


def test_headless_with_no_model_is_one_line_and_exit_2(code_puppy_home: Path, project: Path) -> None:
    with FakeLLMServer(text("never asked")) as fake:
        env = {
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "ANTHROPIC_BASE_URL": fake.anthropic_base_url,
            "CODE_PUPPY_LOCAL_PORTS": str(fake.server_port),
        }
        for args in (("-p", "hello"), ("exec", "hello")):
            completed = run_cli(*args, env=env, cwd=project)
            assert (completed.returncode, completed.stdout, completed.stderr) == (2, "", NO_MODEL)
        piped = run_cli(env=env, cwd=project, input="hello\n")
        assert (piped.returncode, piped.stdout, piped.stderr) == (2, "", NO_MODEL)
        assert fake.requests == []
    assert not (code_puppy_home / "config.toml").exists()
