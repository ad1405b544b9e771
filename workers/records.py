"""What a worker writes to the database: claiming an iteration, its messages, its end.

The iteration row is the idempotency key (DESIGN.md rule 3): it is claimed with one
conditional UPDATE, so a message delivered twice runs the iteration once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Literal, TypeVar

from sqlalchemy import and_, bindparam, delete, func, insert, or_, select, tuple_, update
from sqlalchemy.orm import Session

from shared import budget, events, mailbox, memory
from shared.budget import Settlement
from shared.categories import Role
from shared.db import get_engine, session_scope, survives_restarts
from shared.event_payloads import IterationComplete, IterationError, IterationStarted
from shared.iterations import fail_iteration
from shared.models import (
    Agent,
    AgentStatus,
    ErrorKind,
    Iteration,
    IterationStatus,
    Message,
    Money,
    Project,
    ProjectStatus,
    Task,
    unfinished,
    utcnow,
)
from shared.pricing import cost_usd, find_price
from shared.project_config import ProjectConfig
from shared.schemas import AgentMessageOut, EventOut
from shared.usage import Usage

# How long a call waits for budget other calls of its project hold, and how often it looks.
BUDGET_WAIT_S = 300.0
BUDGET_POLL_S = 0.25
BUDGET_SPENT = "the project's budget is spent; raise it with `raas budget ID --limit USD`"


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
# A failure is written by shared.iterations.fail_iteration, the rule of every path that fails one.
_SUCCEED = (
    update(Iteration)
    .where(
        Iteration.id == bindparam("iteration_id"),
        Iteration.attempt == bindparam("b_attempt"),
        Iteration.status == IterationStatus.RUNNING,
    )
    .values(
        status=IterationStatus.SUCCEEDED,
        completed_task=bindparam("b_completed_task"),
        summary=bindparam("b_summary"),
        base_sha=bindparam("b_base_sha"),
        commit_sha=bindparam("b_commit_sha"),
        files_changed=bindparam("b_files_changed"),
        finished_at=bindparam("b_finished_at"),
    )
    .execution_options(synchronize_session=False)
)
_COUNT_ITERATION = (
    update(Agent)
    .where(Agent.id == bindparam("agent_id"))
    .values(iterations=Agent.iterations + 1, status=bindparam("b_status"))
    .execution_options(synchronize_session=False)
)


def claim(
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
        )


def _reports(session: Session, agent_id: str, number: int) -> tuple[tuple[str, str], ...]:
    """Reports of the subagents the agent's previous iteration spawned (or that its task began with)."""
    if number == 1:
        rows = session.execute(_FIRST_REPORTS, {"agent_id": agent_id})
    else:
        rows = session.execute(_LATER_REPORTS, {"agent_id": agent_id, "previous": number - 1})
    return tuple((category, report or "(no report)") for category, report in rows)


@survives_restarts
def spawn(claim: Claim, category: str, prompt: str, parallel: bool) -> str:
    """Record a subagent asked for by this iteration; the coordinator starts it when the iteration ends."""
    with session_scope() as session:
        agent = Agent(
            project_id=claim.project_id,
            parent_id=claim.agent_id,
            depth=claim.depth + 1,
            category=category,
            parallel=parallel,
            prompt=prompt,
            spawned_by=claim.iteration_id,
            created_at=utcnow(),
            task_id=session.scalar(select(Agent.task_id).where(Agent.id == claim.agent_id)),
        )
        session.add(agent)
        session.flush()
        return agent.id


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


@survives_restarts
def store_message(
    claim: Claim,
    seq: int,
    role: str,
    content: list[Any],
    *,
    model: str | None = None,
    usage: Usage | None = None,
    stop_reason: str | None = None,
    duration_s: float | None = None,
) -> Settlement | None:
    """Store one message; an assistant message's usage is priced, added to every total, and
    settles the call's budget reservation.

    Returns:
        The settlement, for assistant messages (None for the others).
    """
    with session_scope() as session:
        return _store(session, claim, seq, role, content, model, usage, stop_reason, duration_s)


_MESSAGES = insert(Message)


@survives_restarts
def store_call(
    claim: Claim,
    seq: int,
    request: list[Any],
    answer: list[Any],
    *,
    model: str,
    usage: Usage,
    held: Decimal,
    stop_reason: str | None = None,
    duration_s: float | None = None,
) -> Settlement:
    """Store one gateway call, what was sent (``seq``) and its answer (``seq + 1``), price it and
    settle its reservation (``held``, what :func:`reserve_if_running` said the call holds): the
    rows of :func:`store_message` twice, in one transaction (written together or not at all)."""
    price = find_price(model, claim.config.pricing)
    cost = cost_usd(usage, price) if price is not None else Decimal(0)
    now = utcnow()
    rows = [
        _message_row(claim, seq, "user", request, None, Usage(), None, Decimal(0), None, now),
        _message_row(claim, seq + 1, "assistant", answer, model, usage, stop_reason, cost, duration_s, now),
    ]
    with session_scope() as session:
        session.execute(_MESSAGES, rows)
        # The project's row before the iteration's, as the next call's reservation (which may run
        # meanwhile) takes them: the other order could deadlock with it.
        settlement = budget.settle(
            session, claim.project_id, claim.iteration_id, cost, claim.config.budget.warning_threshold, held
        )
        _add_totals(session, claim, usage, cost)
        return settlement


def _message_row(
    claim: Claim,
    seq: int,
    role: str,
    content: list[Any],
    model: str | None,
    usage: Usage,
    stop_reason: str | None,
    cost: Decimal,
    duration_s: float | None,
    now: datetime,
) -> dict[str, Any]:
    return {
        "project_id": claim.project_id,
        "agent_id": claim.agent_id,
        "iteration_id": claim.iteration_id,
        "attempt": claim.attempt,
        "seq": seq,
        "role": role,
        "content": content,
        "model": model,
        "stop_reason": stop_reason,
        **usage.model_dump(),  # the columns are named as Usage's fields
        "cost_usd": cost,
        "duration_s": duration_s,
        "created_at": now,
    }


def _store(
    session: Session,
    claim: Claim,
    seq: int,
    role: str,
    content: list[Any],
    model: str | None,
    usage: Usage | None,
    stop_reason: str | None,
    duration_s: float | None,
) -> Settlement | None:
    cost = Decimal(0)
    if usage is not None and model is not None:
        price = find_price(model, claim.config.pricing)
        cost = cost_usd(usage, price) if price is not None else Decimal(0)
    usage = usage or Usage()
    session.add(
        Message(
            project_id=claim.project_id,
            agent_id=claim.agent_id,
            iteration_id=claim.iteration_id,
            attempt=claim.attempt,
            seq=seq,
            role=role,
            content=content,
            model=model,
            stop_reason=stop_reason,
            **usage.model_dump(),  # the columns are named as Usage's fields
            cost_usd=cost,
            duration_s=duration_s,
            created_at=utcnow(),
        )
    )
    if role != "assistant":
        return None
    _add_totals(session, claim, usage, cost)
    return budget.settle(
        session, claim.project_id, claim.iteration_id, cost, claim.config.budget.warning_threshold
    )


@survives_restarts
def reserve_call(claim: Claim, amount: Decimal) -> bool:
    """Reserve a call's worst-case cost before making it; False when the budget is spent.

    What the coordinator reserved when it sent the iteration counts towards the first call.
    """
    with session_scope() as session:
        return budget.top_up(session, claim.project_id, claim.iteration_id, amount)


def reserve_call_waiting(
    claim: Claim, amount: Decimal, *, wait_s: float = BUDGET_WAIT_S, poll_s: float = BUDGET_POLL_S
) -> bool:
    """Reserve a call's worst-case cost, waiting while that may still succeed; False: the budget
    is spent.

    While other calls of the project hold reservations, what they do not spend comes back when
    they settle, so a refusal then means "wait" (up to ``wait_s``), not "spent". The one budget
    gate of every model call: the api harness's session and the harnesses' gateway.
    """
    return _waiting_for_budget(claim, lambda: reserve_call(claim, amount), wait_s, poll_s) is True


def reserve_if_running(
    claim: Claim,
    amount: Decimal,
    *,
    take_over: bool,
    wait_s: float = BUDGET_WAIT_S,
    poll_s: float = BUDGET_POLL_S,
) -> Decimal | Literal[False] | None:
    """Reserve a gateway call's worst case if the project runs, waiting as
    :func:`reserve_call_waiting` does: what the call then holds (its own to settle or release,
    while later calls of the lease hold theirs), False when the budget is spent, None when the
    project no longer runs.

    ``take_over``: the lease's first call also takes what the iteration already holds (the
    coordinator's reservation, or what a dead attempt left) and reserves only what is missing;
    a later call reserves its own worst case in full.
    """
    return _waiting_for_budget(claim, lambda: _reserve_if_running(claim, amount, take_over), wait_s, poll_s)


R = TypeVar("R")


def _waiting_for_budget(
    claim: Claim, reserve: Callable[[], R | Literal[False]], wait_s: float, poll_s: float
) -> R | Literal[False]:
    """``reserve`` until it answers anything but False, while other calls hold budget that may
    come back and ``wait_s`` has not passed; False: the budget is spent."""
    deadline = time.monotonic() + wait_s
    while True:
        reserved = reserve()
        if reserved is not False:
            return reserved
        if not others_hold_reservations(claim) or time.monotonic() > deadline:
            return False
        time.sleep(poll_s)


_HELD = select(Iteration.reserved_usd).where(Iteration.id == bindparam("iteration_id"))


@survives_restarts
def _reserve_if_running(claim: Claim, amount: Decimal, take_over: bool) -> Decimal | Literal[False] | None:
    engine = get_engine()
    if not take_over and budget.in_one_statement(engine):
        # One statement in autocommit is its own transaction: one round trip, no BEGIN or COMMIT.
        with engine.connect() as connection:
            autocommit = connection.execution_options(isolation_level="AUTOCOMMIT")
            reserved = budget.reserve_if_running(autocommit, claim.project_id, claim.iteration_id, amount)
        return amount if reserved else reserved
    with session_scope() as session:
        connection = session.connection()
        held = Decimal(0)
        if take_over:
            held = connection.scalar(_HELD, {"iteration_id": claim.iteration_id}) or Decimal(0)
            if held >= amount:  # it holds enough already: nothing to write
                return held if budget.running(connection, claim.project_id) else None
        reserved = budget.reserve_if_running(connection, claim.project_id, claim.iteration_id, amount - held)
        return amount if reserved else reserved


@survives_restarts
def others_hold_reservations(claim: Claim) -> bool:
    """Whether calls of other iterations of the project hold budget that may come back."""
    with session_scope() as session:
        held = session.scalar(
            select(func.coalesce(func.sum(Iteration.reserved_usd), 0)).where(
                Iteration.project_id == claim.project_id,
                unfinished(),
                Iteration.status == IterationStatus.RUNNING,
                Iteration.id != claim.iteration_id,
            )
        )
        return bool(held and held > 0)


@survives_restarts
def release(claim: Claim) -> None:
    """Give back what a call that failed had reserved (its usage is unknown, so nothing is charged)."""
    with session_scope() as session:
        budget.release(session, claim.project_id, claim.iteration_id)


@survives_restarts
def release_call(claim: Claim, held: Decimal) -> None:
    """Give back what one gateway call holds (``held``), charging nothing: it failed."""
    with session_scope() as session:
        budget.release(session, claim.project_id, claim.iteration_id, held)


_AGENT_TOTALS = (
    update(Agent)
    .where(Agent.id == bindparam("b_agent_id"))
    .values(
        input_tokens=Agent.input_tokens + bindparam("b_input_tokens"),
        output_tokens=Agent.output_tokens + bindparam("b_output_tokens"),
        cost_usd=Agent.cost_usd + bindparam("b_cost", type_=Money),
    )
)
_ITERATION_COST = (
    update(Iteration)
    .where(Iteration.id == bindparam("b_iteration_id"))
    .values(cost_usd=Iteration.cost_usd + bindparam("b_cost", type_=Money))
)


def _add_totals(session: Session, claim: Claim, usage: Usage, cost: Decimal) -> None:
    # b_ names: a bind named as a column would be SET as well.
    totals = {"b_input_tokens": usage.input_tokens, "b_output_tokens": usage.output_tokens, "b_cost": cost}
    session.execute(_AGENT_TOTALS, {"b_agent_id": claim.agent_id, **totals})
    session.execute(_ITERATION_COST, {"b_iteration_id": claim.iteration_id, "b_cost": cost})


@dataclass
class Outcome:
    """How an iteration ended."""

    completed_task: bool = False
    summary: str | None = None
    error: str | None = None
    error_kind: ErrorKind | None = None
    commit_sha: str | None = None
    base_sha: str | None = None
    files_changed: list[str] | None = None
    finished_at: datetime | None = None


def _text(value: str | None) -> str | None:
    """What the model wrote, storable: Postgres text columns refuse NUL characters."""
    return value.replace("\x00", "\ufffd") if value is not None else None


@survives_restarts
def finish(claim: Claim, outcome: Outcome) -> EventOut | None:
    """Record how the iteration ended, with its ``iteration_complete`` or ``iteration_error``
    event in the same transaction (one commit less between two iterations); publish the event
    after reporting. None when another attempt has taken the iteration over meanwhile.
    """
    with session_scope() as session:
        if not (_fail(session, claim, outcome) if outcome.error else _succeed(session, claim, outcome)):
            return None
        agent_status = AgentStatus.ERROR if outcome.error else AgentStatus.IDLE
        session.execute(_COUNT_ITERATION, {"agent_id": claim.agent_id, "b_status": agent_status})
        ending = _end_event(claim, outcome)
        return events.record(
            session, claim.project_id, ending, agent_id=claim.agent_id, iteration_id=claim.iteration_id
        )


def _fail(session: Session, claim: Claim, outcome: Outcome) -> bool:
    """The attempt erred: fail the iteration by the rule every path follows."""
    return fail_iteration(
        session,
        claim.iteration_id,
        _text(outcome.error) or "",
        kind=outcome.error_kind,
        attempt=claim.attempt,
        recorded=_work(outcome),
    )


def _succeed(session: Session, claim: Claim, outcome: Outcome) -> bool:
    """Record the iteration's success (if this attempt still runs it) and give back what it holds."""
    params = {f"b_{column}": value for column, value in _work(outcome).items()}
    result = session.execute(
        _SUCCEED,
        {"iteration_id": claim.iteration_id, "b_attempt": claim.attempt, "b_finished_at": utcnow(), **params},
    )
    if not result.rowcount:  # type: ignore[attr-defined]
        return False
    budget.release(session, claim.project_id, claim.iteration_id)
    return True


def _work(outcome: Outcome) -> dict[str, object]:
    """What the attempt did, as the iteration's columns: recorded however it ended."""
    return {
        "completed_task": outcome.completed_task,
        "summary": _text(outcome.summary),
        "base_sha": outcome.base_sha,
        "commit_sha": outcome.commit_sha,
        "files_changed": outcome.files_changed or [],
    }


def _end_event(claim: Claim, outcome: Outcome) -> IterationError | IterationComplete:
    if outcome.error:
        return IterationError(number=claim.number, error=outcome.error, kind=outcome.error_kind)
    return IterationComplete(
        number=claim.number,
        completed_task=outcome.completed_task,
        summary=outcome.summary,
        files_changed=outcome.files_changed or [],
        commit=outcome.commit_sha,
    )


@survives_restarts
def awaits_advance(iteration_id: str) -> bool:
    """Finished but not yet acted on by the coordinator (its report may have been lost)."""
    with session_scope() as session:
        iteration = session.get(Iteration, iteration_id)
        return iteration is not None and iteration.status.is_finished and not iteration.advanced


@survives_restarts
def project_running(project_id: str) -> bool:
    """Checked between LLM calls: a paused or stopped project's iterations end early."""
    with session_scope() as session:
        return session.scalar(select(Project.status).where(Project.id == project_id)) == ProjectStatus.RUNNING
