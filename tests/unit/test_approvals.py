"""Approvals are durable DAG nodes (issue #25, point 2): a row written when the project decides to
wait, decided exactly once, by a person or by its deadline's default.

Specs on a migrated SQLite file with the coordinator's real state machine (tests.support.
coordinator): a ``kind = "approval"`` task holds the DAG without an agent or a worker; ``[approvals]
diff`` holds the finished work before it is completed and delivered; the reconcile loop's pass
applies a deadline's default once; a second approval changes nothing and says what the first did.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from orchestrator.scheduling import advance, decisions, lifecycle
from orchestrator.scheduling.approvals import ApprovalOut
from shared import events
from shared.db import session_scope
from shared.errors import Conflict
from shared.events import NullBus
from shared.models import (
    Approval,
    ApprovalStatus,
    Iteration,
    PauseReason,
    Project,
    ProjectStatus,
    Task,
    TaskStatus,
    utcnow,
)
from tests.support.coordinator import Coordinator, migrated_template, sqlite_database
from tests.support.records import event_log
from workers import records
from workers.records import Outcome

pytestmark = pytest.mark.unit

GATED = [
    {"id": "build", "title": "Build it"},
    {"id": "gate", "title": "Ship it?", "kind": "approval", "depends_on": ["build"]},
    {"id": "ship", "title": "Ship it", "depends_on": ["gate"]},
]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return migrated_template(tmp_path_factory.mktemp("approvals"))


@pytest.fixture
def coordinator(template: Path, tmp_path: Path) -> Iterator[Coordinator]:
    with sqlite_database(template, tmp_path / "raas.db"):
        yield Coordinator()


def decide(
    c: Coordinator, project_id: str, *, approve: bool = True, comment: str | None = None
) -> ApprovalOut:
    return decisions.decide(
        project_id, approve=approve, comment=comment, by="token:alice", dispatcher=c.dispatcher, bus=NullBus()
    )


def deadline_pass(c: Coordinator, after_s: float) -> list[str]:
    """The reconcile loop's approval step, ``after_s`` from now."""
    return decisions.apply_deadlines(utcnow() + timedelta(seconds=after_s), c.dispatcher, NullBus())


def status(project_id: str) -> ProjectStatus:
    with session_scope() as session:
        return session.get_one(Project, project_id).status


def approvals_of(project_id: str) -> list[Approval]:
    with session_scope() as session:
        query = select(Approval).where(Approval.project_id == project_id).order_by(Approval.created_at)
        return list(session.scalars(query))


def tasks_of(project_id: str) -> dict[str, TaskStatus]:
    with session_scope() as session:
        return {t.key: t.status for t in session.scalars(select(Task).where(Task.project_id == project_id))}


def test_an_approval_task_waits_without_a_worker_and_its_comment_reaches_the_next_task(
    coordinator: Coordinator,
) -> None:
    # Given a DAG build -> gate (approval) -> ship, and build completed
    project_id = coordinator.start(tasks=GATED)
    coordinator.run_next(completed=True)
    # Then the project waits: one approval row, nothing sent to a worker, nothing reserved
    assert status(project_id) == ProjectStatus.WAITING_FOR_APPROVAL
    [waiting] = approvals_of(project_id)
    assert (waiting.key, waiting.status, waiting.title) == ("task:gate#1", ApprovalStatus.WAITING, "Ship it?")
    assert coordinator.in_flight() == []
    with session_scope() as session:
        assert session.get_one(Project, project_id).reserved_usd == 0
    assert [e.data["approval_id"] for e in event_log(project_id, events.APPROVAL_WAITING)] == [waiting.id]
    # When a person approves it with a comment
    decided = decide(coordinator, project_id, comment="ship to staging only")
    # Then the gate is complete, ship's builder runs, and its first claim carries the comment
    assert decided.status == ApprovalStatus.APPROVED
    assert status(project_id) == ProjectStatus.RUNNING
    assert tasks_of(project_id) == {
        "build": TaskStatus.COMPLETED,
        "gate": TaskStatus.COMPLETED,
        "ship": TaskStatus.RUNNING,
    }
    [ship] = coordinator.in_flight()
    claim = coordinator.given(ship.id)
    assert [heard.text for heard in claim.said] == ["ship to staging only"]
    assert "token:alice" in claim.said[0].author


def test_approving_twice_is_one_approval(coordinator: Coordinator) -> None:
    project_id = coordinator.start(tasks=GATED)
    coordinator.run_next(completed=True)
    decide(coordinator, project_id)
    sent = list(coordinator.dispatcher.sent)
    # When the same person (or another) approves again
    with pytest.raises(Conflict) as refused:
        decide(coordinator, project_id, comment="again")
    # Then it is refused naming the first outcome, and nothing changed
    assert "waits for no approval" in str(refused.value)
    assert "task:gate#1 was approved by token:alice" in str(refused.value)
    assert "\n" not in str(refused.value)
    assert len(event_log(project_id, events.APPROVAL_DECIDED)) == 1
    assert coordinator.dispatcher.sent == sent
    [approval] = approvals_of(project_id)
    assert approval.comment is None


def test_a_deadline_with_default_reject_rejects_once_and_the_builder_works_on(
    coordinator: Coordinator,
) -> None:
    # Given the finished work waiting for approval with a 2 s deadline and default "reject"
    project_id = coordinator.start(approvals={"diff": True, "deadline_s": 2, "default": "reject"})
    first = coordinator.run_next(completed=True)
    assert status(project_id) == ProjectStatus.WAITING_FOR_APPROVAL
    [waiting] = approvals_of(project_id)
    assert waiting.deadline is not None
    # When the reconcile pass runs before the deadline, then after it, twice
    assert deadline_pass(coordinator, 0) == []
    assert deadline_pass(coordinator, 3) == [waiting.id]
    assert deadline_pass(coordinator, 4) == []
    # Then it was rejected once, by the deadline, and the builder got its next iteration
    [rejected] = approvals_of(project_id)
    assert (rejected.status, rejected.decided_by) == (ApprovalStatus.REJECTED, "deadline")
    assert [e.data["decision"] for e in event_log(project_id, events.APPROVAL_DECIDED)] == ["rejected"]
    assert status(project_id) == ProjectStatus.RUNNING
    [again] = coordinator.in_flight()
    assert (again.agent_id, again.number) == (first.agent_id, 2)
    claim = coordinator.given(again.id)
    assert "was rejected" in claim.said[0].text
    # And when the builder completes again, the work waits for a second approval
    records.finish(claim, Outcome(completed_task=True, summary="fixed", files_changed=["a.py"]))
    advance.advance(project_id, again.id, coordinator.dispatcher, NullBus())
    assert status(project_id) == ProjectStatus.WAITING_FOR_APPROVAL
    assert [a.key for a in approvals_of(project_id)] == ["diff#1", "diff#2"]


def test_an_approved_diff_completes_the_project(coordinator: Coordinator) -> None:
    project_id = coordinator.start(approvals={"diff": True})
    coordinator.run_next(completed=True)
    assert event_log(project_id, events.PROJECT_COMPLETED) == []
    decide(coordinator, project_id)
    assert status(project_id) == ProjectStatus.COMPLETED
    assert len(event_log(project_id, events.PROJECT_COMPLETED)) == 1


def test_a_rejected_diff_tells_the_builder_why(coordinator: Coordinator) -> None:
    project_id = coordinator.start(approvals={"diff": True})
    coordinator.run_next(completed=True)
    decide(coordinator, project_id, approve=False, comment="add a test for the empty list")
    [again] = coordinator.in_flight()
    said = coordinator.given(again.id).said
    assert "add a test for the empty list" in said[0].text
    assert tasks_of(project_id) == {"main": TaskStatus.RUNNING}


def test_a_deadline_with_default_pause_pauses_and_resume_waits_again(coordinator: Coordinator) -> None:
    project_id = coordinator.start(approvals={"diff": True, "deadline_s": 2, "default": "pause"})
    coordinator.run_next(completed=True)
    deadline_pass(coordinator, 3)
    with session_scope() as session:
        project = session.get_one(Project, project_id)
        assert (project.status, project.pause_reason) == (ProjectStatus.PAUSED, PauseReason.APPROVAL)
    lifecycle.resume_project(project_id, coordinator.dispatcher, NullBus())
    assert status(project_id) == ProjectStatus.WAITING_FOR_APPROVAL
    assert [a.status for a in approvals_of(project_id)] == [ApprovalStatus.PAUSED, ApprovalStatus.WAITING]


def test_only_a_named_approver_may_decide(coordinator: Coordinator) -> None:
    project_id = coordinator.start(approvals={"diff": True, "approvers": ["token:bob"]})
    coordinator.run_next(completed=True)
    with pytest.raises(Conflict, match="only token:bob may decide diff#1"):
        decide(coordinator, project_id)
    assert status(project_id) == ProjectStatus.WAITING_FOR_APPROVAL


def test_approving_a_project_that_waits_for_nothing_changes_nothing(coordinator: Coordinator) -> None:
    project_id = coordinator.start()
    with pytest.raises(Conflict, match=r"waits for no approval \(running\)$"):
        decide(coordinator, project_id)
    assert approvals_of(project_id) == []
    assert event_log(project_id, events.APPROVAL_DECIDED) == []
    with session_scope() as session:
        assert len(list(session.scalars(select(Iteration).where(Iteration.project_id == project_id)))) == 1


PLAN = {
    "objectives": ["a greeting"],
    "exit_criteria": ["hello.py prints it"],
    "tasks": [
        {"id": "write", "title": "Write it"},
        {"id": "test", "title": "Test it", "depends_on": ["write"]},
    ],
}


def test_a_plan_waits_for_approval_and_a_rejected_plan_is_planned_again(coordinator: Coordinator) -> None:
    # Given a planned project whose plan needs approval, and the planner's plan
    project_id = coordinator.start(workflow="planned", approvals={"plan": True})
    planner = coordinator.run_next(completed=True, summary=json.dumps(PLAN))
    # Then its tasks wait, unstarted, and nothing runs
    assert status(project_id) == ProjectStatus.WAITING_FOR_APPROVAL
    assert tasks_of(project_id) == {
        "plan": TaskStatus.COMPLETED,
        "write": TaskStatus.PENDING,
        "test": TaskStatus.PENDING,
    }
    assert coordinator.in_flight() == []
    # When a person rejects it with a comment
    decide(coordinator, project_id, approve=False, comment="split write in two")
    # Then the plan's tasks are gone and the planner plans again, told why
    assert tasks_of(project_id) == {"plan": TaskStatus.RUNNING}
    [again] = coordinator.in_flight()
    assert (again.agent_id, again.number) == (planner.agent_id, 2)
    claim = coordinator.given(again.id)
    assert "split write in two" in claim.said[0].text
    records.finish(claim, Outcome(completed_task=True, summary=json.dumps(PLAN), files_changed=[]))
    advance.advance(project_id, again.id, coordinator.dispatcher, NullBus())
    # And its second plan, approved, starts its first wave
    assert status(project_id) == ProjectStatus.WAITING_FOR_APPROVAL
    decide(coordinator, project_id)
    assert [a.key for a in approvals_of(project_id)] == ["plan#1", "plan#2"]
    assert tasks_of(project_id)["write"] == TaskStatus.RUNNING
    assert len(coordinator.in_flight()) == 1
