"""End to end: a provider's refusal and a spent request limit, in the user's words, through the
installed `code-puppy -p` and the fake server (a refused connection: tests/test_timeouts.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli
from tests.fake_llm import FakeLLMServer, call, error, text, tool_calls


def test_a_refused_standard_key_names_its_variable(project: Path) -> None:
    with FakeLLMServer() as fake:
        fake.script(error(401, "Incorrect API key provided"))
        completed = run_cli(
            "-p",
            "hi",
            "-m",
            "openai-chat:gpt-4o",
            env={"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-expired"},
            cwd=project,
        )
        assert len(fake.requests) == 1  # a refused key is not retried
    assert (completed.returncode, completed.stdout) == (1, "")
    assert completed.stderr == (
        "code-puppy: run failed: the provider refused the key in OPENAI_API_KEY (401): check that it is current and "
        f'meant for {fake.base_url}/ (the provider said: "Incorrect API key provided")\n'
    )


def test_a_refused_anthropic_key_names_its_variable(project: Path) -> None:
    with FakeLLMServer() as fake:
        fake.script(error(401, "invalid x-api-key"))
        completed = run_cli(
            "-p",
            "hi",
            "-m",
            "anthropic:claude-sonnet-4-5",
            env={"ANTHROPIC_BASE_URL": fake.anthropic_base_url, "ANTHROPIC_API_KEY": "sk-ant-revoked"},
            cwd=project,
        )
    assert completed.stderr == (
        "code-puppy: run failed: the provider refused the key in ANTHROPIC_API_KEY (401): check that it is current and "
        f'meant for {fake.anthropic_base_url} (the provider said: "invalid x-api-key")\n'
    )


def test_a_refused_endpoint_key_names_its_api_key_env(code_puppy_home: Path, project: Path) -> None:
    with FakeLLMServer() as fake:
        (code_puppy_home / "config.toml").write_text(
            f'[models.work]\nname = "team-model"\nbase_url = "{fake.base_url}"\napi_key_env = "TEAM_LLM_KEY"\n'
        )
        fake.script(error(401, "invalid key"))
        completed = run_cli(
            "-p", "hi", "-m", "work", "--output-format", "json", env={"TEAM_LLM_KEY": "k-123"}, cwd=project
        )
    assert completed.returncode == 1
    assert json.loads(completed.stdout)["error"] == (
        "run failed: the provider refused the key in TEAM_LLM_KEY (401): check that it is current and meant for "
        f'{fake.base_url}/ (the provider said: "invalid key")'
    )
    assert "status_code" not in completed.stderr and "model_name" not in completed.stderr


def test_a_403_says_the_key_may_not_use_the_model(project: Path) -> None:
    with FakeLLMServer() as fake:
        fake.script(error(403, "Project does not have access to model"))
        completed = run_cli(
            "-p",
            "hi",
            "-m",
            "openai-chat:gpt-5.1",
            env={"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-other-project"},
            cwd=project,
        )
    assert completed.returncode == 1
    assert completed.stderr == (
        "code-puppy: run failed: the provider refused access to gpt-5.1 with the key in OPENAI_API_KEY (403): check "
        "that the key's account or project may use this model (the provider said: \"Project does not have access to "
        'model")\n'
    )


def test_an_endpoint_without_api_key_env_that_wants_a_key_says_how_to_give_one(
    code_puppy_home: Path, project: Path
) -> None:
    with FakeLLMServer() as fake:
        (code_puppy_home / "config.toml").write_text(f'[models.lan]\nname = "m"\nbase_url = "{fake.base_url}"\n')
        fake.script(error(401, "missing bearer token"))
        completed = run_cli("-p", "hi", "-m", "lan", cwd=project)
    assert completed.stderr == (
        f"code-puppy: run failed: {fake.base_url}/ refused the request (401): it wants an API key; name the variable "
        'that holds it with api_key_env in the model\'s [models] entry (the provider said: "missing bearer token")\n'
    )


def test_max_requests_reports_itself(server: FakeLLMServer, project: Path) -> None:
    server.script(tool_calls(call("read_file", {"path": "README.md"})), text("never reached"))
    completed = run_cli("-p", "go", "--max-requests", "1", cwd=project)
    assert completed.returncode == 3
    assert completed.stderr.splitlines()[-1] == "code-puppy: stopped after 1 model request (--max-requests 1)"
    assert "request_limit" not in completed.stderr and "https://" not in completed.stderr


def test_debug_adds_the_traceback_to_a_run_failure(server: FakeLLMServer, project: Path) -> None:
    server.script(error(401, "bad key"))
    plain = run_cli("-p", "hi", cwd=project)
    server.script(error(401, "bad key"))
    debug = run_cli("-p", "hi", "--debug", cwd=project)
    assert (plain.returncode, debug.returncode) == (1, 1)
    assert "Traceback" not in plain.stderr
    assert debug.stderr.startswith("Traceback (most recent call last):\n")
    assert "status_code: 401" in debug.stderr  # the cause, kept for a report
    assert debug.stderr.splitlines()[-1] == plain.stderr.splitlines()[-1]


OLLAMA_NOT_FOUND = {"error": "model 'qwen3' not found, try pulling it first"}  # Ollama's /v1 reply for an unknown model


def openai_chat(fake: FakeLLMServer, model: str, *args: str, project: Path) -> tuple[int, str, str]:
    completed = run_cli(
        "-p",
        "hi",
        "-m",
        f"openai-chat:{model}",
        *args,
        env={"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-local"},
        cwd=project,
    )
    return completed.returncode, completed.stdout, completed.stderr


def anthropic(fake: FakeLLMServer, model: str, project: Path) -> tuple[int, str, str]:
    completed = run_cli(
        "-p",
        "hi",
        "-m",
        f"anthropic:{model}",
        env={"ANTHROPIC_BASE_URL": fake.anthropic_base_url, "ANTHROPIC_API_KEY": "sk-ant-local"},
        cwd=project,
    )
    return completed.returncode, completed.stdout, completed.stderr


def test_a_server_error_is_said_in_words_with_the_servers_message(project: Path) -> None:
    stopped = {"error": 500, "message": "model runner has unexpectedly stopped"}  # the SDK keeps only `error`: 500
    with FakeLLMServer() as fake:
        fake.script(*[error(500, body=stopped) for _ in range(3)])
        code, stdout, stderr = openai_chat(fake, "qwen2.5-coder-7b", project=project)
    said = f"the server at {fake.base_url} answered 500: model runner has unexpectedly stopped"
    assert (code, stdout) == (1, "")
    assert stderr.splitlines() == [
        f"code-puppy: {said}; retrying 1/2 in 0.5 s",
        f"code-puppy: {said}; retrying 2/2 in 1 s",
        f"code-puppy: run failed: {said}",
    ]


def test_a_server_error_without_a_message_names_the_status(project: Path) -> None:
    with FakeLLMServer() as fake:
        fake.script(*[error(502, body={}) for _ in range(3)])
        code, _, stderr = openai_chat(fake, "m", project=project)
    assert code == 1
    assert (
        stderr.splitlines()[-1] == f"code-puppy: run failed: the server at {fake.base_url} answered 502 (Bad Gateway)"
    )


def test_an_unknown_ollama_model_says_to_pull_it_in_the_json_error(project: Path) -> None:
    with FakeLLMServer() as fake:
        fake.script(error(404, body=OLLAMA_NOT_FOUND))
        code, stdout, stderr = openai_chat(fake, "qwen3", "--output-format", "json", project=project)
        assert len(fake.requests) == 1  # an unknown model is not retried
    assert code == 1
    assert json.loads(stdout)["error"] == (
        f"run failed: the server at {fake.base_url} does not know the model 'qwen3' (404: model 'qwen3' not found, "
        "try pulling it first); check the model name (for Ollama: ollama pull qwen3), and the base URL if it may be "
        "wrong"
    )
    assert "status_code" not in stderr and "model_name" not in stderr


def test_a_rate_limit_says_to_wait(project: Path) -> None:
    with FakeLLMServer() as fake:
        fake.script(*[error(429, "Rate limit reached for requests") for _ in range(3)])
        code, _, stderr = openai_chat(fake, "gpt-4o", project=project)
    assert code == 1
    assert stderr.splitlines()[-1] == (
        f"code-puppy: run failed: the server at {fake.base_url} rate limited the request (429: Rate limit reached "
        "for requests); wait, or lower the request rate"
    )


def test_a_rejected_request_gives_the_providers_reason(project: Path) -> None:
    with FakeLLMServer() as fake:
        fake.script(error(400, body={"detail": "max_tokens must be at most 4096"}))  # FastAPI-shaped
        code, _, stderr = openai_chat(fake, "m", project=project)
    assert (code, stderr) == (
        1,
        f"code-puppy: run failed: the server at {fake.base_url} rejected the request (400: max_tokens must be at "
        "most 4096)\n",
    )


def test_anthropic_errors_are_said_in_the_same_words(project: Path) -> None:
    with FakeLLMServer() as fake:
        fake.script(error(404, "model: claude-nope"))
        not_found = anthropic(fake, "claude-nope", project)
        fake.script(*[error(500, "Internal server error") for _ in range(3)])
        failed = anthropic(fake, "claude-sonnet-4-5", project)
    assert not_found[2] == (
        f"code-puppy: run failed: the server at {fake.anthropic_base_url} does not know the model 'claude-nope' "
        "(404: model: claude-nope); check the model name, and the base URL if it may be wrong\n"
    )
    assert failed[2].splitlines()[-1] == (
        f"code-puppy: run failed: the server at {fake.anthropic_base_url} answered 500: Internal server error"
    )


def test_debug_adds_the_traceback_to_a_worded_http_error(server: FakeLLMServer, project: Path) -> None:
    server.script(error(400, "bad request"))
    debug = run_cli("-p", "hi", "--debug", cwd=project)
    assert debug.returncode == 1
    assert debug.stderr.startswith("Traceback (most recent call last):\n")
    assert "status_code: 400" in debug.stderr
    assert debug.stderr.splitlines()[-1] == (
        f"code-puppy: run failed: the server at {server.base_url} rejected the request (400: bad request)"
    )
