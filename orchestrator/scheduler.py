"""Advancing a project when an iteration reports back: the next iteration, or the end.

Advancing is idempotent: the iteration row remembers that it was acted on, under the
project's row lock, so a report delivered twice (at-least-once) advances the project once.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator import workspace
from orchestrator.breaker import Breaker, IterationReport, Trip, check_timeout, may_run, record
from orchestrator.dispatch import Dispatcher
from orchestrator.lookup import get_project_row
from orchestrator.outbox import Outbox, transaction
from shared import budget, events
from shared.db import session_scope
from shared.errors import Conflict, NotFound
from shared.events import EventBus
from shared.models import (
    Agent,
    AgentStatus,
    ErrorKind,
    Iteration,
    IterationStatus,
    Project,
    ProjectStatus,
    Task,
    TaskStatus,
    utcnow,
)
from shared.pricing import find_price
from shared.project_config import ProjectConfig

log = logging.getLogger(__name__)


def advance(project_id: str, iteration_id: str, dispatcher: Dispatcher, bus: EventBus) -> None:
    """Act on a finished iteration: complete, fail or pause the project, or enqueue the next one."""
    with transaction(dispatcher, bus) as out:
        project = get_project_row(out.session, project_id, lock=True)
        iteration = out.session.get(Iteration, iteration_id)
        if iteration is None or iteration.advanced or not iteration.status.is_finished:
            log.info("advance %s/%s: nothing to do", project_id, iteration_id)
            return
        iteration.advanced = True
        if project.status == ProjectStatus.RUNNING:
            _decide(out, project, iteration)


def _decide(out: Outbox, project: Project, iteration: Iteration) -> None:
    config = ProjectConfig.model_validate(project.config)
    agent = out.session.get_one(Agent, iteration.agent_id)
    if iteration.error_kind == ErrorKind.API_KEY:
        pause(out, project, "api_key_required", iteration.error or "the API key was rejected")
        out.event(project.id, events.API_KEY_REQUIRED, {"error": iteration.error}, iteration_id=iteration.id)
    elif iteration.error_kind == ErrorKind.BUDGET:
        pause_for_budget(out, project)
    elif (
        iteration.completed_task and _completing_streak(out.session, agent.id) >= config.completion_threshold
    ):
        _finish_agent(out.session, agent, TaskStatus.COMPLETED)
        end(
            out,
            project,
            ProjectStatus.COMPLETED,
            None,
            {"summary": iteration.summary, "iterations": iteration.number},
        )
    elif iteration.number >= config.max_iterations:
        reason = f"max_iterations ({config.max_iterations}) reached without task_complete"
        _finish_agent(out.session, agent, TaskStatus.FAILED)
        end(out, project, ProjectStatus.FAILED, reason, {"reason": reason})
    elif not _breaker_trips(out, project, iteration, config):
        schedule(out, project, config, agent.id, iteration.number + 1)


def schedule(
    out: Outbox, project: Project, config: ProjectConfig, agent_id: str, number: int, *, trial: bool = False
) -> bool:
    """Enqueue an agent's next iteration if the breaker and the budget allow it (else pause).

    ``trial`` is the half-open breaker's one iteration, already let through by ``may_run``.
    """
    if not trial and not _breaker_allows(out, project, config):
        return False
    iteration = out.new_iteration(project.id, agent_id, number)
    price = find_price(config.model, config.pricing)
    assert price is not None  # raas.toml validation refuses unpriced models
    estimate = budget.call_estimate_usd(price, budget.DEFAULT_INPUT_TOKENS, config.max_tokens)
    if not budget.reserve(out.session, project.id, iteration.id, estimate):
        out.session.delete(iteration)
        pause_for_budget(out, project)
        return False
    out.enqueue(project.id, iteration)
    return True


def _breaker_allows(out: Outbox, project: Project, config: ProjectConfig) -> bool:
    now = utcnow()
    state, trip = check_timeout(_breaker(project), project.started_at or now, config.circuit_breaker, now)
    state, allowed = may_run(state, config.circuit_breaker, now)
    project.breaker = state.model_dump(mode="json")
    if trip is not None:
        pause_for_breaker(out, project, trip)
        return False
    if not allowed:
        pause(out, project, "circuit_breaker", state.reason or "the circuit breaker is open")
    return allowed


def _breaker(project: Project) -> Breaker:
    return Breaker.model_validate(project.breaker) if project.breaker else Breaker()


def _breaker_trips(out: Outbox, project: Project, iteration: Iteration, config: ProjectConfig) -> bool:
    report = IterationReport(
        failed=iteration.status == IterationStatus.FAILED,
        error=iteration.error,
        progress=bool(iteration.files_changed),
    )
    state, trip = record(_breaker(project), report, config.circuit_breaker, utcnow())
    project.breaker = state.model_dump(mode="json")
    if trip is not None:
        pause_for_breaker(out, project, trip)
    return trip is not None


def pause_for_breaker(out: Outbox, project: Project, trip: Trip) -> None:
    out.event(project.id, events.CIRCUIT_BREAKER_TRIGGERED, trip.model_dump(mode="json"))
    pause(out, project, "circuit_breaker", trip.message)


def pause_for_budget(out: Outbox, project: Project) -> None:
    data = {"spent_usd": str(project.spent_usd), "limit_usd": str(project.budget_limit_usd)}
    out.event(project.id, events.BUDGET_EXCEEDED, data)
    pause(
        out, project, "budget_exceeded", f"spent ${project.spent_usd:.4f} of ${project.budget_limit_usd:.2f}"
    )


def _completing_streak(session: Session, agent_id: str) -> int:
    """How many of the agent's latest finished iterations, in a row, completed the task."""
    flags = session.scalars(
        select(Iteration.completed_task)
        .where(
            Iteration.agent_id == agent_id,
            Iteration.status.in_([IterationStatus.SUCCEEDED, IterationStatus.FAILED]),
        )
        .order_by(Iteration.number.desc())
    )
    streak = 0
    for completed in flags:
        if not completed:
            break
        streak += 1
    return streak


def _finish_agent(session: Session, agent: Agent, task_status: TaskStatus) -> None:
    agent.status = AgentStatus.COMPLETED if task_status == TaskStatus.COMPLETED else AgentStatus.ERROR
    task = session.get(Task, agent.task_id) if agent.task_id else None
    if task is not None:
        task.status = task_status


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


def accept_workspace(
    workspaces_dir: Path, project_id: str, iteration_id: str, attempt: int, base_sha: str, bundle: Path
) -> tuple[str, list[str]]:
    """Take a running iteration's commits into the project's workspace (DESIGN.md rule 7)."""
    with session_scope() as session:
        get_project_row(session, project_id)
        iteration = session.get(Iteration, iteration_id)
        if iteration is None or iteration.project_id != project_id:
            msg = f"no iteration {iteration_id!r} in project {project_id}"
            raise NotFound(msg)
        if iteration.status != IterationStatus.RUNNING or iteration.attempt != attempt:
            msg = (
                f"iteration {iteration_id} attempt {attempt} is not the running attempt; its push is refused"
            )
            raise Conflict(msg)
    sha, files = workspace.accept_bundle(workspaces_dir, project_id, iteration_id, base_sha, bundle)
    with session_scope() as session:
        project = get_project_row(session, project_id, lock=True)
        project.workspace_sha = sha
    return sha, files
