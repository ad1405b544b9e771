"""Advancing a project when an iteration reports back: the next iteration, or the end.

Advancing is idempotent: the iteration row remembers that it was acted on, under the
project's row lock, so a report delivered twice (at-least-once) advances the project once.
"""

from __future__ import annotations

import logging
from pathlib import Path

from orchestrator import workspace
from orchestrator.dispatch import Dispatcher
from orchestrator.projects import get_project_row
from shared import events
from shared.db import session_scope
from shared.errors import Conflict, NotFound
from shared.events import EventBus
from shared.models import (
    Agent,
    AgentStatus,
    Iteration,
    IterationStatus,
    Project,
    ProjectStatus,
    Task,
    TaskStatus,
    utcnow,
)
from shared.project_config import ProjectConfig
from shared.schemas import EventOut

log = logging.getLogger(__name__)


def advance(project_id: str, iteration_id: str, dispatcher: Dispatcher, bus: EventBus) -> None:
    """Act on a finished iteration: complete or fail the project, or enqueue the next iteration."""
    next_iteration: str | None = None
    recorded: list[EventOut] = []
    with session_scope() as session:
        project = get_project_row(session, project_id, lock=True)
        iteration = session.get(Iteration, iteration_id)
        if iteration is None or iteration.advanced or not iteration.status.is_finished:
            log.info("advance %s/%s: nothing to do", project_id, iteration_id)
            return
        iteration.advanced = True
        if project.status != ProjectStatus.RUNNING:
            return
        config = ProjectConfig.model_validate(project.config)
        agent = session.get_one(Agent, iteration.agent_id)
        task = session.get(Task, agent.task_id) if agent.task_id else None
        if iteration.completed_task:
            agent.status = AgentStatus.COMPLETED
            if task is not None:
                task.status = TaskStatus.COMPLETED
            _set_end(project, ProjectStatus.COMPLETED, None)
            recorded.append(
                events.record(
                    session,
                    project_id,
                    events.PROJECT_COMPLETED,
                    {"summary": iteration.summary, "iterations": iteration.number},
                )
            )
        elif iteration.number >= config.max_iterations:
            reason = f"max_iterations ({config.max_iterations}) reached without task_complete"
            agent.status = AgentStatus.ERROR
            if task is not None:
                task.status = TaskStatus.FAILED
            _set_end(project, ProjectStatus.FAILED, reason)
            recorded.append(events.record(session, project_id, events.PROJECT_FAILED, {"reason": reason}))
        else:
            nxt = Iteration(
                project_id=project_id, agent_id=agent.id, number=iteration.number + 1, created_at=utcnow()
            )
            session.add(nxt)
            session.flush()
            next_iteration = nxt.id
    for event in recorded:
        bus.publish(event)
    if next_iteration is not None:
        dispatcher.enqueue_iteration(project_id, next_iteration)


def _set_end(project: Project, status: ProjectStatus, reason: str | None) -> None:
    project.status = status
    project.status_reason = reason
    project.finished_at = utcnow()


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
