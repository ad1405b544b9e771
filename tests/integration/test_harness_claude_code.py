"""Claude Code as a harness (issue #12), run for real in the iteration's container through the
worker's LLM gateway against the scripted model: its events come from its own output, the
gateway's records are the ledger, the real key stays in the worker, and its end is judged
honestly (max turns, a rejected key, a spent budget, a burst of overloads, no binary)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from shared.errors import InvalidInput
from shared.models import IterationStatus, PauseReason, ProjectStatus
from tests.support.engine import Engine, engine
from tests.support.faults import containers_of
from tests.support.records import (
    event_log,
    everything_recorded,
    iterations,
    messages,
    project,
    workspace_git,
)
from tests.support.sandboxes import InspectedSandboxes

pytestmark = [pytest.mark.integration, pytest.mark.docker]
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "harnesses" / "claude-code"
REAL_KEY = "sk-ant-real-key-never-in-a-container-0123456789"
RAAS_TOML = 'harness = "claude-code"\ncompletion_marker = "TASK COMPLETE"\n'
USAGE = {
    "input_tokens": 1000,
    "output_tokens": 50,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}


def _script() -> dict[str, Any]:
    script: dict[str, Any] = json.loads((FIXTURES / "complete_h4.script.json").read_text())
    # The agent shows its environment too, and looks for the real key (by a prefix of it, so the key
    # itself is not in its command) in every file it can reach.
    search = f"grep -rlsF {REAL_KEY[:20]} / --exclude-dir=sys --exclude-dir=proc | wc -l"
    script["responses"][1]["content"][1]["input"]["command"] = (
        f"python3 hello.py; env; echo found: $({search})"
    )
    return script


@pytest.fixture
def inspected(services: dict[str, str]) -> InspectedSandboxes:
    return InspectedSandboxes(services["sandbox_image"])


@pytest.fixture
def claude(services: dict[str, str], tmp_path: Path, inspected: InspectedSandboxes) -> Iterator[Engine]:
    with engine(_script(), tmp_path, anthropic_api_key=SecretStr(REAL_KEY)) as eng:
        eng.sandbox_factory = inspected
        yield eng


def _one(eng: Engine, raas_toml: str = RAAS_TOML) -> str:
    project_id = eng.submit(prompt="Write hello.py and run it.", raas_toml=raas_toml)
    eng.run_next(project_id)
    return project_id


def test_claude_code_writes_runs_and_completes_through_the_gateway(
    claude: Engine, inspected: InspectedSandboxes
) -> None:
    # Given a project whose harness is Claude Code
    # When its first iteration runs
    project_id = _one(claude)

    # Then Claude Code wrote the file with its own tool, ran it in the container, and completed
    (iteration,) = iterations(project_id)
    assert iteration.status is IterationStatus.SUCCEEDED, iteration.error
    assert iteration.completed_task
    assert iteration.files_changed == ["hello.py"]
    assert workspace_git(claude, project_id, "show", "main:hello.py") == 'print("Hello, Constellation!")'
    assert project(project_id).status is ProjectStatus.COMPLETED

    # And its output became the project's own events, in order
    seen = [(e.type, e.data) for e in event_log(project_id)]
    calls = [d for t, d in seen if t == "agent_tool_call"]
    assert [c["tool"] for c in calls] == ["write", "bash"]
    ran = [d for t, d in seen if t == "tool_executed" and d["tool"] == "bash"]
    assert ran[0]["output"].startswith("Hello, Constellation!")
    assert "I will write hello.py, then run it." in [d["text"] for t, d in seen if t == "agent_output_chunk"]

    # And the gateway recorded and priced each of the three calls the script answered, once
    replies = [m for m in messages(project_id) if m.role == "assistant"]
    assert [m.input_tokens for m in replies] == [1200, 1300, 1400]
    assert project(project_id).spent_usd == sum(m.cost_usd for m in replies)
    assert len(claude.requests(project_id)) == 3

    # And the real key is nowhere: not in the container's configuration or environment, the
    # events, the database or the workspace
    (container,) = inspected.inspected
    assert REAL_KEY not in json.dumps(container)
    mounts = {m["Destination"]: m for m in container["Mounts"]}
    assert mounts["/opt/raas/harness/claude-code"]["RW"] is False
    assert mounts["/run/raas"]["RW"] is False
    assert container["Config"]["User"] == "1000:1000"
    assert container["HostConfig"]["NetworkMode"] == "none"
    assert "ANTHROPIC_API_KEY=raas-gw-" in ran[0]["output"]  # the gateway's token, nothing else
    assert "found: 0" in ran[0]["output"]  # in no file the container can read
    assert REAL_KEY not in everything_recorded(claude, project_id)
    history = workspace_git(claude, project_id, "log", "-p", "--all")
    assert REAL_KEY not in history


def test_max_turns_ends_the_iteration_without_completion_and_the_loop_goes_on(claude: Engine) -> None:
    project_id = _one(claude, RAAS_TOML + "[harnesses.claude-code]\nmax_turns = 1\n")

    iteration = iterations(project_id)[0]
    assert iteration.status is IterationStatus.SUCCEEDED, iteration.error
    assert not iteration.completed_task
    assert iteration.files_changed == ["hello.py"]  # what it wrote before the cap is kept
    assert project(project_id).status is ProjectStatus.RUNNING
    assert claude.dispatcher.pending(project_id)


def test_a_rejected_key_pauses_the_project_for_a_key(services: dict[str, str], tmp_path: Path) -> None:
    script = {"responses": [{"error": {"status": 401}, "repeat": 10}]}
    with engine(script, tmp_path, anthropic_api_key=SecretStr(REAL_KEY)) as eng:
        project_id = _one(eng)

        (iteration,) = iterations(project_id)
        assert iteration.status is IterationStatus.FAILED
        assert project(project_id).pause_reason is PauseReason.API_KEY_REQUIRED


def test_a_budget_that_cannot_pay_claude_codes_first_request_is_refused_at_submission(
    services: dict[str, str], tmp_path: Path
) -> None:
    # Claude Code's first request is ~22,300 tokens (its system prompt and tools, ~89 KB): on
    # Haiku a floor-sized call of it costs ~$0.033, so $0.015 could pay no call at all. (A budget
    # spent in the middle of a run is tests/integration/test_budget_harnesses.py's: the refusal
    # is asked once and not retried.)
    with engine(_script(), tmp_path, anthropic_api_key=SecretStr(REAL_KEY)) as eng:
        haiku = 'model = "claude-haiku-4-5"\n[budget]\nlimit_usd = 0.015\n'
        with pytest.raises(InvalidInput, match=r"through claude-code \(22,300 tokens in.*smallest limit"):
            eng.submit(prompt="Write hello.py and run it.", raas_toml=RAAS_TOML + haiku)


# A burst of overloads and a missing binary: for every CLI in test_harness_codex_opencode.py.


def test_a_hung_run_is_killed_at_the_wall_clock_limit_and_what_it_wrote_is_kept(
    services: dict[str, str], tmp_path: Path
) -> None:
    hang = "python3 -c 'import time; time.sleep(600)'"
    script = {
        "responses": [
            {"content": [_write_hello(), {"type": "tool_use", "name": "Bash", "input": {"command": hang}}]},
        ]
    }
    with engine(script, tmp_path, anthropic_api_key=SecretStr(REAL_KEY), harness_timeout_s=4.0) as eng:
        project_id = _one(eng)

        iteration = iterations(project_id)[0]
        assert iteration.status is IterationStatus.FAILED
        assert "4 s limit" in (iteration.error or "")
        assert workspace_git(eng, project_id, "show", "main:hello.py") == 'print("Hello, Constellation!")'
        assert containers_of(project_id) == []


def _write_hello() -> dict[str, Any]:
    return {
        "type": "tool_use",
        "name": "Write",
        "input": {"file_path": "/workspace/hello.py", "content": 'print("Hello, Constellation!")\n'},
    }
