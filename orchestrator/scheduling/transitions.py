"""A project's status changes, each with its event: the end, and pauses with their reason."""

from __future__ import annotations

from orchestrator.scheduling.breaker import Trip
from orchestrator.scheduling.outbox import Outbox
from shared import events
from shared.models import Project, ProjectStatus, utcnow

_END_EVENTS = {
    ProjectStatus.COMPLETED: events.PROJECT_COMPLETED,
    ProjectStatus.FAILED: events.PROJECT_FAILED,
    ProjectStatus.STOPPED: events.PROJECT_STOPPED,
}


def end(
    out: Outbox, project: Project, status: ProjectStatus, reason: str | None, data: dict[str, object]
) -> None:
    project.status = status
    project.status_reason = reason
    project.finished_at = utcnow()
    out.event(project.id, _END_EVENTS[status], data)


def pause(out: Outbox, project: Project, reason_code: str, message: str) -> None:
    project.status = ProjectStatus.PAUSED
    project.status_reason = f"{reason_code}: {message}"
    out.event(project.id, events.PROJECT_PAUSED, {"reason": reason_code, "message": message})


def pause_for_breaker(out: Outbox, project: Project, trip: Trip) -> None:
    out.event(project.id, events.CIRCUIT_BREAKER_TRIGGERED, trip.model_dump(mode="json"))
    pause(out, project, "circuit_breaker", trip.message)


def pause_for_budget(out: Outbox, project: Project) -> None:
    data = {"spent_usd": str(project.spent_usd), "limit_usd": str(project.budget_limit_usd)}
    out.event(project.id, events.BUDGET_EXCEEDED, data)
    pause(
        out, project, "budget_exceeded", f"spent ${project.spent_usd:.4f} of ${project.budget_limit_usd:.2f}"
    )
