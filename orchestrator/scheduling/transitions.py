"""A project's status changes, each with its event: the end, and pauses with their reason.

A pause's reason is a ``PauseReason`` in its own column (what code acts on: resuming for a
raised budget, the breaker's half-open trial); ``status_reason`` holds the words for people.
"""

from __future__ import annotations

from orchestrator.scheduling.deliveries import deliver_project
from orchestrator.scheduling.outbox import Outbox
from shared import rounds
from shared.event_payloads import (
    BudgetExceeded,
    ProjectCompleted,
    ProjectFailed,
    ProjectPaused,
    ProjectStopped,
    RoundFinished,
    Trip,
)
from shared.events import EventData
from shared.models import PauseReason, Project, ProjectStatus, utcnow

_STATUS_AFTER: dict[type[EventData], ProjectStatus] = {
    ProjectCompleted: ProjectStatus.COMPLETED,
    ProjectFailed: ProjectStatus.FAILED,
    ProjectStopped: ProjectStatus.STOPPED,
}


def end(out: Outbox, project: Project, ending: ProjectCompleted | ProjectFailed | ProjectStopped) -> None:
    """End the project with the event that says how; a failure's or a stop's reason is its status reason.

    A pull request round that completes ends ``delivered`` again (its PR followed on), and its
    work goes to the same branch and pull request as a new round of the project's delivery.
    """
    project.status = _STATUS_AFTER[type(ending)]
    project.status_reason = None if isinstance(ending, ProjectCompleted) else ending.reason
    project.pause_reason = None
    project.finished_at = utcnow()
    finished = rounds.finish_open_round(out.session, project.id)
    if finished is not None and isinstance(ending, ProjectCompleted):
        project.status, project.status_reason = ProjectStatus.DELIVERED, finished.following
        done = RoundFinished(round=finished.number, sha=project.workspace_sha, cost_usd=finished.cost_usd)
        out.event(project.id, done)
    else:
        out.event(project.id, ending)
    deliver_project(out, project)


def pause(out: Outbox, project: Project, reason: PauseReason, message: str) -> None:
    project.status = ProjectStatus.PAUSED
    project.pause_reason = reason
    project.status_reason = message
    out.event(project.id, ProjectPaused(reason=reason, message=message))
    deliver_project(out, project)


def pause_for_breaker(out: Outbox, project: Project, trip: Trip) -> None:
    out.event(project.id, trip)
    pause(out, project, PauseReason.CIRCUIT_BREAKER, trip.message)


def pause_for_budget(out: Outbox, project: Project) -> None:
    out.event(project.id, BudgetExceeded(spent_usd=project.spent_usd, limit_usd=project.budget_limit_usd))
    capped = rounds.cap_open_round(out.session, project)  # a PR round's budget: delivered, follow ended
    if capped:
        for payload in capped:
            out.event(project.id, payload)
        deliver_project(out, project)
        return
    message = f"spent ${project.spent_usd:.4f} of ${project.budget_limit_usd:.2f}"
    pause(out, project, PauseReason.BUDGET_EXCEEDED, message)
