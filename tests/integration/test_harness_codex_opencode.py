"""Codex and OpenCode as harnesses (issue #12), run for real in the iteration's container,
reaching the worker's LLM gateway through the in-container relay, against the scripted model:
each writes a file with its own tool, runs it, and completes; the gateway's records are the
ledger and the real keys stay in the worker."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from shared.errors import InvalidInput
from shared.harnesses import HarnessConfig
from shared.models import IterationStatus, PauseReason, ProjectStatus
from shared.project_config import ProjectConfig
from tests.support.engine import Engine, engine
from tests.support.records import event_log, everything_recorded, iterations, messages, project, workspace_git
from workers.runners.cli.runner import check_host_run
from workers.sandbox.factory import LocalSandboxConfig, factory_for

pytestmark = [pytest.mark.integration, pytest.mark.docker]
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "harnesses"
ANTHROPIC_KEY = "sk-ant-real-anthropic-key-kept-in-the-worker-42"
OPENAI_KEY = "sk-real-openai-key-kept-in-the-worker-42"
DONE = "TASK COMPLETE"
USAGE = {"input_tokens": 1000, "output_tokens": 50}


def _script(harness: str) -> dict[str, Any]:
    script: dict[str, Any] = json.loads((FIXTURES / harness / "write-and-run.script.json").read_text())
    script["responses"][-1]["content"][0]["text"] += f" {DONE}"
    return script


def harness_config(harness: str) -> HarnessConfig:
    return ProjectConfig.model_validate({"harness": harness}).harness_config_for("builder")


def _run(harness: str, raas_toml: str, tmp_path: Path) -> list[Any]:
    """Run the write-and-run script to completion and check it; the model's requests."""
    script = _script(harness)
    with engine(script, tmp_path, anthropic_api_key=SecretStr(ANTHROPIC_KEY)) as eng:
        eng.settings = eng.settings.model_copy(
            update={
                "openai_api_key": SecretStr(OPENAI_KEY),
                "openai_base_url": f"{eng.model.base_url}/v1",
            }
        )
        project_id = eng.submit(
            prompt="Write hello.py and run it.",
            raas_toml=f'harness = "{harness}"\ncompletion_marker = "{DONE}"\n{raas_toml}',
        )
        eng.run_next(project_id)

        iteration = iterations(project_id)[0]
        assert iteration.status is IterationStatus.SUCCEEDED, iteration.error
        assert iteration.completed_task
        assert iteration.files_changed == ["hello.py"]
        assert project(project_id).status is ProjectStatus.COMPLETED
        assert workspace_git(eng, project_id, "show", "main:hello.py") == f"print('hello from {harness}')"

        ran = [e.data for e in event_log(project_id, "tool_executed") if e.data["tool"] == "bash"]
        assert ran[0]["output"].startswith(f"hello from {harness}")
        replies = [m for m in messages(project_id) if m.role == "assistant"]
        assert len(replies) == 3
        assert {m.model for m in replies} == {harness_config(harness).model}
        assert project(project_id).spent_usd == sum(m.cost_usd for m in replies)
        recorded = everything_recorded(eng, project_id) + workspace_git(eng, project_id, "log", "-p", "--all")
        assert ANTHROPIC_KEY not in recorded
        assert OPENAI_KEY not in recorded
        return eng.requests(project_id)


def test_codex_writes_runs_and_completes_through_the_relay_and_gateway(
    services: dict[str, str], tmp_path: Path
) -> None:
    # With no model set: Codex's default (gpt-5.5, which it knows and then offers apply_patch),
    # priced by the built-in table.
    assert _run("codex", "", tmp_path)


def test_opencode_writes_runs_and_completes_through_the_relay_and_gateway(
    services: dict[str, str], tmp_path: Path
) -> None:
    # Given its title (--title), it makes no title side-request: only the script's three calls.
    # Allowed to write and run commands only: it is offered those of its own tools and our MCP
    # ones, nothing else (one OpenCode run for both: it takes ~7 s).
    requests = _run("opencode", '[harnesses.opencode]\nallowed_tools = ["write", "bash"]\n', tmp_path)
    offered = sorted(tool["name"] for tool in requests[0].body["tools"])
    # (write is OpenCode's edit permission: allowing it allows edit)
    assert [name for name in offered if not name.startswith("raas_")] == ["bash", "edit", "write"]
    assert "raas_memory_write" in offered  # our coordination tools stay


def test_without_docker_a_harness_runs_on_the_host_only_when_the_user_allows_it(
    services: dict[str, str], tmp_path: Path
) -> None:
    # Given the local sandbox (no Docker) and a Codex project
    raas_toml = f'harness = "codex"\ncompletion_marker = "{DONE}"\n'
    with engine(_script("codex"), tmp_path, anthropic_api_key=SecretStr(ANTHROPIC_KEY)) as eng:
        eng.sandbox_factory = factory_for(LocalSandboxConfig())
        eng.settings = eng.settings.model_copy(
            update={"openai_api_key": SecretStr(OPENAI_KEY), "openai_base_url": f"{eng.model.base_url}/v1"}
        )
        # When the user has not allowed it, the iteration is refused in one line and nothing runs
        refused = eng.submit(prompt="Write hello.py and run it.", raas_toml=raas_toml)
        eng.run_next(refused)
        iteration = iterations(refused)[0]
        assert iteration.status is IterationStatus.FAILED
        assert "RAAS_HARNESS_ON_HOST=1" in (iteration.error or "")
        assert eng.requests(refused) == []

        # When they have, Codex runs on the host against the gateway and completes
        eng.settings = eng.settings.model_copy(update={"harness_on_host": True})
        allowed = eng.submit(prompt="Write hello.py and run it.", raas_toml=raas_toml)
        eng.run_next(allowed)
        iteration = iterations(allowed)[0]
        assert iteration.completed_task, iteration.error
        assert workspace_git(eng, allowed, "show", "main:hello.py") == "print('hello from codex')"


def test_an_embedded_run_says_so_or_refuses_before_starting() -> None:
    assert check_host_run({"api"}, local=True, allowed=False) is None
    assert check_host_run({"api", "codex"}, local=False, allowed=False) is None
    warning = check_host_run({"api", "codex"}, local=True, allowed=True)
    assert warning is not None
    assert "privileges" in warning
    with pytest.raises(InvalidInput, match="RAAS_HARNESS_ON_HOST=1"):
        check_host_run({"claude-code"}, local=True, allowed=False)


@pytest.mark.parametrize(("harness", "tokens"), [("codex", "42,000"), ("opencode", "8,600")])
def test_a_budget_that_cannot_pay_the_clis_first_request_is_refused_at_submission(
    services: dict[str, str], tmp_path: Path, harness: str, tokens: str
) -> None:
    # Each CLI's first request is tens of KB of instructions and tools (Codex's bounded by its
    # size, OpenCode's by the model's count): a budget below a floor-sized call of it could pay
    # no call at all. (A budget spent in the middle of a run: test_budget_harnesses.py.)
    with _engine(_script(harness), tmp_path) as eng:
        raas_toml = f'harness = "{harness}"\n[budget]\nlimit_usd = 0.016\n'
        with pytest.raises(InvalidInput, match=rf"through {harness} \({tokens} tokens in.*smallest limit"):
            eng.submit(prompt="Write hello.py and run it.", raas_toml=raas_toml)


@pytest.mark.parametrize("harness", ["codex", "opencode"])
def test_a_rejected_key_pauses_codex_and_opencode_projects_for_a_key(
    services: dict[str, str], tmp_path: Path, harness: str
) -> None:
    script = {"responses": [{"error": {"status": 401}, "repeat": 20}]}
    with _engine(script, tmp_path, harness_timeout_s=60.0) as eng:
        _with_openai(eng)
        project_id = eng.submit(prompt="Write hello.py.", raas_toml=f'harness = "{harness}"\n')
        eng.run_next(project_id)

        iteration = iterations(project_id)[0]
        assert iteration.status is IterationStatus.FAILED
        assert project(project_id).pause_reason is PauseReason.API_KEY_REQUIRED, iteration.error
        assert ANTHROPIC_KEY not in (iteration.error or "")
        assert OPENAI_KEY not in (iteration.error or "")


# Each CLI's own settings: Codex on an OpenAI model (priced here); Claude Code told to allow more
# turns than the cap, so the gateway's cap, not its own --max-turns, is what ends it.
_CLI_TOML = {
    "claude-code": '[harnesses.claude-code]\nargs = ["--max-turns", "5"]\n',
    "codex": "",  # its default model
    "opencode": "",
}
ALL_CLIS = ["claude-code", "codex", "opencode"]


def _toml(harness: str, extra: str = "") -> str:
    table = _CLI_TOML[harness]
    if extra:  # keys of [harnesses.NAME], added to its table
        table = table or f"[harnesses.{harness}]\n"
        table = table.replace(f"[harnesses.{harness}]\n", f"[harnesses.{harness}]\n{extra}")
    return f'harness = "{harness}"\ncompletion_marker = "{DONE}"\n{table}'


def _engine(script: dict[str, Any], tmp_path: Path, **settings: Any) -> Any:
    return engine(script, tmp_path, anthropic_api_key=SecretStr(ANTHROPIC_KEY), **settings)


def _with_openai(eng: Engine) -> None:
    eng.settings = eng.settings.model_copy(
        update={"openai_api_key": SecretStr(OPENAI_KEY), "openai_base_url": f"{eng.model.base_url}/v1"}
    )


@pytest.mark.parametrize("harness", ALL_CLIS)
def test_the_gateways_turn_cap_ends_every_cli_without_completion_and_the_loop_goes_on(
    services: dict[str, str], tmp_path: Path, harness: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a one-turn cap and a script that writes hello.py in its first answer
    caplog.set_level(logging.INFO, logger="workers.gateway.gate")
    with _engine(_script(harness), tmp_path) as eng:
        _with_openai(eng)
        project_id = eng.submit(
            prompt="Write hello.py and run it.", raas_toml=_toml(harness, "max_turns = 1\n")
        )
        # When its first iteration runs
        eng.run_next(project_id)

        # Then the call after the cap is refused once (no CLI retries it) and never sent upstream
        refusals = [r for r in caplog.records if "turn cap" in r.getMessage()]
        assert len(refusals) == 1, [r.getMessage() for r in caplog.records]
        assert len([m for m in messages(project_id) if m.role == "assistant"]) == 1
        # And the iteration ends without completion, keeping what it wrote, and the loop goes on
        iteration = iterations(project_id)[0]
        assert iteration.status is IterationStatus.SUCCEEDED, iteration.error
        assert not iteration.completed_task
        assert iteration.files_changed == ["hello.py"]
        assert project(project_id).status is ProjectStatus.RUNNING
        assert eng.dispatcher.pending(project_id)


@pytest.mark.parametrize("harness", ALL_CLIS)
def test_a_burst_of_overloads_is_retried_by_every_cli_and_the_call_charged_once(
    services: dict[str, str], tmp_path: Path, harness: str
) -> None:
    script = {
        "responses": [
            # retry-after 0.1 s: the CLIs' own backoff (OpenCode's starts at 2 s) is not under test
            {"error": {"status": 529, "retry_after_s": 0.1}, "repeat": 2},
            {"content": [{"type": "text", "text": f"Done. {DONE}"}], "usage": USAGE},
        ]
    }
    with _engine(script, tmp_path) as eng:
        _with_openai(eng)
        project_id = eng.submit(prompt="Say done.", raas_toml=_toml(harness))
        eng.run_next(project_id)

        iteration = iterations(project_id)[0]
        assert iteration.completed_task, iteration.error
        assert len(eng.requests(project_id)) == 3  # two overloaded, one answered
        replies = [m for m in messages(project_id) if m.role == "assistant"]
        assert [m.input_tokens for m in replies] == [USAGE["input_tokens"]]
        assert project(project_id).spent_usd == replies[0].cost_usd


@pytest.mark.parametrize("harness", ALL_CLIS)
def test_a_missing_binary_fails_the_iteration_in_one_line_naming_the_setup_command(
    services: dict[str, str], tmp_path: Path, harness: str
) -> None:
    with _engine(_script(harness), tmp_path, harness_cache=tmp_path / "empty-cache") as eng:
        _with_openai(eng)
        project_id = eng.submit(prompt="Write hello.py.", raas_toml=_toml(harness))
        eng.run_next(project_id)

        iteration = iterations(project_id)[0]
        assert iteration.status is IterationStatus.FAILED
        assert f"harness {harness}" in (iteration.error or "")
        assert "scripts/setup.sh" in (iteration.error or "")
        assert "\n" not in (iteration.error or "")
        assert eng.requests(project_id) == []
