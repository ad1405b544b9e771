"""At-least-once delivery, exactly-once effects (DESIGN.md rule 3), through real iterations."""

from __future__ import annotations

from contextlib import closing
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import update

from shared import events
from shared.db import session_scope
from shared.errors import ServiceUnavailable
from shared.git import commit_all
from shared.models import Iteration, IterationStatus, utcnow
from shared.usage import Usage
from tests.support.engine import engine
from tests.support.records import (
    event_log,
    iterations,
    messages,
    project,
    text,
    tool,
    workspace_git,
)
from workers import records
from workers.claim import claim_iteration
from workers.ledger import CallLedger
from workers.workspace_transfer import WorkspaceTransfer

pytestmark = [pytest.mark.integration, pytest.mark.docker]

WRITE_THEN_END = {
    "responses": [
        tool("write", {"path": "a.txt", "content": "one\n"}),
        text("Wrote a.txt."),
    ]
}


def test_an_iteration_claimed_twice_is_given_to_one_worker(services: dict[str, str], tmp_path: Path) -> None:
    with engine(WRITE_THEN_END, tmp_path) as eng:
        project_id = eng.submit()
        iteration_id = eng.dispatcher.take(project_id)
        assert iteration_id is not None

        first = claim_iteration(iteration_id, "worker-a", stale_after_s=30)
        second = claim_iteration(iteration_id, "worker-b", stale_after_s=30)

        assert first is not None
        assert first.attempt == 1
        assert second is None
        # A redelivered message on a third worker finds it taken and does nothing.
        assert eng.runner("worker-c").run(iteration_id) is None
        assert eng.requests(project_id) == []
        row = iterations(project_id)[0]
        assert (row.status, row.worker, row.attempt) == (IterationStatus.RUNNING, "worker-a", 1)


def test_a_redelivered_finished_iteration_changes_nothing(services: dict[str, str], tmp_path: Path) -> None:
    with engine(WRITE_THEN_END, tmp_path) as eng:
        project_id = eng.submit()
        iteration_id = eng.dispatcher.enqueued[0][1]
        eng.run_next(project_id)
        before = (
            len(messages(project_id)),
            project(project_id).last_event_seq,
            project(project_id).spent_usd,
        )
        requests_before = len(eng.requests(project_id))

        # When: Celery delivers the same message again after the iteration finished.
        assert eng.runner("another-worker").run(iteration_id) is None

        after = (len(messages(project_id)), project(project_id).last_event_seq, project(project_id).spent_usd)
        assert after == before
        assert len(eng.requests(project_id)) == requests_before
        assert iterations(project_id)[0].attempt == 1


def test_an_iteration_whose_worker_died_reruns_as_a_new_attempt_charged_once(
    services: dict[str, str], tmp_path: Path
) -> None:
    with engine(WRITE_THEN_END, tmp_path) as eng:
        project_id = eng.submit()
        iteration_id = eng.dispatcher.take(project_id)
        assert iteration_id is not None

        # Given: a worker claimed the iteration, made one LLM call, and died.
        dead = claim_iteration(iteration_id, "dead-worker", stale_after_s=30)
        assert dead is not None
        calls = CallLedger(dead)
        calls.record("user", [{"type": "text", "text": "opening of attempt 1"}])
        ticket = calls.admit("claude-sonnet-4-6", 4_000, 1_000)
        usage = Usage(input_tokens=1000, output_tokens=100)
        calls.settle(ticket, [{"type": "text", "text": "attempt 1 was here"}], usage, stop_reason="end_turn")
        dead_cost = Decimal("0.004500")  # 1000 * $3 + 100 * $15 per million
        assert project(project_id).spent_usd == dead_cost
        with session_scope() as session:
            session.execute(
                update(Iteration)
                .where(Iteration.id == iteration_id)
                .values(heartbeat_at=utcnow() - timedelta(minutes=10))
            )

        # When: the reconcile loop's redelivery reaches a live worker.
        claim = eng.runner("live-worker").run(iteration_id)

        # Then: it ran as attempt 2, beside attempt 1's record rather than over it.
        assert claim is not None
        assert claim.attempt == 2
        row = iterations(project_id)[0]
        assert (row.status, row.attempt, row.worker, row.error) == (
            IterationStatus.SUCCEEDED,
            2,
            "live-worker",
            None,
        )
        stored = messages(project_id)
        by_attempt = {a: [(m.seq, m.role) for m in stored if m.attempt == a] for a in (1, 2)}
        assert by_attempt[1] == [(0, "user"), (1, "assistant")]
        assert by_attempt[2] == [(0, "user"), (1, "assistant"), (2, "user"), (3, "assistant")]
        assert len(stored) == 6
        # Every call is charged exactly once: the project's spend is the sum of its messages.
        spent = project(project_id).spent_usd
        assert spent == sum((m.cost_usd for m in stored), Decimal(0))
        assert spent > dead_cost
        assert row.cost_usd == spent
        started = event_log(project_id, events.ITERATION_STARTED)
        assert [e.data["attempt"] for e in started] == [1, 2]  # the dead attempt started too

        # The dead attempt, had it come back, may not push its workspace or record its end.
        head = workspace_git(eng, project_id, "rev-parse", "main")
        stale = tmp_path / "stale-attempt"
        coordinator = WorkspaceTransfer(
            eng.settings.coordinator_url, eng.settings.api_token.get_secret_value()
        )
        with closing(coordinator):
            gitdir = tmp_path / "stale-attempt.git"
            base = coordinator.fetch_workspace(project_id, stale, gitdir)
            (stale / "late.txt").write_text("from the dead worker\n")
            commit_all(stale, "late", "agent-dead", "dead@constellation.local", gitdir=gitdir)
            with pytest.raises(ServiceUnavailable, match="not the running attempt"):
                coordinator.push_workspace(project_id, iteration_id, dead.attempt, gitdir, base)
        assert workspace_git(eng, project_id, "rev-parse", "main") == head
        assert records.finish(dead, records.Outcome(completed_task=True)) is None
        assert iterations(project_id)[0].completed_task is False
