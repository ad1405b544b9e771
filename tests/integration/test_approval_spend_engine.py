"""The spend-threshold approval in the running engine (issue #25 point 2): the spend is what the
worker's ledger charged for the scripted model's answers, and the held iteration is the one the
coordinator would have sent next. Postgres, the in-process engine, a real sandbox.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from orchestrator.scheduling import decisions
from shared import events
from shared.models import ProjectStatus
from tests.support.engine import engine
from tests.support.records import event_log, iterations, project, tool

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.usefixtures("services")]

# Each answer reports this usage: $0.0105 on claude-sonnet-4-6 ($3 / $15 per million).
USAGE = {"input_tokens": 2000, "output_tokens": 300}
THRESHOLD = Decimal("0.015")  # passed during the second iteration, not the first
RAAS_TOML = f"max_turns = 1\n[approvals]\nspend_usd = {THRESHOLD}\n"


def _write(n: int) -> dict[str, object]:
    return {**tool("write", {"path": f"f{n}.txt", "content": f"{n}\n"}), "usage": USAGE}


SCRIPT = {"responses": [_write(n) for n in range(4)] + [tool("task_complete", {"summary": "done"})]}


def test_the_engine_holds_the_iteration_after_the_threshold_until_a_person_approves(tmp_path: Path) -> None:
    with engine(SCRIPT, tmp_path) as eng:
        project_id = eng.submit(raas_toml=RAAS_TOML)
        # Given two iterations, one call each: the first under the threshold, the second past it
        eng.run_next(project_id)
        assert project(project_id).spent_usd < THRESHOLD
        assert eng.dispatcher.pending(project_id)
        eng.run_next(project_id)
        # Then the third is held: nothing sent, the project waits for one approval, nothing reserved
        held = project(project_id)
        assert held.spent_usd >= THRESHOLD
        assert held.status is ProjectStatus.WAITING_FOR_APPROVAL
        assert held.reserved_usd == 0
        assert not eng.dispatcher.pending(project_id)
        [waiting] = event_log(project_id, events.APPROVAL_WAITING)
        assert waiting.data["point"] == "spend"
        # When a person approves
        decisions.decide(
            project_id, approve=True, comment=None, by="token:alice", dispatcher=eng.dispatcher, bus=eng.bus
        )
        # Then the loop goes on to its end without asking again
        eng.run_to_end(project_id)
        assert project(project_id).status is ProjectStatus.COMPLETED
        assert len(iterations(project_id)) == 5
        assert len(event_log(project_id, events.APPROVAL_WAITING)) == 1
