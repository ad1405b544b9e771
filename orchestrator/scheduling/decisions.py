"""Deciding an approval, and what the decision does (DESIGN.md rules 12, 13).

A person decides with ``raas approve ID [--reject] [-m TEXT]`` (the API, the MCP tool); an
approval whose deadline passed gets its default from the reconcile loop (:func:`apply_deadlines`).
Either way one conditional UPDATE (approvals.close) lets exactly one decision through, and what
it does is written in the same transaction:

- approved: a task approval completes and the DAG moves on; the plan's tasks start; the diff
  point completes the project, which delivers it;
- spend (``[approvals] spend_usd``): approved, admission sends what waits and asks no more;
  rejected, the project stops;
- rejected: the tasks the approval waited on go back to their builders, each told the comment;
  the approval waits again when they are done (a task approval with nothing before it fails
  the project); a rejected plan's tasks are dropped and the planner plans again;
- paused (a deadline's default): the project pauses; ``raas resume`` waits again.

A comment reaches the agents as a person's words at their next turn (shared.said), like
``raas say``. Deciding a project that waits for nothing is a Conflict naming the last decision:
approving twice is one approval.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import select

from orchestrator.scheduling import approvals, workflows
from orchestrator.scheduling.admission import pump, schedule
from orchestrator.scheduling.dispatch import Dispatcher
from orchestrator.scheduling.lookup import get_project_row
from orchestrator.scheduling.outbox import Outbox, transaction
from orchestrator.scheduling.transitions import end, pause
from shared import said
from shared.dag import TaskKind
from shared.errors import Conflict, InvalidInput
from shared.event_payloads import ApprovalDecided, ProjectCompleted, ProjectFailed, ProjectStopped
from shared.events import EventBus
from shared.iterations import fail_iteration
from shared.models import (
    AgentStatus,
    Approval,
    ApprovalAction,
    ApprovalPoint,
    ApprovalStatus,
    Iteration,
    IterationStatus,
    PauseReason,
    Project,
    ProjectStatus,
    Task,
    TaskStatus,
    unfinished,
)
from shared.project_config import ProjectConfig

log = logging.getLogger(__name__)
DEADLINE = "deadline"
_STATUS_OF = {
    ApprovalAction.APPROVE: ApprovalStatus.APPROVED,
    ApprovalAction.REJECT: ApprovalStatus.REJECTED,
    ApprovalAction.PAUSE: ApprovalStatus.PAUSED,
}
_DECIDABLE = approvals.DECIDABLE


def decide(
    project_id: str,
    *,
    approve: bool,
    comment: str | None,
    by: str,
    dispatcher: Dispatcher,
    bus: EventBus,
    approval_id: str | None = None,
) -> approvals.ApprovalOut:
    """A person approves or rejects what the project waits for (its oldest waiting approval, or
    ``approval_id``: the inbox's row, a signed link's).

    Raises:
        NotFound: no such project. InvalidInput: the comment.
        Conflict: it waits for no approval (the message names the last decision: a second
        approval changes nothing), or ``by`` is not among ``[approvals] approvers``.
    """
    if comment is not None and (len(comment) > said.SAID_CHARS or "\x00" in comment):
        msg = f"approve: give a comment of at most {said.SAID_CHARS} characters of plain text"
        raise InvalidInput(msg)
    with transaction(dispatcher, bus) as out:
        project = get_project_row(out.session, project_id, lock=True)
        approval = _waiting(out, project, approval_id)
        if approval is None:
            raise Conflict(_waits_for_nothing(out, project, approval_id))
        if approval.approvers and by not in approval.approvers:
            msg = f"only {', '.join(approval.approvers)} may decide {approval.key} of project {project_id}"
            raise Conflict(msg)
        status = ApprovalStatus.APPROVED if approve else ApprovalStatus.REJECTED
        _decide(out, project, approval, status, by, comment or None)
        return approvals.ApprovalOut.model_validate(approval)


def _waiting(out: Outbox, project: Project, approval_id: str | None) -> Approval | None:
    if project.status not in _DECIDABLE:
        return None
    if approval_id is None:
        return approvals.first_waiting(out, project.id)
    approval = out.session.get(Approval, approval_id)
    if approval is None or approval.project_id != project.id:
        return None
    return approval if approval.status == ApprovalStatus.WAITING else None


def _waits_for_nothing(out: Outbox, project: Project, approval_id: str | None = None) -> str:
    named = out.session.get(Approval, approval_id) if approval_id is not None else None
    if named is not None and named.project_id == project.id and named.status != ApprovalStatus.WAITING:
        return f"{named.key} of project {project.id} was {named.status.value} by {named.decided_by} already"
    msg = f"project {project.id} waits for no approval ({project.status.value})"
    last = approvals.last_decided(out, project.id)
    if last is not None:
        msg += f"; {last.key} was {last.status.value} by {last.decided_by}"
    return msg


def apply_deadlines(now: datetime, dispatcher: Dispatcher, bus: EventBus) -> list[str]:
    """The reconcile loop's part: every waiting approval past its deadline gets its default,
    once (the conditional UPDATE); returns the ids it decided."""
    with transaction(dispatcher, bus) as out:
        due = out.session.execute(
            select(Approval.id, Approval.project_id)
            .join(Project, Project.id == Approval.project_id)
            .where(
                Approval.status == ApprovalStatus.WAITING,
                Approval.deadline <= now,
                Project.status.in_(_DECIDABLE),
            )
        ).all()
    decided = []
    for approval_id, project_id in due:
        with transaction(dispatcher, bus) as out:
            project = get_project_row(out.session, project_id, lock=True)
            approval = out.session.get_one(Approval, approval_id)
            if project.status in _DECIDABLE and _decide(
                out, project, approval, _STATUS_OF[approval.default_action], DEADLINE, None
            ):
                decided.append(approval_id)
    return decided


def _decide(
    out: Outbox, project: Project, approval: Approval, status: ApprovalStatus, by: str, comment: str | None
) -> bool:
    if not approvals.close(out, approval, status, by, comment):
        log.info("approval %s was decided already", approval.id)
        return False
    out.event(
        project.id,
        ApprovalDecided(approval_id=approval.id, decision=status.value, by=by, comment=comment),
    )
    config = ProjectConfig.model_validate(project.config)
    if status == ApprovalStatus.PAUSED:
        pause(out, project, PauseReason.APPROVAL, f"{approval.title}: no decision by its deadline")
        return True
    project.status, project.status_reason = ProjectStatus.RUNNING, None
    out.defer_pump = True
    if status == ApprovalStatus.APPROVED:
        _approved(out, project, config, approval)
    else:
        _rejected(out, project, config, approval)
    if project.status == ProjectStatus.RUNNING:
        pump(out, project, config)
        approvals.hold_if_waiting(out, project)
    return True


def _approved(out: Outbox, project: Project, config: ProjectConfig, approval: Approval) -> None:
    if approval.point == ApprovalPoint.DIFF:
        tasks = out.session.scalars(select(Task).where(Task.project_id == project.id)).all()
        end(out, project, ProjectCompleted(tasks=len(tasks)))
        return
    if approval.point == ApprovalPoint.SPEND:  # admission sends what waits, and asks no more
        if approval.comment:
            _tell(out, project, approval.comment, f"{approval.decided_by} (approving the spending)", None)
        return
    if approval.point == ApprovalPoint.PLAN:
        if approval.comment:
            _tell(out, project, approval.comment, f"{approval.decided_by} (approving the plan)", None)
        workflows.start_ready_tasks(out, project, config)
        return
    task = out.session.get_one(Task, approval.task_id)
    task.status = TaskStatus.COMPLETED
    if approval.comment:  # for the agents that start now
        _tell(out, project, approval.comment, f"{approval.decided_by} (approving {task.key})", None)
    workflows.start_ready_tasks(out, project, config)


def _rejected(out: Outbox, project: Project, config: ProjectConfig, approval: Approval) -> None:
    if approval.point == ApprovalPoint.SPEND:  # no more money: the project stops, its work delivered
        reason = f"{approval.title}: rejected by {approval.decided_by}"
        reason += f": {approval.comment}" if approval.comment else ""
        end(out, project, ProjectStopped(reason=reason))
        _drop_queued(out, project.id)
        return
    tasks = {t.key: t for t in out.session.scalars(select(Task).where(Task.project_id == project.id))}
    if approval.point == ApprovalPoint.PLAN:  # its tasks go; the planner plans again
        for task in tasks.values():
            if task.key != workflows.PLAN_TASK:
                out.session.delete(task)
        _send_back(out, project, config, tasks[workflows.PLAN_TASK], approval)
        return
    if approval.point == ApprovalPoint.DIFF:
        depended = {dep for t in tasks.values() for dep in t.depends_on}
        before, where = [t for t in tasks.values() if t.key not in depended], approval.point.value
    else:
        own = out.session.get_one(Task, approval.task_id)
        own.status = TaskStatus.PENDING
        before, where = [tasks[key] for key in own.depends_on], own.key
    work = _work_behind([t for t in before if t.key != workflows.PLAN_TASK], tasks)
    if not work:
        reason = f"{approval.title}: rejected by {approval.decided_by}"
        reason += f": {approval.comment}" if approval.comment else ""
        end(out, project, ProjectFailed(reason=reason, task=where))
        return
    for task in work:
        _send_back(out, project, config, task, approval)


def _drop_queued(out: Outbox, project_id: str) -> None:
    """The iterations held back for the spend approval never run (as ``raas stop`` drops them)."""
    queued = out.session.scalars(
        select(Iteration.id).where(
            Iteration.project_id == project_id, unfinished(), Iteration.status == IterationStatus.QUEUED
        )
    ).all()
    for iteration_id in queued:
        fail_iteration(out.session, iteration_id, "spending more was rejected", advanced=True)


def _work_behind(tasks: list[Task], by_key: dict[str, Task]) -> list[Task]:
    """The work tasks among ``tasks``, or behind the group and approval tasks among them (those
    are done again once the work is)."""
    found: dict[str, Task] = {}
    stack = list(tasks)
    while stack:
        task = stack.pop()
        if task.kind == TaskKind.WORK:
            found[task.key] = task
            continue
        task.status = TaskStatus.PENDING
        stack.extend(by_key[key] for key in task.depends_on)
    return list(found.values())


def _send_back(out: Outbox, project: Project, config: ProjectConfig, task: Task, approval: Approval) -> None:
    """The task's builder works on, told why."""
    task.status = TaskStatus.RUNNING
    builder = workflows.builder_of(out, config, task.id)
    builder.status = AgentStatus.IDLE
    words = f"{approval.title} was rejected; work on and complete the task again.\n{approval.comment or ''}"
    _tell(out, project, words.strip(), f"{approval.decided_by} (rejecting)", builder.id)
    schedule(out, project, config, builder.id, builder.iterations + 1)


def _tell(out: Outbox, project: Project, text: str, author: str, agent_id: str | None) -> None:
    """The decision's words, read by the agent at its next turn as a person's (``raas say``)."""
    _, event = said.say(out.session, project, text, author=author, agent_id=agent_id)
    out.events.append(event)
