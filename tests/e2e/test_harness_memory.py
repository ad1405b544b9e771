"""Claude Code's agents get the memory bank (issue #15 point 6): a project with harness =
"claude-code" runs an iteration in its container (no network) whose model calls
``mcp__raas__memory_write``; Claude Code reaches the gateway's ``/mcp`` through the relay in the
container with the lease's token, and the entry is in the database with its writer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from shared.db import session_scope
from shared.memory import entries
from shared.models import IterationStatus
from tests.support.engine import Engine, engine
from tests.support.records import event_log, iterations, text, tool
from tests.support.sandboxes import InspectedSandboxes

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

RAAS_TOML = 'harness = "claude-code"\ncompletion_marker = "TASK COMPLETE"\n'
ARGS = {"key": "build/cmd", "value": "python3 hello.py", "tags": ["build"]}
SCRIPT: dict[str, Any] = {
    "responses": [
        tool("mcp__raas__memory_write", ARGS, use_id="toolu_memory_1"),
        text("Noted the build command. TASK COMPLETE"),
    ],
    "when_exhausted": "error",
}


@pytest.fixture
def eng(services: dict[str, str], tmp_path: Path) -> Iterator[Engine]:
    with engine(SCRIPT, tmp_path, anthropic_api_key=SecretStr("sk-ant-real-key-of-the-worker")) as running:
        running.sandbox_factory = InspectedSandboxes(services["sandbox_image"])
        yield running


def test_claude_code_in_its_container_writes_memory_through_mcp(eng: Engine) -> None:
    # Given a project whose harness is Claude Code
    project_id = eng.submit(prompt="Note how to build.", raas_toml=RAAS_TOML)

    # When its first iteration runs in its container
    claim = eng.run_next(project_id)
    assert claim is not None

    # Then the model's memory_write ran through MCP, and the entry is in the database with its writer
    (iteration,) = iterations(project_id)
    assert iteration.status is IterationStatus.SUCCEEDED, iteration.error
    results = [
        e for e in event_log(project_id, "tool_executed") if e.data["tool"] == "mcp__raas__memory_write"
    ]
    assert len(results) == 1
    assert not results[0].data["is_error"], results[0].data
    with session_scope() as session:
        (entry,) = entries(session, claim.memory_bank)
    (value,) = entry.values
    assert (entry.key, value.value, value.tags) == ("build/cmd", "python3 hello.py", ["build"])
    assert (value.agent_id, value.iteration) == (claim.agent_id, 1)
    (written,) = event_log(project_id, "memory_written")
    assert written.data["tool_use_id"] == "toolu_memory_1"
