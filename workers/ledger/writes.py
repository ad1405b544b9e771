"""The ledger's statements: each a transaction of its own, retried across a database restart.

Only :class:`workers.ledger.CallLedger` calls them; nothing else in the worker writes money or
``Message`` rows.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.orm import Session

from shared import budget
from shared.budget import Settlement
from shared.db import get_engine, session_scope, survives_restarts
from shared.models import (
    Agent,
    Iteration,
    IterationStatus,
    Message,
    Money,
    Project,
    ProjectStatus,
    unfinished,
)
from shared.usage import Usage
from workers.claim import Claim

_MESSAGES = insert(Message)
_STANDING = select(
    Project.budget_limit_usd - Project.spent_usd - Project.reserved_usd,
    Project.status,
    select(Iteration.reserved_usd).where(Iteration.id == bindparam("iteration_id")).scalar_subquery(),
).where(Project.id == bindparam("project_id"))
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


@survives_restarts
def standing(claim: Claim, url: str | None) -> tuple[Decimal, ProjectStatus, Decimal]:
    """The project's remainder and status, and what the iteration holds, in one statement."""
    with session_scope(url) as session:
        remaining, status, held = session.execute(
            _STANDING, {"project_id": claim.project_id, "iteration_id": claim.iteration_id}
        ).one()
        return Decimal(remaining), status, Decimal(held or 0)


@survives_restarts
def reserve_if_running(claim: Claim, amount: Decimal, url: str | None) -> bool | None:
    """``amount`` reserved for the iteration if the project runs and its remainder pays it."""
    engine = get_engine(url)
    if budget.in_one_statement(engine):
        # One statement in autocommit is its own transaction: one round trip, no BEGIN or COMMIT.
        with engine.connect() as connection:
            autocommit = connection.execution_options(isolation_level="AUTOCOMMIT")
            return budget.reserve_if_running(autocommit, claim.project_id, claim.iteration_id, amount)
    with session_scope(url) as session:
        return budget.reserve_if_running(session.connection(), claim.project_id, claim.iteration_id, amount)


@survives_restarts
def write_call(
    claim: Claim, rows: list[dict[str, Any]], usage: Usage, cost: Decimal, held: Decimal, url: str | None
) -> Settlement:
    with session_scope(url) as session:
        session.execute(_MESSAGES, rows)
        # The project's row before the iteration's, as the next call's reservation (which may run
        # meanwhile) takes them: the other order could deadlock with it.
        settlement = budget.settle(
            session, claim.project_id, claim.iteration_id, cost, claim.config.budget.warning_threshold, held
        )
        _add_totals(session, claim, usage, cost)
        return settlement


@survives_restarts
def release(claim: Claim, held: Decimal, url: str | None) -> None:
    with session_scope(url) as session:
        budget.release(session, claim.project_id, claim.iteration_id, held)


@survives_restarts
def write_messages(rows: list[dict[str, Any]], url: str | None) -> None:
    with session_scope(url) as session:
        session.execute(_MESSAGES, rows)


def _add_totals(session: Session, claim: Claim, usage: Usage, cost: Decimal) -> None:
    # b_ names: a bind named as a column would be SET as well.
    totals = {"b_input_tokens": usage.input_tokens, "b_output_tokens": usage.output_tokens, "b_cost": cost}
    session.execute(_AGENT_TOTALS, {"b_agent_id": claim.agent_id, **totals})
    session.execute(_ITERATION_COST, {"b_iteration_id": claim.iteration_id, "b_cost": cost})


@survives_restarts
def others_hold_reservations(claim: Claim, url: str | None = None) -> bool:
    """Whether calls of other running iterations of the project hold budget that may come back."""
    with session_scope(url) as session:
        held = session.scalar(
            select(func.coalesce(func.sum(Iteration.reserved_usd), 0)).where(
                Iteration.project_id == claim.project_id,
                unfinished(),
                Iteration.status == IterationStatus.RUNNING,
                Iteration.id != claim.iteration_id,
            )
        )
        return bool(held and held > 0)
