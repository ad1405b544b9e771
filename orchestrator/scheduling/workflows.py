"""How a project becomes tasks, agents and iterations — and how a task moves on.

``ralph``: each task is one builder looping until it calls task_complete. ``pipeline``: each task
starts with parallel research subagents, then its builder loops with their reports, then the
validator runs the project's check command; a failed check sends the task back to the builder
with the output. ``planned``: a planner writes the task graph first, then the tasks run as in
``ralph``. ``dialectic``: after a builder's iteration a reviewer (another model, fresh context,
read-only tools) criticises it and the builder's next iteration opens with the critique, for at
most ``[dialectic] review_rounds`` rounds; ``check_command`` gates the task as in ``pipeline``
(:mod:`shared.dialectic`). Tasks start when the tasks they depend on have completed (the DAG's
waves).
"""

from __future__ import annotations

from sqlalchemy import func, select

from orchestrator.scheduling import approvals, workspace
from orchestrator.scheduling.admission import breaker_trips, schedule
from orchestrator.scheduling.deliveries import deliver_task
from orchestrator.scheduling.outbox import Outbox
from orchestrator.scheduling.transitions import end
from orchestrator.workspaces import get_store
from shared import dag
from shared.categories import Role
from shared.dag import Plan, TaskKind, TaskSpec
from shared.dialectic import ROTATED_BUILDER, ROTATED_REVIEWER, review_request
from shared.errors import GitError
from shared.event_payloads import ProjectCompleted
from shared.models import (
    Agent,
    AgentStatus,
    ApprovalPoint,
    Iteration,
    IterationStatus,
    Project,
    Task,
    TaskStatus,
    utcnow,
)
from shared.project_config import ProjectConfig
from shared.settings import get_settings

PLAN_TASK = "plan"


def task_text(task: Task) -> str:
    return f"{task.title}\n{task.description}".strip()


def new_agent(out: Outbox, project: Project, config: ProjectConfig, category: str, **fields: object) -> Agent:
    agent = Agent(
        project_id=project.id,
        category=category,
        parallel=config.category(category).parallel,
        created_at=utcnow(),
        **fields,
    )
    out.session.add(agent)
    out.session.flush()
    return agent


def expand(out: Outbox, project: Project, config: ProjectConfig) -> None:
    """Turn a just-started project into its first tasks and agents."""
    if config.workflow == "planned":
        task = Task(
            project_id=project.id,
            key=PLAN_TASK,
            title="Plan the work",
            category="planner",
            description="Write the task graph for PROMPT.md.",
        )
        out.session.add(task)
        out.session.flush()
        task.status = TaskStatus.RUNNING
        planner = new_agent(out, project, config, "planner", task_id=task.id, depth=0)
        schedule(out, project, config, planner.id, 1)
        return
    specs = config.tasks or [TaskSpec(id="main", title=project.name, category="builder")]
    create_tasks(out, project, specs)
    start_ready_tasks(out, project, config)


def create_tasks(out: Outbox, project: Project, specs: list[TaskSpec]) -> None:
    wave_of = {task_id: index for index, wave in enumerate(dag.waves(specs)) for task_id in wave}
    for spec in specs:
        out.session.add(
            Task(
                project_id=project.id,
                key=spec.id,
                title=spec.title,
                description=spec.description,
                category=spec.category,
                depends_on=list(spec.depends_on),
                kind=spec.kind,
                wave=wave_of[spec.id],
            )
        )
    out.session.flush()


def _tasks(out: Outbox, project: Project) -> list[Task]:
    return list(out.session.scalars(select(Task).where(Task.project_id == project.id, Task.key != PLAN_TASK)))


def start_ready_tasks(out: Outbox, project: Project, config: ProjectConfig) -> None:
    """Start every task whose dependencies are done; complete the project when all are.

    A group task has no work of its own: once ready it is complete, with no agent, and what
    waited for it is looked at again. An approval task, once ready, waits for a person; so does
    the finished project with ``[approvals] diff`` (orchestrator.scheduling.approvals).
    """
    tasks = _tasks(out, project)
    done = {t.key for t in tasks if t.status == TaskStatus.COMPLETED}
    if tasks and len(done) == len(tasks):
        if config.approvals.diff:
            approvals.wait_for(out, project, config, ApprovalPoint.DIFF, "approve the work before delivery")
        else:
            end(out, project, ProjectCompleted(tasks=len(tasks)))
        return
    running = {t.key for t in tasks if t.status == TaskStatus.RUNNING}
    specs = [TaskSpec(id=t.key, title=t.title, depends_on=list(t.depends_on)) for t in tasks]
    by_key = {t.key: t for t in tasks}
    ready = [by_key[key] for key in dag.ready(specs, done, running)]
    if groups := [task for task in ready if task.kind == TaskKind.GROUP]:
        for task in groups:
            task.status = TaskStatus.COMPLETED
        start_ready_tasks(out, project, config)
        return
    for task in ready:
        if task.kind == TaskKind.APPROVAL:
            task.status = TaskStatus.RUNNING  # its wait: no agent, no worker
            approvals.wait_for(out, project, config, ApprovalPoint.TASK, task_text(task), task)
        else:
            _start_task(out, project, config, task)
    approvals.hold_if_waiting(out, project)


def _start_task(out: Outbox, project: Project, config: ProjectConfig, task: Task) -> None:
    task.status = TaskStatus.RUNNING
    builder = new_agent(out, project, config, task.category, task_id=task.id, depth=0)
    if config.workflow != "pipeline" or not config.research:
        schedule(out, project, config, builder.id, 1)
        return
    builder.status = AgentStatus.BLOCKED
    for category in config.research:
        child = new_agent(
            out,
            project,
            config,
            category,
            task_id=task.id,
            parent_id=builder.id,
            depth=1,
            prompt=task_text(task),
        )
        schedule(out, project, config, child.id, 1)


def builder_of(out: Outbox, config: ProjectConfig, task_id: str) -> Agent:
    """The task's builder: its root agent that is not a validator. With a rotating lead (dialectic,
    ``rotate = true``) the task has two, and the one that iterated last is the builder."""
    validators = config.categories_in(Role.VALIDATOR)
    return out.session.scalars(
        select(Agent)
        .outerjoin(Iteration, Iteration.agent_id == Agent.id)
        .where(Agent.task_id == task_id, Agent.parent_id.is_(None), Agent.category.not_in(validators))
        .order_by(Iteration.started_at.desc().nulls_last(), Agent.created_at)
    ).first() or _missing(task_id)


def _missing(task_id: str) -> Agent:
    msg = f"task {task_id} has no builder agent"
    raise LookupError(msg)


def start_validation(out: Outbox, project: Project, config: ProjectConfig, task: Task) -> None:
    validator = out.session.scalars(
        select(Agent).where(Agent.task_id == task.id, Agent.category == config.validator)
    ).first() or new_agent(out, project, config, config.validator, task_id=task.id, depth=0)
    validator.status = AgentStatus.IDLE
    schedule(out, project, config, validator.id, validator.iterations + 1)


def complete_task(out: Outbox, project: Project, config: ProjectConfig, task: Task) -> None:
    task.status = TaskStatus.COMPLETED
    deliver_task(out, project, task)
    for agent in out.session.scalars(select(Agent).where(Agent.task_id == task.id)):
        if agent.status != AgentStatus.ERROR:
            agent.status = AgentStatus.COMPLETED
    start_ready_tasks(out, project, config)


def accept_plan(out: Outbox, project: Project, config: ProjectConfig, plan_json: str) -> None:
    plan = Plan.model_validate_json(plan_json)
    create_tasks(out, project, plan.tasks)
    if config.approvals.plan:  # its tasks start once a person approves them
        title = f"approve the plan ({len(plan.tasks)} tasks: `raas graph {project.id}`)"
        approvals.wait_for(out, project, config, ApprovalPoint.PLAN, title)
        return
    start_ready_tasks(out, project, config)


def gated(config: ProjectConfig) -> bool:
    """Whether a builder's "done" goes to the validator (the check command) before the task is
    complete: always in a pipeline, in a dialectic when there is a check command."""
    return config.workflow == "pipeline" or (config.workflow == "dialectic" and bool(config.check_command))


def reviewed(
    out: Outbox, project: Project, config: ProjectConfig, builder: Agent, iteration: Iteration
) -> bool:
    """Start the review of a builder's finished iteration if the dialectic workflow owes one.

    A review is owed after an iteration that changed files or says the task is done, while the
    task has had fewer than ``[dialectic] review_rounds`` reviews and the builder has iterations
    left. The builder waits (blocked) for the reviewer's one iteration; its next iteration gets
    the critique as the report of a subagent its last iteration spawned
    (``workers.claim._reports``). An iteration that did not say it is done is first counted by
    the circuit breaker, as any builder iteration.

    Returns:
        True when it took the iteration over (a review started, or the breaker paused the
        project); False when the caller decides as for any other workflow.
    """
    if config.workflow != "dialectic" or config.role_of(builder.category) is not Role.BUILDER:
        return False
    changed = iteration.completed_task or bool(iteration.files_changed)
    if iteration.status != IterationStatus.SUCCEEDED or not changed:
        return False
    if not iteration.completed_task and iteration.number >= config.max_iterations:
        return False
    task = out.session.get_one(Task, builder.task_id)
    done = _reviews(out, config, task)
    if done >= config.dialectic.review_rounds:
        return False
    if not iteration.completed_task and breaker_trips(out, project, iteration, config):
        return True
    reviewer_category, lead = config.dialectic.reviewer, builder
    if config.dialectic.rotate:  # odd rounds: the other configuration leads next, and reviews
        odd = done % 2 == 0
        reviewer_category = config.dialectic.reviewer if odd else ROTATED_REVIEWER
        lead = _lead(out, project, config, task, ROTATED_BUILDER if odd else task.category)
        if lead is not builder:
            builder.status = AgentStatus.COMPLETED  # off duty until it leads again
    request = review_request(
        task_text(task),
        iteration.number,
        iteration.summary,
        list(iteration.files_changed),
        completed=iteration.completed_task,
        diff=_diff(project, iteration),
    )
    # The critique reaches the lead's next iteration as the report of a subagent its latest
    # iteration spawned (none yet: of one its task began with).
    latest = out.session.scalar(
        select(Iteration.id).where(Iteration.agent_id == lead.id).order_by(Iteration.number.desc()).limit(1)
    )
    reviewer = new_agent(
        out,
        project,
        config,
        reviewer_category,
        task_id=task.id,
        parent_id=lead.id,
        depth=1,
        spawned_by=latest,
        prompt=request,
    )
    lead.status = AgentStatus.BLOCKED
    schedule(out, project, config, reviewer.id, 1)
    return True


def _diff(project: Project, iteration: Iteration) -> str | None:
    """The iteration's diff from the project's workspace repository (the coordinator's, in the
    settings' data directory); None when it cannot be read there (an iteration that committed
    nothing, or a process whose settings point elsewhere): the reviewer then reads the files."""
    if not iteration.base_sha or not iteration.commit_sha or iteration.base_sha == iteration.commit_sha:
        return None
    bare = get_store(get_settings()).read(project.id)
    if not bare.is_dir():
        return None
    try:
        return workspace.diff(bare, iteration.base_sha, iteration.commit_sha)
    except GitError:
        return None


def _lead(out: Outbox, project: Project, config: ProjectConfig, task: Task, category: str) -> Agent:
    """The task's root agent of ``category``, made the first time it leads."""
    agent = out.session.scalars(
        select(Agent).where(Agent.task_id == task.id, Agent.parent_id.is_(None), Agent.category == category)
    ).first()
    return agent or new_agent(out, project, config, category, task_id=task.id, depth=0)


def _reviews(out: Outbox, config: ProjectConfig, task: Task) -> int:
    """How many reviews the task has had (its reviewer agents, one iteration each)."""
    reviewers = [*config.categories_in(Role.REVIEWER), ROTATED_REVIEWER]
    counted = select(func.count(Agent.id)).where(Agent.task_id == task.id, Agent.category.in_(reviewers))
    return out.session.scalar(counted) or 0
