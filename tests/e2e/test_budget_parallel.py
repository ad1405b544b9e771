"""The budget gate holds under parallelism: 8 subagents on separate worker processes, one
$0.50 limit, and the final spend is at most the limit plus the largest single LLM call.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import func, select

from shared.db import session_scope
from shared.models import (
    Iteration,
    IterationStatus,
    LedgerEntry,
    Message,
    PauseReason,
    Project,
    ProjectStatus,
)
from tests.support.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

SPAWN_EIGHT = [
    {
        "type": "tool_use",
        "name": "spawn_subagent",
        "input": {"category": "searcher", "prompt": f"survey part {i}"},
    }
    for i in range(8)
]
# Every later call costs about $0.03 on claude-sonnet-4-6 (1500 out at $15 per million, and the
# input the scripted model counts from the request's size, as the real API would).
EXPENSIVE_LOOP = {
    "content": [{"type": "tool_use", "name": "glob", "input": {"pattern": "*"}}],
    "usage": {"output_tokens": 1500},
}


@pytest.fixture
def stack(services: dict[str, str], tmp_path: Path) -> Iterator[Stack]:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "responses": [
                    {"content": SPAWN_EIGHT, "usage": {"input_tokens": 100, "output_tokens": 100}},
                    {
                        "content": [{"type": "text", "text": "spawned"}],
                        "usage": {"input_tokens": 100, "output_tokens": 10},
                    },
                    EXPENSIVE_LOOP,
                ],
                "when_exhausted": "repeat_last",
            }
        )
    )
    running = Stack(log_dir=tmp_path / "logs", script=script).start(workers=2, concurrency=4)
    yield running
    running.stop()


def _settled(project_id: str, timeout_s: float = 180) -> Project:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with session_scope() as session:
            project = session.get_one(Project, project_id)
            running = session.scalar(
                select(func.count())
                .select_from(Iteration)
                .where(
                    Iteration.project_id == project_id,
                    Iteration.status.in_([IterationStatus.RUNNING, IterationStatus.QUEUED]),
                )
            )
        if project.status == ProjectStatus.PAUSED and not running:
            return project
        time.sleep(1)
    with session_scope() as session:
        rows = session.execute(
            select(Iteration.status, func.count())
            .where(Iteration.project_id == project_id)
            .group_by(Iteration.status)
        ).all()
    state = f"{project.status} {project.status_reason} {rows}"
    msg = f"project {project_id} did not settle in {timeout_s}s: {state}"
    raise TimeoutError(msg)


def test_parallel_subagents_never_overspend_by_more_than_one_call(stack: Stack, tmp_path: Path) -> None:
    # Given a project whose root spawns 8 parallel subagents that each call the model in a loop
    project_dir = tmp_path / "project"
    project_dir.mkdir()
    (project_dir / "PROMPT.md").write_text("Survey everything.\n")
    (project_dir / "raas.toml").write_text(
        'model = "claude-sonnet-4-6"\nmax_tokens = 2000\nmax_parallel = 8\nmax_turns = 50\n'
        "[budget]\nlimit_usd = 0.5\n"
    )
    submitted = stack.cli("submit", str(project_dir), "--json")
    assert submitted.returncode == 0, submitted.stderr + stack.logs()
    project_id = json.loads(submitted.stdout)["id"]

    # When they run until the budget stops them
    project = _settled(project_id)

    # Then the spend is within the limit plus the largest single call, and nothing stays reserved
    with session_scope() as session:
        costs = list(
            session.scalars(
                select(Message.cost_usd).where(Message.project_id == project_id, Message.role == "assistant")
            )
        )
        subagent_iterations = session.scalar(
            select(func.count(func.distinct(Iteration.agent_id))).where(Iteration.project_id == project_id)
        )
        ledger_total = session.scalar(
            select(func.sum(LedgerEntry.amount_usd)).where(
                LedgerEntry.project_id == project_id, LedgerEntry.kind == "settle"
            )
        )
    assert project.pause_reason == PauseReason.BUDGET_EXCEEDED
    assert subagent_iterations == 9  # the root and its 8 subagents all ran
    assert sum(costs) == project.spent_usd == ledger_total
    assert project.spent_usd <= Decimal("0.5") + max(costs), (project.spent_usd, max(costs))
    assert project.spent_usd > Decimal("0.4")  # the budget was really used, not refused early
    assert project.reserved_usd == 0
    print(f"spent ${project.spent_usd} of $0.50 in {len(costs)} calls; largest call ${max(costs)}")
