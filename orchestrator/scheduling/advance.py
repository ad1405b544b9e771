"""Advancing a project when an iteration reports back: the next iteration, or the end.

Advancing is idempotent: the iteration row remembers that it was acted on, under the
project's row lock, so a report delivered twice (at-least-once) advances the project once.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy import bindparam, or_, select
from sqlalchemy.orm import Session, aliased

from orchestrator.scheduling import workflows, workspace
from orchestrator.scheduling.admission import breaker_trips, pump, schedule
from orchestrator.scheduling.deliveries import deliver_late_work
from orchestrator.scheduling.dispatch import Dispatcher
from orchestrator.scheduling.lookup import FINISHED_AGENT, get_project_row, waiting_for_children
from orchestrator.scheduling.outbox import Outbox, transaction
from orchestrator.scheduling.transitions import end, pause, pause_for_budget
from orchestrator.workspaces import WorkspaceStore
from shared.categories import Role
from shared.db import session_scope
from shared.errors import Conflict, NotFound
from shared.event_payloads import ApiKeyRequired, ProjectFailed, TaskValidated
from shared.events import EventBus
from shared.models import (
    Agent,
    AgentStatus,
    ErrorKind,
    Iteration,
    IterationStatus,
    PauseReason,
    Project,
    ProjectStatus,
    Task,
    TaskStatus,
)
from shared.project_config import ProjectConfig

log = logging.getLogger(__name__)


_CHILD = aliased(Agent)
# The finished iteration, its agent, and whether that agent has subagents to start or wait
# for, in one query. Read after the project's row is locked, by a statement of its own: rows
# joined to a locking query keep the versions from before its wait for the lock.
_FINISHED_ITERATION = (
    select(
        Iteration,
        Agent,
        select(_CHILD.id)
        .where(
            _CHILD.parent_id == Agent.id,
            or_(_CHILD.spawned_by == Iteration.id, _CHILD.status.not_in(FINISHED_AGENT)),
        )
        .exists(),
    )
    .join(Agent, Agent.id == Iteration.agent_id)
    # By its key alone: with the project's id beside it, Postgres may also read the project's
    # whole history from ix_iterations_project_id (a BitmapAnd) to confirm what the key says.
    .where(Iteration.id == bindparam("iteration_id"))
)


def advance(project_id: str, iteration_id: str, dispatcher: Dispatcher, bus: EventBus) -> None:
    """Act on a finished iteration: complete, fail or pause the project, or schedule what is next."""
    with transaction(dispatcher, bus) as out:
        project = get_project_row(out.session, project_id, lock=True)
        found = out.session.execute(_FINISHED_ITERATION, {"iteration_id": iteration_id}).one_or_none()
        if (
            found is None
            or found[0].project_id != project_id
            or found[0].advanced
            or not found[0].status.is_finished
        ):
            log.info("advance %s/%s: nothing to do", project_id, iteration_id)
            return
        iteration, agent, children = found
        iteration.advanced = True
        if project.status != ProjectStatus.RUNNING:
            return
        config = ProjectConfig.model_validate(project.config)
        out.defer_pump = True  # one pump at the end, whatever _decide schedules
        _decide(out, project, config, iteration, agent, children=children)
        if project.status == ProjectStatus.RUNNING:
            pump(out, project, config)


def _decide(
    out: Outbox,
    project: Project,
    config: ProjectConfig,
    iteration: Iteration,
    agent: Agent,
    *,
    children: bool,
) -> None:
    if iteration.error_kind == ErrorKind.API_KEY:
        pause(out, project, PauseReason.API_KEY_REQUIRED, iteration.error or "the API key was rejected")
        out.event(project.id, ApiKeyRequired(error=iteration.error), iteration_id=iteration.id)
        return
    if iteration.error_kind == ErrorKind.BUDGET:
        pause_for_budget(out, project)
        return
    if iteration.error_kind == ErrorKind.ENVIRONMENT:  # no later iteration would do better
        end(
            out,
            project,
            ProjectFailed(reason=iteration.error or "environment failed", task=_task_of(out, agent).key),
        )
        return
    if children:
        spawned = out.session.scalars(select(Agent.id).where(Agent.spawned_by == iteration.id))
        for child_id in spawned.all():
            schedule(out, project, config, child_id, 1)
        agent.status = AgentStatus.BLOCKED  # its next iteration starts when its subagents are done
    elif agent.parent_id is not None:
        _subagent_iteration_done(out, project, config, agent, iteration)
    else:
        _root_iteration_done(out, project, config, agent, iteration)


def _root_iteration_done(
    out: Outbox, project: Project, config: ProjectConfig, agent: Agent, iteration: Iteration
) -> None:
    threshold = config.completion_threshold
    role = config.role_of(agent.category)
    if role is Role.VALIDATOR and config.check_command:
        _validated(out, project, config, agent, _task_of(out, agent), iteration)
    elif workflows.reviewed(out, project, config, agent, iteration):
        return  # dialectic: a reviewer reads the iteration before the builder goes on
    elif iteration.completed_task and _completion_confirmed(out.session, agent.id, threshold):
        agent.status = AgentStatus.COMPLETED
        task = _task_of(out, agent)
        if role is Role.PLANNER:
            task.status = TaskStatus.COMPLETED
            workflows.accept_plan(out, project, config, iteration.summary or "")
        elif workflows.gated(config):
            workflows.start_validation(out, project, config, task)
        else:
            workflows.complete_task(out, project, config, task)
    elif iteration.number >= config.max_iterations:
        task = _task_of(out, agent)
        reason = f"task {task.key!r}: max_iterations ({config.max_iterations}) reached without task_complete"
        agent.status, task.status = AgentStatus.ERROR, TaskStatus.FAILED
        end(out, project, ProjectFailed(reason=reason, task=task.key))
    elif not breaker_trips(out, project, iteration, config):
        agent.status = AgentStatus.IDLE
        schedule(out, project, config, agent.id, iteration.number + 1)


def _task_of(out: Outbox, agent: Agent) -> Task:
    return out.session.get_one(Task, agent.task_id)


def _validated(
    out: Outbox, project: Project, config: ProjectConfig, validator: Agent, task: Task, iteration: Iteration
) -> None:
    """The validator gate: a pass completes the task, a failure sends it back with the output."""
    out.event(
        project.id,
        TaskValidated(task=task.key, passed=iteration.completed_task),
        agent_id=validator.id,
        iteration_id=iteration.id,
    )
    if iteration.completed_task:
        task.feedback = None
        workflows.complete_task(out, project, config, task)
        return
    task.feedback = iteration.summary or iteration.error or "the check command failed"
    validator.status = AgentStatus.IDLE
    builder = workflows.builder_of(out, config, task.id)
    if builder.iterations >= config.max_iterations:
        reason = f"task {task.key!r}: still failing its check after {builder.iterations} iterations"
        task.status = TaskStatus.FAILED
        end(out, project, ProjectFailed(reason=reason, task=task.key))
        return
    builder.status = AgentStatus.IDLE
    schedule(out, project, config, builder.id, builder.iterations + 1)


def _subagent_iteration_done(
    out: Outbox, project: Project, config: ProjectConfig, agent: Agent, iteration: Iteration
) -> None:
    # A parallel subagent's one iteration is its whole job; others loop until task_complete.
    done = (
        iteration.completed_task
        or agent.parallel
        or iteration.status == IterationStatus.FAILED
        or iteration.number >= config.subagent_max_iterations
    )
    if not done:
        schedule(out, project, config, agent.id, iteration.number + 1)
        return
    agent.status = AgentStatus.ERROR if iteration.status == IterationStatus.FAILED else AgentStatus.COMPLETED
    agent.report = iteration.summary or iteration.error or "(the subagent gave no report)"
    parent = out.session.get_one(Agent, agent.parent_id)
    if parent.status == AgentStatus.BLOCKED and not waiting_for_children(out.session, parent.id):
        parent.status = AgentStatus.IDLE
        schedule(out, project, config, parent.id, parent.iterations + 1)


def _completion_confirmed(session: Session, agent_id: str, threshold: int) -> bool:
    """Whether the agent's latest ``threshold`` finished iterations all completed the task.

    Reads at most ``threshold`` rows, however long the agent's history.
    """
    flags = session.scalars(
        select(Iteration.completed_task)
        .where(
            Iteration.agent_id == agent_id,
            Iteration.status.in_([IterationStatus.SUCCEEDED, IterationStatus.FAILED]),
        )
        .order_by(Iteration.number.desc())
        .limit(threshold)
    ).all()
    return len(flags) == threshold and all(flags)


def accept_workspace(
    store: WorkspaceStore,
    project_id: str,
    iteration_id: str,
    attempt: int,
    base_sha: str,
    bundle: Path,
    *,
    dispatcher: Dispatcher,
    bus: EventBus,
) -> tuple[str, list[str]]:
    """Take a running iteration's commits into the project's workspace (DESIGN.md rule 7); commits
    that come after the run ended are delivered in a new round (work is never lost, rule 10)."""
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
    with store.write(project_id) as bare:
        sha, files = workspace.accept_bundle(bare, iteration_id, base_sha, bundle)
    with transaction(dispatcher, bus) as out:
        project = get_project_row(out.session, project_id, lock=True)
        moved = project.workspace_sha != sha
        project.workspace_sha = sha
        if moved:
            deliver_late_work(out, project)
    return sha, files
