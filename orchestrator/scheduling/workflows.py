"""How a project becomes tasks, agents and iterations — and how a task moves on.

``ralph``: each task is one builder looping until it calls task_complete. ``pipeline``: each task
starts with parallel research subagents, then its builder loops with their reports, then the
validator runs the project's check command; a failed check sends the task back to the builder
with the output. ``planned``: a planner writes the task graph first, then the tasks run as in
``ralph``. Tasks start when the tasks they depend on have completed (the DAG's waves).
"""

from __future__ import annotations

from sqlalchemy import select

from orchestrator.scheduling.admission import schedule
from orchestrator.scheduling.deliveries import deliver_task
from orchestrator.scheduling.outbox import Outbox
from orchestrator.scheduling.transitions import end
from shared import dag
from shared.categories import Role
from shared.dag import Plan, TaskKind, TaskSpec
from shared.event_payloads import ProjectCompleted
from shared.models import Agent, AgentStatus, Project, Task, TaskStatus, utcnow
from shared.project_config import ProjectConfig

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
    waited for it is looked at again.
    """
    tasks = _tasks(out, project)
    done = {t.key for t in tasks if t.status == TaskStatus.COMPLETED}
    if tasks and len(done) == len(tasks):
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
        _start_task(out, project, config, task)


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
    validators = config.categories_in(Role.VALIDATOR)
    return out.session.scalars(
        select(Agent)
        .where(Agent.task_id == task_id, Agent.parent_id.is_(None), Agent.category.not_in(validators))
        .order_by(Agent.created_at)
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
    start_ready_tasks(out, project, config)
