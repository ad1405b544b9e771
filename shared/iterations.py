"""How an iteration fails: one rule for every path that ends one in failure.

A worker fails its own iteration when the attempt errs; the coordinator fails those a worker
cannot end — one whose worker died past its attempt limit, a stopped project's straggler, a
queued one dropped by ``raas stop``. Whoever does it, the iteration is marked failed with its
reason and gives back everything it held in reservation (DESIGN.md rule 1): a failed iteration
never runs another call, so money left reserved would shrink the project's budget for good.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import update
from sqlalchemy.orm import Session

from shared import budget
from shared.models import ErrorKind, Iteration, IterationStatus, utcnow

# By its key, so the partial index does not matter here (see shared.models.UNFINISHED_SQL).
_UNFINISHED = [IterationStatus.QUEUED, IterationStatus.RUNNING]


def fail_iteration(
    session: Session,
    iteration_id: str,
    error: str,
    *,
    kind: ErrorKind | None = None,
    attempt: int | None = None,
    advanced: bool = False,
    finished_at: datetime | None = None,
    recorded: Mapping[str, object] | None = None,
) -> bool:
    """Fail the iteration if it has not ended, and release its reservation.

    Args:
        error: why, in words a user reads (the iteration's ``error``).
        kind: what the coordinator and the circuit breaker act on.
        attempt: only if this attempt still runs it (a worker's own end: another attempt may
            have taken the iteration over meanwhile).
        advanced: the caller has already acted on it, so the coordinator must not advance it.
        recorded: more of the iteration's columns to write with its end (what the attempt did).

    Returns:
        False, and nothing written, when it had already ended (or another attempt runs it).
    """
    where = [Iteration.id == iteration_id, Iteration.status.in_(_UNFINISHED)]
    if attempt is not None:
        where += [Iteration.attempt == attempt, Iteration.status == IterationStatus.RUNNING]
    columns = {**(recorded or {}), **({"advanced": True} if advanced else {})}
    project_id = session.execute(
        update(Iteration)
        .where(*where)
        .values(
            status=IterationStatus.FAILED,
            error=error,
            error_kind=kind,
            finished_at=finished_at or utcnow(),
            **columns,
        )
        .returning(Iteration.project_id)
    ).scalar()
    if project_id is None:
        return False
    budget.release(session, project_id, iteration_id)
    return True
