"""Deciding deliveries: which branch goes to the user's remote, and when (DESIGN.md rule 10).

The state machine only decides. When a task completes (after its validator) its branch is due;
when a run ends — completed, failed, stopped, or paused by its budget, its breaker or a rejected
API key — the project's branch and pull request are due. The decision is a ``deliveries`` row
written in the deciding transaction and a message sent after the commit (``Outbox.deliver``);
orchestrator.delivery does the pushing, in the coordinator's ``raas.deliver`` task. A project
with no remote (no ``[delivery] remote`` and no source repository) delivers nothing.
"""

from __future__ import annotations

from sqlalchemy import select

from orchestrator.scheduling.outbox import Outbox
from shared.git_refs import branch_name
from shared.models import (
    Delivery,
    DeliveryKind,
    DeliveryStatus,
    PauseReason,
    Project,
    ProjectStatus,
    Task,
    new_id,
    utcnow,
)
from shared.project_config import ProjectConfig

PROJECT_KEY = "project"
# Pauses that cut a run short until someone acts: its work so far is delivered. A user's pause
# is not one of them (nothing is wrong, and ``raas stop`` delivers).
DELIVERED_PAUSES = (PauseReason.BUDGET_EXCEEDED, PauseReason.CIRCUIT_BREAKER, PauseReason.API_KEY_REQUIRED)


def remote_of(project: Project, config: ProjectConfig) -> str | None:
    """Where the project delivers: ``[delivery] remote``, else the repository it started from."""
    return config.delivery.remote or project.source_repo or config.source.repo


def deliver_task(out: Outbox, project: Project, task: Task) -> None:
    """The task's branch is due, at the workspace's current commit."""
    _decide(out, project, f"task:{task.key}", DeliveryKind.TASK, task.key)


def deliver_project(out: Outbox, project: Project) -> None:
    """The project's branch and pull request are due: the run ended or stopped early (its status
    and reason are read from the project, so call it after the status changed)."""
    if project.status == ProjectStatus.PAUSED and project.pause_reason not in DELIVERED_PAUSES:
        return
    _decide(out, project, PROJECT_KEY, DeliveryKind.PROJECT, None)


def deliver_late_work(out: Outbox, project: Project) -> None:
    """An iteration's commits were accepted after its run ended or was paused (it was still running
    when ``raas stop`` came): the project's delivery may already have pushed without them, so a
    new round pushes them (and says so on the pull request). Call it with the project row locked."""
    if project.status in (ProjectStatus.CREATED, ProjectStatus.RUNNING):
        return
    deliver_project(out, project)


def _decide(out: Outbox, project: Project, key: str, kind: DeliveryKind, task_key: str | None) -> None:
    config = ProjectConfig.model_validate(project.config)
    remote = remote_of(project, config)
    if remote is None:
        return
    row = out.session.scalars(
        select(Delivery).where(Delivery.project_id == project.id, Delivery.key == key)
    ).one_or_none()
    if row is None:
        row = Delivery(
            id=new_id(),
            project_id=project.id,
            key=key,
            kind=kind,
            task_key=task_key,
            remote=remote,
            branch=branch_name(config.delivery.branch, project.id, task_key),
            base=config.delivery.base or project.source_ref or config.source.ref,
            round=1,
            noted_round=0,
            attempts=0,
            created_at=utcnow(),
        )
        out.session.add(row)
    else:
        # The same branch and pull request, a new round: resuming continues where it was.
        row.round += 1
        row.error = None
    row.status = DeliveryStatus.PENDING
    row.sha = project.workspace_sha
    row.ending = project.status.value
    row.reason = project.status_line
    out.deliver(row)
