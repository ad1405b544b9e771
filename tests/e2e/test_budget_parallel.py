"""The budget holds under parallelism (issue #23, point 1): 8 subagents on 2 worker processes, one
$0.50 limit, and the project never spends past it, not even by one call: ``spent <= limit`` (and
``spent + reserved <= limit``, the ledger's own rule) in every reading of the project's row taken
while they run, and at the end.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import func, select

from shared import budget
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
from shared.pricing import find_price
from tests.support.stack import Stack
from workers.ledger.calls import BUDGET_WAIT_S

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

LIMIT_USD = Decimal("0.5")
MODEL = "claude-sonnet-4-6"
SPAWN_EIGHT = [
    {
        "type": "tool_use",
        "name": "spawn_subagent",
        "input": {"category": "searcher", "prompt": f"survey part {i}"},
    }
    for i in range(8)
]
# Every later call costs about $0.02 on claude-sonnet-4-6: 1,000 tokens out at $15 per million
# (fewer than the floor, so never more than a lowered call may answer: the provider keeps to
# max_tokens) and the input the scripted model counts from the request's size, as the real API
# would.
EXPENSIVE_LOOP = {
    "content": [{"type": "tool_use", "name": "glob", "input": {"pattern": "*"}}],
    "usage": {"output_tokens": 1000},
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


@dataclass(frozen=True)
class Reading:
    """The project's row in one statement: what it had spent and held at one moment."""

    spent_usd: Decimal
    reserved_usd: Decimal
    limit_usd: Decimal


class Watch:
    """Reads every project's row over and over, in a thread, until stopped: started before the
    project is submitted (the CLI takes seconds to start on a loaded machine, and the project runs
    meanwhile), its readings are taken by project afterwards."""

    def __init__(self, every_s: float = 0.02) -> None:
        self.every_s = every_s
        self.seen: list[tuple[str, Reading]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def readings(self, project_id: str) -> list[Reading]:
        return [reading for seen_id, reading in self.seen if seen_id == project_id]

    def _read(self) -> None:
        rows = select(Project.id, Project.spent_usd, Project.reserved_usd, Project.budget_limit_usd)
        while not self._stop.is_set():
            with session_scope() as session:
                self.seen.extend((row[0], Reading(*row[1:])) for row in session.execute(rows))
            self._stop.wait(self.every_s)


def _settled(project_id: str, timeout_s: float) -> Project:
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
        time.sleep(0.5)
    with session_scope() as session:
        rows = session.execute(
            select(Iteration.status, func.count())
            .where(Iteration.project_id == project_id)
            .group_by(Iteration.status)
        ).all()
    state = f"{project.status} {project.status_reason} {rows}"
    msg = f"project {project_id} did not settle in {timeout_s}s: {state}"
    raise TimeoutError(msg)


@pytest.mark.timeout(BUDGET_WAIT_S + 300)
def test_parallel_subagents_never_spend_past_the_limit_at_any_moment(stack: Stack, tmp_path: Path) -> None:
    # Given a project whose root spawns 8 parallel subagents that each call the model in a loop
    project_dir = tmp_path / "project"
    project_dir.mkdir()
    (project_dir / "PROMPT.md").write_text("Survey everything.\n")
    (project_dir / "raas.toml").write_text(
        f'model = "{MODEL}"\nmax_tokens = 2000\nmax_parallel = 8\nmax_turns = 50\n'
        f"[budget]\nlimit_usd = {LIMIT_USD}\n"
    )
    # When they run until the budget stops them, the project's row read all the while
    with Watch() as watch:
        submitted = stack.cli("submit", str(project_dir), "--json")
        assert submitted.returncode == 0, submitted.stderr + stack.logs()
        project_id = json.loads(submitted.stdout)["id"]
        # (a call refused while another iteration's call holds budget waits for it, at most
        # BUDGET_WAIT_S)
        project = _settled(project_id, timeout_s=BUDGET_WAIT_S + 180)
    readings = watch.readings(project_id)

    # Then no reading saw the spend, or the spend and what was held, past the limit
    # (enough readings to mean something: a short run on a loaded machine gave 89)
    assert len(readings) > 20, len(readings)
    assert {r.limit_usd for r in readings} == {LIMIT_USD}
    assert [r for r in readings if r.spent_usd > r.limit_usd] == []
    assert [r for r in readings if r.spent_usd + r.reserved_usd > r.limit_usd] == []
    # (the readings cover the run: from nothing spent to the end)
    assert readings[0].spent_usd < LIMIT_USD / 10
    assert readings[-1].spent_usd == project.spent_usd

    # And at the end: every call charged once, within the limit, nothing held, the budget used up
    with session_scope() as session:
        costs = list(
            session.scalars(
                select(Message.cost_usd).where(Message.project_id == project_id, Message.role == "assistant")
            )
        )
        agents_run = session.scalar(
            select(func.count(func.distinct(Iteration.agent_id))).where(Iteration.project_id == project_id)
        )
        ledger_total = session.scalar(
            select(func.sum(LedgerEntry.amount_usd)).where(
                LedgerEntry.project_id == project_id, LedgerEntry.kind == "settle"
            )
        )
    assert project.pause_reason == PauseReason.BUDGET_EXCEEDED
    assert agents_run == 9  # the root and its 8 subagents all ran
    assert sum(costs) == project.spent_usd == ledger_total
    assert project.spent_usd <= LIMIT_USD
    assert project.reserved_usd == 0
    price = find_price(MODEL)
    assert price is not None
    # (less is left than the smallest call the coordinator would send an iteration for)
    assert LIMIT_USD - project.spent_usd < budget.smallest_call_usd(price), project.spent_usd
    print(
        f"spent ${project.spent_usd} of ${LIMIT_USD} in {len(costs)} calls; {len(readings)} readings, "
        f"the highest spent + reserved ${max(r.spent_usd + r.reserved_usd for r in readings)}"
    )
