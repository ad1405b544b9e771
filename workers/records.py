"""How an iteration ends, written by its worker: its outcome, its event, its agent's count.

The claim is :mod:`workers.claim`; every model call's money and messages are
:mod:`workers.ledger`'s. A failure is written by :func:`shared.iterations.fail_iteration`, the
rule every path that fails an iteration follows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, update
from sqlalchemy.orm import Session

from shared import budget, events
from shared.db import session_scope, survives_restarts
from shared.event_payloads import IterationComplete, IterationError
from shared.iterations import fail_iteration
from shared.models import Agent, AgentStatus, ErrorKind, Iteration, IterationStatus, utcnow
from shared.schemas import EventOut
from workers.claim import Claim

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
