"""The claim on an iteration and its heartbeats: what makes a redelivered message harmless.

The iteration row is the idempotency key (DESIGN.md rule 3): it is claimed with one
conditional UPDATE, so a message delivered twice runs the iteration once; the attempt that
claimed it keeps it while its heartbeat is fresh. :class:`Claim` is everything the iteration
needs, read once when it is claimed: the worker's core noun, passed to every part that runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import and_, bindparam, delete, or_, select, tuple_, update
from sqlalchemy.orm import Session

from shared import events, mailbox, memory, rounds
from shared.categories import Role
from shared.db import session_scope, survives_restarts
from shared.event_payloads import IterationStarted
from shared.models import Agent, AgentStatus, Iteration, IterationStatus, Project, Task, utcnow
from shared.project_config import ProjectConfig
from shared.said import Heard, take
from shared.schemas import AgentMessageOut, EventOut


@dataclass(frozen=True)
class Claim:
    """Everything an iteration needs, read once when it is claimed."""

    project_id: str
    iteration_id: str
    agent_id: str
    number: int
    attempt: int
    project_name: str
    prompt: str
    task_title: str
    task_description: str
    config: ProjectConfig
    memory_bank: str
    category: str = "builder"
    task_key: str | None = None
    parallel: bool = False
    depth: int = 0
    agent_prompt: str | None = None
    feedback: str | None = None
    reports: tuple[tuple[str, str], ...] = ()
    # Messages from other agents, delivered to this iteration (shared.mailbox).
    mail: tuple[AgentMessageOut, ...] = ()
    # What people said to it (``raas say``), and a pull request round's feedback (quoted text).
    said: tuple[Heard, ...] = ()
    round_feedback: str | None = None
    # Whose task this is: a task's container is kept for its next iteration under these (and the
    # project), never handed to another tenant's, project's or task's.
    tenant_id: str | None = None
    task_id: str | None = None
    started: EventOut | None = None  # iteration_started, recorded with the claim; publish it

    @property
    def role(self) -> Role:
        return self.config.role_of(self.category)

    @property
    def task_text(self) -> str:
        """What this agent is asked to do: a subagent's instructions, or its task."""
        if self.agent_prompt:
            return self.agent_prompt
        return f"{self.task_title}\n{self.task_description}".strip()


# The hand-off's statements, built once: building one costs about as much as running it.
_CLAIM = (
    update(Iteration)
    .where(
        Iteration.id == bindparam("iteration_id"),
        or_(
            Iteration.status == IterationStatus.QUEUED,
            and_(Iteration.status == IterationStatus.RUNNING, Iteration.heartbeat_at < bindparam("stale")),
        ),
    )
    .values(
        status=IterationStatus.RUNNING,
        attempt=Iteration.attempt + 1,
        worker=bindparam("b_worker"),
        celery_task_id=bindparam("b_celery_task_id"),
        heartbeat_at=bindparam("b_now"),
        started_at=bindparam("b_now"),
    )
    .returning(Iteration.project_id, Iteration.agent_id, Iteration.number, Iteration.attempt)
    .execution_options(synchronize_session=False)
)
_CLAIMED = (
    select(Project, Agent, Task)
    .join(Agent, Agent.project_id == Project.id)
    .outerjoin(Task, Task.id == Agent.task_id)
    .where(Agent.id == bindparam("agent_id"))
)
_REPORTS = select(Agent.category, Agent.report).where(
    Agent.parent_id == bindparam("agent_id"), Agent.report.is_not(None)
)
# Of the subagents a task began with (an agent's first iteration), or of those its previous
# iteration spawned.
_FIRST_REPORTS = _REPORTS.where(Agent.spawned_by.is_(None)).order_by(Agent.created_at)
_LATER_REPORTS = (
    _REPORTS.join(Iteration, Iteration.id == Agent.spawned_by)
    .where(Iteration.agent_id == bindparam("agent_id"), Iteration.number == bindparam("previous"))
    .order_by(Agent.created_at)
)


def claim_iteration(
    iteration_id: str,
    worker: str,
    stale_after_s: float,
    celery_task_id: str | None = None,
    on_started: Callable[[EventOut], None] | None = None,
) -> Claim | None:
    """Take the iteration for this worker, in one conditional UPDATE.

    It can be taken when it is queued, or when it is running but its heartbeat is older than
    ``stale_after_s`` (its worker died): that re-run is a new attempt. None when it is done,
    or running on a live worker — a redelivered message then does nothing.

    The claim and its ``iteration_started`` event are committed on their own, before what the
    iteration needs is read: the event (whose number locks the project's row) is visible and
    the row free a transaction sooner. ``on_started`` gets the event then (to publish it);
    without it, it comes back in ``Claim.started``. A worker that dies between the two
    transactions leaves a claimed iteration without a heartbeat, re-run like any other.
    """
    now = utcnow()
    stale = now - timedelta(seconds=stale_after_s)
    with session_scope() as session:
        row = session.execute(
            _CLAIM,
            {
                "iteration_id": iteration_id,
                "stale": stale,
                "b_now": now,
                "b_worker": worker,
                "b_celery_task_id": celery_task_id,
            },
        ).one_or_none()
        if row is None:
            return None
        # The claim is the iteration's start.
        started: EventOut | None = events.record(
            session,
            row.project_id,
            IterationStarted(number=row.number, attempt=row.attempt, worker=worker),
            agent_id=row.agent_id,
            iteration_id=iteration_id,
        )
    if on_started is not None and started is not None:
        on_started(started)
        started = None
    with session_scope() as session:
        if row.attempt > 1:
            # Subagents asked for by the dead attempt never started; this attempt asks anew.
            session.execute(delete(Agent).where(Agent.spawned_by == iteration_id))
        project, agent, task = session.execute(_CLAIMED, {"agent_id": row.agent_id}).one()
        agent.status = AgentStatus.WORKING
        config = ProjectConfig.model_validate(project.config)
        builder = (
            task is not None and agent.parent_id is None and config.role_of(agent.category) is Role.BUILDER
        )
        return Claim(
            started=started,
            project_id=row.project_id,
            iteration_id=iteration_id,
            agent_id=row.agent_id,
            number=row.number,
            attempt=row.attempt,
            project_name=project.name,
            prompt=project.prompt,
            task_title=task.title if task else project.name,
            task_description=task.description if task else "",
            config=config,
            memory_bank=memory.bank_of(project.id, project.tenant_id, config.memory),
            category=agent.category,
            task_key=task.key if task else None,
            parallel=agent.parallel,
            depth=agent.depth,
            agent_prompt=agent.prompt,
            feedback=task.feedback if task and config.role_of(agent.category) is not Role.VALIDATOR else None,
            reports=_reports(session, agent.id, row.number),
            mail=mailbox.deliver(session, agent.id, iteration_id),
            said=tuple(take(session, project.id, agent.id, iteration_id)),
            round_feedback=rounds.feedback_for(session, project.id) if builder else None,
            tenant_id=project.tenant_id,
            task_id=agent.task_id,
        )


def _reports(session: Session, agent_id: str, number: int) -> tuple[tuple[str, str], ...]:
    """Reports of the subagents the agent's previous iteration spawned (or that its task began with)."""
    if number == 1:
        rows = session.execute(_FIRST_REPORTS, {"agent_id": agent_id})
    else:
        rows = session.execute(_LATER_REPORTS, {"agent_id": agent_id, "previous": number - 1})
    return tuple((category, report or "(no report)") for category, report in rows)


@survives_restarts
def beat(running: list[tuple[str, int]]) -> None:
    """Refresh the heartbeats of these ``(iteration_id, attempt)``s, in one statement; an attempt
    that no longer owns its iteration is left alone."""
    # One expanding IN of pairs, not an OR of one clause per pair: its SQL is the same whatever the
    # number of iterations, so the engine caches one compiled statement instead of one per count
    # (a threads worker of concurrency C kept up to C of them, hundreds of bound parameters each).
    owned = tuple_(Iteration.id, Iteration.attempt).in_(running)
    with session_scope() as session:
        session.execute(
            update(Iteration)
            .where(owned, Iteration.status == IterationStatus.RUNNING)
            .values(heartbeat_at=utcnow())
            .execution_options(synchronize_session=False)
        )
