"""Approvals waiting for a person (DESIGN.md rules 12, 13): written, looked up, decided once.

An approval is a row written in the transaction that decides to wait (:func:`wait_for`): a
``kind = "approval"`` task that became ready, or the finished work before delivery
(``[approvals] diff``), the plan, or the next iteration once the project has spent ``[approvals]
spend_usd`` (:func:`spend_waits`, asked by admission). While one waits and nothing else runs, the project is
``waiting_for_approval``: it holds no worker and no reservation, so it survives any restart as the
row it is. It leaves ``waiting`` once, by the conditional UPDATE of :func:`close` — whether a
person (``raas approve``) or the deadline's default (the reconcile loop) gets there first.
What the decision does to the project is orchestrator.scheduling.decisions.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict
from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from orchestrator.scheduling.outbox import Outbox
from shared.dag import TaskKind
from shared.errors import NotFound
from shared.event_payloads import ApprovalWaiting
from shared.models import (
    Approval,
    ApprovalAction,
    ApprovalPoint,
    ApprovalStatus,
    Iteration,
    IterationStatus,
    Project,
    ProjectStatus,
    Task,
    TaskStatus,
    unfinished,
    utcnow,
)
from shared.project_config import ProjectConfig

# A project in one of these can have an approval decided (a paused or ended one cannot).
DECIDABLE = (ProjectStatus.RUNNING, ProjectStatus.WAITING_FOR_APPROVAL)


class ApprovalOut(BaseModel):
    """An approval as the API, the CLI and the MCP tools show it."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    project_id: str
    key: str
    point: ApprovalPoint
    title: str
    status: ApprovalStatus
    default_action: ApprovalAction
    deadline: datetime | None
    decided_by: str | None
    comment: str | None
    decided_at: datetime | None


def wait_for(
    out: Outbox,
    project: Project,
    config: ProjectConfig,
    point: ApprovalPoint,
    title: str,
    task: Task | None = None,
) -> Approval:
    """Wait for a person at ``point`` (a task's approval when ``task`` is given); the one already
    waiting there, if any. The project shows ``waiting_for_approval`` once nothing else runs."""
    base = f"task:{task.key}" if task is not None else point.value
    earlier = out.session.scalars(
        select(Approval).where(Approval.project_id == project.id, Approval.key.startswith(f"{base}#"))
    ).all()
    if waiting := [a for a in earlier if a.status == ApprovalStatus.WAITING]:
        return waiting[0]
    settings = config.approvals
    now = utcnow()
    approval = Approval(
        project_id=project.id,
        key=f"{base}#{len(earlier) + 1}",  # a rejected point waits again under the next number
        point=point,
        task_id=task.id if task is not None else None,
        title=title[:300],
        default_action=ApprovalAction(settings.default),
        deadline=now + timedelta(seconds=settings.deadline_s) if settings.deadline_s else None,
        approvers=settings.approvers,
        created_at=now,
    )
    out.session.add(approval)
    out.session.flush()
    out.event(
        project.id,
        ApprovalWaiting(
            approval_id=approval.id,
            point=point.value,
            title=approval.title,
            deadline=approval.deadline,
            default=settings.default,
        ),
    )
    hold_if_waiting(out, project)
    return approval


def hold_if_waiting(out: Outbox, project: Project) -> None:
    """A running project with an approval waiting and no task at work shows ``waiting_for_approval``."""
    if project.status != ProjectStatus.RUNNING:
        return
    waiting = first_waiting(out, project.id)
    if waiting is None:
        return
    if waiting.point == ApprovalPoint.SPEND:  # its tasks run on, held at admission: count iterations
        working = out.session.scalar(
            select(func.count())
            .select_from(Iteration)
            .where(
                Iteration.project_id == project.id,
                unfinished(),
                or_(Iteration.status == IterationStatus.RUNNING, Iteration.enqueued_at.is_not(None)),
            )
        )
    else:
        working = out.session.scalar(
            select(func.count())
            .select_from(Task)
            .where(
                Task.project_id == project.id,
                Task.status == TaskStatus.RUNNING,
                Task.kind != TaskKind.APPROVAL,
            )
        )
    if not working:
        project.status = ProjectStatus.WAITING_FOR_APPROVAL
        project.status_reason = f"waiting for approval: {waiting.title}"


def spend_waits(out: Outbox, project: Project, config: ProjectConfig, *, sending: bool, active: int) -> bool:
    """The spend point (``[approvals] spend_usd``): whether admission holds the project's next
    iterations back, waiting for a person to approve spending more.

    ``sending``: an iteration waits to be sent; ``active``: how many are in flight. Once the project
    has spent the threshold, the first admission that would send one writes the approval (once:
    :func:`wait_for` finds the one waiting); the project shows ``waiting_for_approval`` when
    nothing is in flight. Approved, it spends on without asking again; rejected, it has stopped.
    """
    threshold = config.approvals.spend_usd
    if threshold is None or not sending or project.spent_usd < threshold:
        return False
    approved = out.session.scalar(
        select(func.count())
        .select_from(Approval)
        .where(
            Approval.project_id == project.id,
            Approval.point == ApprovalPoint.SPEND,
            Approval.status == ApprovalStatus.APPROVED,
        )
    )
    if approved:
        return False
    spent, limit = project.spent_usd, project.budget_limit_usd
    title = f"spend more than ${threshold} (spent ${spent:.4f} of ${limit:.2f})"
    approval = wait_for(out, project, config, ApprovalPoint.SPEND, title)
    if not active and project.status == ProjectStatus.RUNNING:
        project.status = ProjectStatus.WAITING_FOR_APPROVAL
        project.status_reason = f"waiting for approval: {approval.title}"
    return True


def first_waiting(out: Outbox, project_id: str) -> Approval | None:
    return out.session.scalars(
        select(Approval)
        .where(Approval.project_id == project_id, Approval.status == ApprovalStatus.WAITING)
        .order_by(Approval.created_at, Approval.id)
    ).first()


def last_decided(out: Outbox, project_id: str) -> Approval | None:
    return out.session.scalars(
        select(Approval)
        .where(Approval.project_id == project_id, Approval.status != ApprovalStatus.WAITING)
        .order_by(Approval.decided_at.desc(), Approval.id)
    ).first()


def close(out: Outbox, approval: Approval, status: ApprovalStatus, by: str, comment: str | None) -> bool:
    """Decide the approval if it still waits: one conditional UPDATE, so of a person and the
    deadline (or two people) exactly one decides it. Returns whether this call did."""
    done = out.session.execute(
        update(Approval)
        .where(Approval.id == approval.id, Approval.status == ApprovalStatus.WAITING)
        .values(status=status, decided_by=by, comment=comment, decided_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    if done.rowcount != 1:  # type: ignore[attr-defined]
        return False
    out.session.refresh(approval)
    return True


class InboxItem(BaseModel):
    """A waiting approval as the dashboard's inbox lists it."""

    id: str
    project_id: str
    project: str
    key: str
    point: ApprovalPoint
    title: str
    default_action: ApprovalAction
    deadline: datetime | None
    created_at: datetime


def inbox(session: Session, tenant_id: str | None, limit: int = 200) -> list[InboxItem]:
    """The approvals waiting for a person in the tenant's projects (the cluster: everyone's), the
    soonest deadline first, then the oldest."""
    query = (
        select(Approval, Project.name)
        .join(Project, Project.id == Approval.project_id)
        .where(Approval.status == ApprovalStatus.WAITING, Project.status.in_(DECIDABLE))
        .order_by(Approval.deadline.is_(None), Approval.deadline, Approval.created_at, Approval.id)
        .limit(limit)
    )
    if tenant_id is not None:
        query = query.where(Project.tenant_id == tenant_id)
    return [
        InboxItem(
            id=a.id,
            project_id=a.project_id,
            project=name,
            key=a.key,
            point=a.point,
            title=a.title,
            default_action=a.default_action,
            deadline=a.deadline,
            created_at=a.created_at,
        )
        for a, name in session.execute(query).all()
    ]


def project_of(session: Session, approval_id: str) -> str:
    """The project an approval belongs to.

    Raises:
        NotFound: no such approval (a link to one whose project was deleted).
    """
    project_id = session.scalar(select(Approval.project_id).where(Approval.id == approval_id))
    if project_id is None:
        msg = f"no approval {approval_id}; its project may have been deleted"
        raise NotFound(msg)
    return project_id
