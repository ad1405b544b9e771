"""Pausing, resuming, stopping a project and changing its prompt while it runs.

Workers look at the project's status between LLM calls: a paused or stopped project's running
iterations finish their current call, commit what they did and end.
"""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import select

from orchestrator.scheduling import approvals
from orchestrator.scheduling.admission import pump, schedule
from orchestrator.scheduling.breaker import Breaker, may_run, reset
from orchestrator.scheduling.dispatch import Dispatcher
from orchestrator.scheduling.lookup import get_project_row, waiting_for_children
from orchestrator.scheduling.outbox import Outbox, transaction
from orchestrator.scheduling.prompt import check_prompt
from orchestrator.scheduling.transitions import end, pause
from shared import budget
from shared.categories import Role
from shared.errors import Conflict, InvalidInput
from shared.event_payloads import BudgetChanged, ProjectResumed, ProjectStopped, PromptUpdated
from shared.events import EventBus
from shared.iterations import fail_iteration
from shared.models import (
    Agent,
    AgentStatus,
    Approval,
    ApprovalStatus,
    Iteration,
    IterationStatus,
    PauseReason,
    Project,
    ProjectStatus,
    Task,
    TaskStatus,
    unfinished,
    utcnow,
)
from shared.project_config import ProjectConfig
from shared.schemas import ProjectOut


def _require(project: Project, allowed: tuple[ProjectStatus, ...], verb: str) -> None:
    if project.status not in allowed:
        names = " or ".join(s.value for s in allowed)
        msg = f"project {project.id} is {project.status.value}; only a {names} project can be {verb}"
        raise Conflict(msg)


def pause_project(project_id: str, dispatcher: Dispatcher, bus: EventBus) -> ProjectOut:
    with transaction(dispatcher, bus) as out:
        project = get_project_row(out.session, project_id, lock=True)
        _require(project, (ProjectStatus.RUNNING,), "paused")
        pause(out, project, PauseReason.USER, "paused by the user")
        return ProjectOut.model_validate(project)


def resume_project(project_id: str, dispatcher: Dispatcher, bus: EventBus) -> ProjectOut:
    """Run a paused project again (a user's reset of the circuit breaker, too)."""
    with transaction(dispatcher, bus) as out:
        project = get_project_row(out.session, project_id, lock=True)
        _require(project, (ProjectStatus.PAUSED,), "resumed")
        if project.breaker:
            project.breaker = reset(Breaker.model_validate(project.breaker), utcnow()).model_dump(mode="json")
        if project.pause_reason == PauseReason.APPROVAL:
            _wait_again(out, project)
        else:
            reopen(out, project, "user")
        return ProjectOut.model_validate(project)


def _wait_again(out: Outbox, project: Project) -> None:
    """A project paused at an approval's deadline waits for it again, with a new deadline."""
    paused = out.session.scalars(
        select(Approval)
        .where(Approval.project_id == project.id, Approval.status == ApprovalStatus.PAUSED)
        .order_by(Approval.decided_at.desc())
    ).first()
    project.status, project.status_reason, project.pause_reason = ProjectStatus.RUNNING, None, None
    out.event(project.id, ProjectResumed(by="user"))
    if paused is None:  # nothing to wait for any more: carry on
        _continue_idle_agents(out, project)
        return
    task = out.session.get(Task, paused.task_id) if paused.task_id else None
    approvals.wait_for(
        out, project, ProjectConfig.model_validate(project.config), paused.point, paused.title, task
    )


def reopen(out: Outbox, project: Project, why: str, *, trial: bool = False) -> None:
    """Set a paused project running and give its idle agents their next iteration."""
    project.status = ProjectStatus.RUNNING
    project.status_reason = None
    project.pause_reason = None
    out.event(project.id, ProjectResumed(by=why))
    _continue_idle_agents(out, project, trial=trial)


def set_budget(project_id: str, limit_usd: Decimal, dispatcher: Dispatcher, bus: EventBus) -> ProjectOut:
    """Change the limit; a project paused for its budget resumes if the new limit leaves room."""
    if not limit_usd.is_finite() or limit_usd < 0 or limit_usd > budget.MAX_LIMIT_USD:
        highest = budget.MAX_LIMIT_USD
        msg = f"budget limit {limit_usd} is not a positive amount of USD up to {highest}; try --limit 10"
        raise InvalidInput(msg)
    with transaction(dispatcher, bus) as out:
        project = get_project_row(out.session, project_id, lock=True)
        _require(
            project, (ProjectStatus.CREATED, ProjectStatus.RUNNING, ProjectStatus.PAUSED), "given a budget"
        )
        project.budget_limit_usd = limit_usd
        project.budget_warned = False
        out.event(project.id, BudgetChanged(limit_usd=limit_usd))
        if (
            project.pause_reason == PauseReason.BUDGET_EXCEEDED
            and project.status == ProjectStatus.PAUSED
            and budget.remaining_usd(out.session, project_id) > 0
        ):
            reopen(out, project, "budget")
        return ProjectOut.model_validate(project)


def _continue_idle_agents(out: Outbox, project: Project, *, trial: bool = False) -> None:
    """Give every agent that was cut short its next iteration, then send what waits."""
    config = ProjectConfig.model_validate(project.config)
    agents = out.session.scalars(
        select(Agent)
        .where(
            Agent.project_id == project.id,
            Agent.status != AgentStatus.COMPLETED,
            Agent.category.not_in(config.categories_in(Role.VALIDATOR)),
        )
        .order_by(Agent.created_at)
    ).all()
    # One bounded read of what is already queued or running (not each agent's whole history).
    pending = set(
        out.session.scalars(
            select(Iteration.agent_id).where(Iteration.project_id == project.id, unfinished())
        )
    )
    for agent in agents:
        if agent.id in pending or not _needs_iteration(out, agent):
            continue
        agent.status = AgentStatus.IDLE
        if not schedule(out, project, config, agent.id, agent.iterations + 1, trial=trial) or trial:
            break  # paused again, or the half-open breaker's one trial is on its way
    if project.status == ProjectStatus.RUNNING:
        pump(out, project, config)


def _needs_iteration(out: Outbox, agent: Agent) -> bool:
    """No subagent still working, and its task not finished."""
    if agent.task_id is not None:
        task = out.session.get(Task, agent.task_id)
        if task is not None and task.status in (TaskStatus.COMPLETED, TaskStatus.FAILED):
            return False
    return not waiting_for_children(out.session, agent.id)


def stop_project(project_id: str, dispatcher: Dispatcher, bus: EventBus) -> ProjectOut:
    """End a project for good; the reconcile loop terminates iterations still running after 30 s."""
    with transaction(dispatcher, bus) as out:
        project = get_project_row(out.session, project_id, lock=True)
        stoppable = (ProjectStatus.CREATED, ProjectStatus.RUNNING, ProjectStatus.PAUSED)
        _require(project, (*stoppable, ProjectStatus.WAITING_FOR_APPROVAL), "stopped")
        end(out, project, ProjectStopped(reason="stopped by the user"))
        for iteration_id in out.session.scalars(
            select(Iteration.id).where(
                Iteration.project_id == project_id, unfinished(), Iteration.status == IterationStatus.QUEUED
            )
        ).all():
            # It never runs, so no worker gives back what was reserved for its first call.
            fail_iteration(out.session, iteration_id, "project stopped before it ran", advanced=True)
        return ProjectOut.model_validate(project)


def set_prompt(project_id: str, prompt: str, dispatcher: Dispatcher, bus: EventBus) -> ProjectOut:
    """Replace PROMPT.md; the next iteration to start reads the new text."""
    check_prompt(prompt, "the new PROMPT.md")
    with transaction(dispatcher, bus) as out:
        project = get_project_row(out.session, project_id, lock=True)
        _require(
            project,
            (ProjectStatus.CREATED, ProjectStatus.RUNNING, ProjectStatus.PAUSED),
            "given a new prompt",
        )
        project.prompt = prompt
        out.event(project.id, PromptUpdated(chars=len(prompt)))
        return ProjectOut.model_validate(project)


def try_half_open(out: Outbox, project: Project) -> bool:
    """A project paused by its breaker: after the cooldown, let one trial iteration through."""
    if not project.breaker:
        return False
    config = ProjectConfig.model_validate(project.config)
    state, allowed = may_run(Breaker.model_validate(project.breaker), config.circuit_breaker, utcnow())
    if not allowed:
        return False
    project.breaker = state.model_dump(mode="json")
    reopen(out, project, "half_open", trial=True)
    return True
