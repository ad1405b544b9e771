"""How each agent CLI is started: the gateway's token as its key (never the worker's), the quiet
switches, and what [harnesses.NAME] tunes reaching its command line."""

from __future__ import annotations

import json

import pytest

from shared.harnesses import HarnessName
from shared.project_config import parse_project_config
from workers.claim import Claim
from workers.runners.cli import base, claude_code, codex, opencode

pytestmark = pytest.mark.unit
TOKEN = "raas-gw-token"


def _claim(raas_toml: str) -> Claim:
    return Claim(
        project_id="p1",
        iteration_id="i1",
        agent_id="a1",
        number=1,
        attempt=2,
        project_name="demo",
        prompt="Build it.",
        task_title="Build it",
        task_description="",
        config=parse_project_config(raas_toml),
        memory_bank="p1",
        category="builder",
    )


def _invocation(harness: HarnessName, raas_toml: str) -> base.Invocation:
    claim = _claim(f'harness = "{harness}"\ncompletion_marker = "DONE!"\n{raas_toml}')
    config = claim.config.harness_config_for(claim.category)
    cli = {c.name: c for c in (claude_code.CLI, codex.CLI, opencode.CLI)}[harness]
    return cli.invocation(claim, config, TOKEN, base.in_container(harness))


def _after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_claude_code_gets_the_token_the_socket_the_switches_and_the_users_table() -> None:
    toml = (
        '[harnesses.claude-code]\nmax_turns = 7\nmodel = "claude-haiku-4-5"\n'
        'allowed_tools = ["Bash", "Write"]\nargs = ["--effort", "low"]\n'
    )
    run = _invocation("claude-code", toml)

    argv = run.argv[run.argv.index("/opt/raas/harness/claude-code") :] if "sh" in run.argv[:1] else run.argv
    assert argv[0] == "/opt/raas/harness/claude-code"
    assert _after(argv, "--max-turns") == "7"
    assert _after(argv, "--model") == "claude-haiku-4-5"
    assert _after(argv, "--allowedTools") == "Bash,Write"
    assert _after(argv, "--output-format") == "stream-json"
    assert argv[argv.index("--effort") + 1] == "low"
    prompt = _after(argv, "-p")
    assert "Build it" in prompt
    assert ".raas/complete" in prompt
    assert "DONE!" in prompt
    assert run.env["ANTHROPIC_API_KEY"] == TOKEN
    assert run.env["ANTHROPIC_UNIX_SOCKET"] == "/run/raas/llm.sock"
    assert run.env["ANTHROPIC_BASE_URL"] == "http://localhost"
    for switch in (
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
        "DISABLE_TELEMETRY",
        "DISABLE_ERROR_REPORTING",
    ):
        assert run.env[switch] == "1"
    assert int(run.env["CLAUDE_CODE_MAX_RETRIES"]) <= 3
    assert run.env["HOME"] == "/home/agent"


def test_codex_is_relayed_with_analytics_updates_and_plugins_off() -> None:
    run = _invocation("codex", '[harnesses.codex]\nmodel = "gpt-5.1"\n')

    assert run.argv[:2] == ["sh", "-c"]
    argv = run.argv[run.argv.index("/opt/raas/harness/codex") :]
    assert argv[1:3] == ["exec", "--json"]
    assert "--skip-git-repo-check" in argv
    assert _after(argv, "--disable") == "plugins"
    assert _after(argv, "--model") == "gpt-5.1"
    config = run.env["RAAS_CODEX_CONFIG"]
    assert 'base_url = "http://127.0.0.1:8765/v1"' in config
    assert 'wire_api = "responses"' in config
    assert 'env_key = "RAAS_MODEL_TOKEN"' in config
    assert "check_for_update_on_startup = false" in config
    assert "[analytics]\nenabled = false" in config
    assert run.env["RAAS_MODEL_TOKEN"] == TOKEN
    assert run.env["CODEX_HOME"].startswith("/home/agent/")


def test_opencode_is_pointed_at_the_relay_with_its_switches() -> None:
    run = _invocation("opencode", "[harnesses.opencode]\nmax_turns = 5\n")

    argv = run.argv[run.argv.index("/opt/raas/harness/opencode") :]
    assert argv[1:4] == ["run", "--format", "json"]
    assert _after(argv, "--title") == "demo iteration 1"  # no title side-request to pay for
    config = json.loads(run.env["OPENCODE_CONFIG_CONTENT"])
    assert config["agent"]["build"]["steps"] == 5
    assert config["provider"]["anthropic"]["options"]["baseURL"] == "http://127.0.0.1:8765/v1"
    assert config["model"] == config["small_model"] == "anthropic/claude-sonnet-4-6"
    assert run.env["ANTHROPIC_API_KEY"] == TOKEN
    for switch in ("AUTOUPDATE", "MODELS_FETCH", "LSP_DOWNLOAD", "SHARE"):
        assert run.env[f"OPENCODE_DISABLE_{switch}"] == "1"
    assert "tools" not in config  # its defaults unless allowed_tools says otherwise
    listed = _invocation("opencode", '[harnesses.opencode]\nallowed_tools = ["read", "bash"]\n')
    tools = json.loads(listed.env["OPENCODE_CONFIG_CONTENT"])["tools"]
    assert list(tools.items())[:3] == [("*", False), ("read", True), ("bash", True)]


def test_a_redelivered_attempt_gets_a_session_of_its_own() -> None:
    first = _claim("")
    second = Claim(**{**first.__dict__, "attempt": 3})
    assert base.session_id(first) != base.session_id(second)
    assert base.session_id(first) == base.session_id(_claim(""))
