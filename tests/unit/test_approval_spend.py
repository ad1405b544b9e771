"""The spend-threshold approval (issue #25, point 2: "approve spending past a threshold").

With ``[approvals] spend_usd = X``, once the project has spent X its further iterations wait at
admission for a person: approved, they are sent and it is not asked again; rejected, the project
stops; the deadline's default applies once. Specs on a migrated SQLite file with the coordinator's
real state machine (tests.support.coordinator) and its real reconcile pass; the spend is what the
worker's ledger would have recorded on the project row.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import select

from orchestrator.scheduling import advance, decisions, lifecycle
from orchestrator.scheduling.reconcile import Reconciler
from shared import events
from shared.db import session_scope
from shared.errors import Conflict
from shared.events import NullBus
from shared.models import (
    Approval,
    ApprovalPoint,
    ApprovalStatus,
    Iteration,
    IterationStatus,
    PauseReason,
    Project,
    ProjectStatus,
    utcnow,
)
from shared.project_config import ProjectConfig
from shared.settings import get_settings
from tests.support.coordinator import Coordinator, migrated_template, sqlite_database, waiting
from tests.support.records import event_log
from workers import records
from workers.records import Outcome

pytestmark = pytest.mark.unit

THRESHOLD = {"spend_usd": "1.00"}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return migrated_template(tmp_path_factory.mktemp("approval-spend"))


@pytest.fixture
def coordinator(template: Path, tmp_path: Path) -> Iterator[Coordinator]:
    with sqlite_database(template, tmp_path / "raas.db"):
        yield Coordinator()


def spend(project_id: str, usd: str) -> None:
    """What the worker's ledger records as the project's spend (settled calls)."""
    with session_scope() as session:
        session.get_one(Project, project_id).spent_usd = Decimal(usd)


def project_row(project_id: str) -> Project:
    with session_scope() as session:
        project = session.get_one(Project, project_id)
        session.expunge(project)
        return project


def approvals_of(project_id: str) -> list[Approval]:
    with session_scope() as session:
        query = select(Approval).where(Approval.project_id == project_id).order_by(Approval.created_at)
        return list(session.scalars(query))


def decide(c: Coordinator, project_id: str, *, approve: bool, comment: str | None = None) -> None:
    decisions.decide(
        project_id, approve=approve, comment=comment, by="token:alice", dispatcher=c.dispatcher, bus=NullBus()
    )


def reconcile_pass(c: Coordinator, after_s: float = 0) -> list[str]:
    """The reconcile loop's pass (its approval step too), ``after_s`` from now; what it decided."""
    report = Reconciler(get_settings(), c.dispatcher, NullBus()).run_once(
        utcnow() + timedelta(seconds=after_s)
    )
    return report.approvals


def held_at_threshold(c: Coordinator, **approvals: object) -> str:
    """A project that ran one iteration under the threshold and a second that passed it: its third
    iteration waits for the spend approval."""
    project_id = c.start(approvals={**THRESHOLD, **approvals})
    spend(project_id, "0.40")
    c.run_next()
    assert len(c.in_flight()) == 1  # under the threshold: admitted as always
    spend(project_id, "1.20")
    c.run_next()
    return project_id


def test_passing_the_threshold_holds_the_next_iteration_for_one_approval(coordinator: Coordinator) -> None:
    # Given a project whose spend passed [approvals] spend_usd during its second iteration
    project_id = held_at_threshold(coordinator)
    # Then its third iteration waits unsent, the project shows waiting_for_approval, nothing reserved
    assert coordinator.in_flight() == []
    [held] = waiting(project_id)
    project = project_row(project_id)
    assert (project.status, project.reserved_usd) == (ProjectStatus.WAITING_FOR_APPROVAL, Decimal(0))
    assert project.status_reason is not None
    assert "spend more than $1.00" in project.status_reason
    [approval] = approvals_of(project_id)
    assert (approval.key, approval.point, approval.status) == (
        "spend#1",
        ApprovalPoint.SPEND,
        ApprovalStatus.WAITING,
    )
    # When reconcile passes run (after a coordinator restart: a new dispatcher, the same database)
    restarted = Coordinator()
    assert reconcile_pass(restarted) == []
    assert reconcile_pass(restarted) == []
    # Then still one approval, one approval_waiting event, nothing sent
    assert len(approvals_of(project_id)) == 1
    assert len(event_log(project_id, events.APPROVAL_WAITING)) == 1
    assert restarted.dispatcher.sent == []
    # When a person approves with a comment
    decide(restarted, project_id, approve=True, comment="fine, up to the budget")
    # Then the held iteration is sent, and its agent reads the comment
    assert restarted.dispatcher.sent == [held.id]
    assert project_row(project_id).status == ProjectStatus.RUNNING
    claim = restarted.given(held.id)
    assert [h.text for h in claim.said] == ["fine, up to the budget"]
    # And spending on, it is not asked again
    spend(project_id, "3.00")
    records.finish(claim, Outcome(completed_task=False, summary=None, error=None, files_changed=["a.py"]))
    advance.advance(project_id, held.id, restarted.dispatcher, NullBus())
    assert len(restarted.in_flight()) == 1
    assert len(approvals_of(project_id)) == 1
    # And approving again is refused, naming the first decision
    with pytest.raises(Conflict, match="spend#1 was approved by token:alice"):
        decide(restarted, project_id, approve=True)


def test_a_rejected_spend_stops_the_project_and_its_held_iteration_never_runs(
    coordinator: Coordinator,
) -> None:
    project_id = held_at_threshold(coordinator)
    [held] = waiting(project_id)
    sent = list(coordinator.dispatcher.sent)
    decide(coordinator, project_id, approve=False, comment="too dear")
    project = project_row(project_id)
    assert project.status == ProjectStatus.STOPPED
    assert project.status_reason is not None
    assert project.status_reason.endswith("rejected by token:alice: too dear")
    assert coordinator.dispatcher.sent == sent
    with session_scope() as session:
        assert session.get_one(Iteration, held.id).status == IterationStatus.FAILED
    assert len(event_log(project_id, events.PROJECT_STOPPED)) == 1


def test_a_deadline_with_default_reject_stops_once(coordinator: Coordinator) -> None:
    # Given the spend approval with a 2 s deadline and default "reject"
    project_id = held_at_threshold(coordinator, deadline_s=2, default="reject")
    [approval] = approvals_of(project_id)
    # When reconcile passes run before the deadline, then after it, twice
    assert reconcile_pass(coordinator, 0) == []
    assert reconcile_pass(coordinator, 3) == [approval.id]
    assert reconcile_pass(coordinator, 4) == []
    # Then it was rejected once, by the deadline, and the project stopped once
    [decided] = approvals_of(project_id)
    assert (decided.status, decided.decided_by) == (ApprovalStatus.REJECTED, "deadline")
    assert [e.data["decision"] for e in event_log(project_id, events.APPROVAL_DECIDED)] == ["rejected"]
    assert project_row(project_id).status == ProjectStatus.STOPPED
    assert len(event_log(project_id, events.PROJECT_STOPPED)) == 1


def test_a_deadline_with_default_approve_sends_the_held_iteration(coordinator: Coordinator) -> None:
    project_id = held_at_threshold(coordinator, deadline_s=2, default="approve")
    [held] = waiting(project_id)
    reconcile_pass(coordinator, 3)
    assert coordinator.dispatcher.sent[-1] == held.id
    assert project_row(project_id).status == ProjectStatus.RUNNING


def test_a_deadline_with_default_pause_pauses_and_resume_waits_again(coordinator: Coordinator) -> None:
    project_id = held_at_threshold(coordinator, deadline_s=2, default="pause")
    [held] = waiting(project_id)
    reconcile_pass(coordinator, 3)
    project = project_row(project_id)
    assert (project.status, project.pause_reason) == (ProjectStatus.PAUSED, PauseReason.APPROVAL)
    # When resumed, it waits again (a new approval, a new deadline) and sends nothing
    lifecycle.resume_project(project_id, coordinator.dispatcher, NullBus())
    assert project_row(project_id).status == ProjectStatus.WAITING_FOR_APPROVAL
    assert [a.key for a in approvals_of(project_id)] == ["spend#1", "spend#2"]
    assert coordinator.in_flight() == []
    # And approved, the held iteration goes
    decide(coordinator, project_id, approve=True)
    assert [i.id for i in coordinator.in_flight()] == [held.id]


def test_no_threshold_no_approval(coordinator: Coordinator) -> None:
    project_id = coordinator.start()
    spend(project_id, "4.00")
    coordinator.run_next()
    assert len(coordinator.in_flight()) == 1
    assert approvals_of(project_id) == []


def test_a_threshold_that_is_not_an_amount_is_refused() -> None:
    with pytest.raises(ValueError, match="spend_usd"):
        ProjectConfig.model_validate({"approvals": {"spend_usd": "-1"}})
