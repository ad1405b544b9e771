"""The budget gate (DESIGN.md rule 1): reservations and settlements in one ledger.

Every LLM call is preceded by a reservation of its worst-case cost, taken with one conditional
UPDATE that succeeds only while some budget remains (it works on Postgres and SQLite alike),
and followed by a settlement to the real cost. Since no one can reserve while the remainder is
spoken for, the final spend is at most the limit plus one call's cost, however many workers run.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import Connection, Engine, bindparam, exists, insert, literal, select, true, update
from sqlalchemy.orm import Session

from shared.models import Iteration, LedgerEntry, LedgerKind, Money, Project, ProjectStatus, utcnow
from shared.pricing import ModelPrice

MILLION = Decimal(1_000_000)
# "Nothing remains" below the money columns' resolution (Numeric(14, 6)): SQLite keeps them as
# floating point, where ten reservations of 0.1 against 1.00 leave 1e-16 that is not money.
BELOW_A_MICRODOLLAR = Decimal("0.0000005")
# The largest limit the money columns hold.
MAX_LIMIT_USD = Decimal("99999999")
# What the coordinator assumes of a first call's input before it has seen one.
DEFAULT_INPUT_TOKENS = 4_000


def call_estimate_usd(price: ModelPrice, input_tokens: int, max_output_tokens: int) -> Decimal:
    """The most a call can cost: every input token written to the cache, every output token used."""
    worst_input = max(price.input, price.cache_write_price(), price.cache_read_price())
    return ((input_tokens * worst_input + max_output_tokens * price.output) / MILLION).quantize(
        Decimal("0.000001")
    )


# The reservation's rule, one statement for every caller, built once: ``amount`` more on the
# project's reserved total if any budget remains. (b_ names: a bind named as a column would be
# SET by the iterations' UPDATE in the gateway's one-statement form below.)
_RESERVE = (
    update(Project)
    .where(
        Project.id == bindparam("b_project_id"),
        Project.budget_limit_usd - Project.spent_usd - Project.reserved_usd > BELOW_A_MICRODOLLAR,
    )
    .values(reserved_usd=Project.reserved_usd + bindparam("b_amount", type_=Money))
    .returning(Project.id)
)
_HOLD = (
    update(Iteration)
    .where(Iteration.id == bindparam("b_iteration_id"))
    .values(reserved_usd=Iteration.reserved_usd + bindparam("b_amount", type_=Money))
)


def reserve(session: Session, project_id: str, iteration_id: str | None, amount: Decimal) -> bool:
    """Reserve ``amount`` if any budget remains; False (and nothing written) when none does."""
    admitted = session.execute(_RESERVE, {"b_project_id": project_id, "b_amount": amount}).first()
    if admitted is None:
        return False
    if iteration_id is not None:
        session.execute(_HOLD, {"b_iteration_id": iteration_id, "b_amount": amount})
    _record_reservation(session, project_id, iteration_id, amount)
    return True


# The gateway's reservation, built once (it is on every harness call's path): ``reserve``'s
# conditional UPDATE that also requires the project to run, then the iteration's hold and the
# ledger entry: three statements, or on Postgres one (data-modifying CTEs, each fed by the one
# before, so the project's row is taken before the iteration's, as a settlement takes them).
_RESERVE_RUNNING = _RESERVE.where(Project.status == ProjectStatus.RUNNING)
_STATUS = select(Project.status).where(Project.id == bindparam("project_id"))
_LEDGER = insert(LedgerEntry)
_RESERVED = _RESERVE_RUNNING.cte("reserved")
_HELD_TOO = _HOLD.where(exists(select(_RESERVED.c.id))).returning(Iteration.id).cte("held")
_RESERVE_AT_ONCE = _LEDGER.from_select(
    ["project_id", "iteration_id", "kind", "amount_usd", "released_usd", "created_at"],
    select(
        _RESERVED.c.id,
        _HELD_TOO.c.id,
        literal(LedgerKind.RESERVE, LedgerEntry.__table__.c.kind.type),
        bindparam("b_amount", type_=Money),
        literal(Decimal(0), Money),
        bindparam("b_now", type_=LedgerEntry.__table__.c.created_at.type),
    ).select_from(_RESERVED.join(_HELD_TOO, true())),  # one row each, or none
).returning(LedgerEntry.id)


def in_one_statement(bind: Connection | Engine) -> bool:
    """Whether :func:`reserve_if_running` is one statement there (so, in autocommit, its own
    transaction: one round trip). SQLite has no data-modifying CTEs, nor round trips."""
    return bind.dialect.name == "postgresql"


def reserve_if_running(
    connection: Connection, project_id: str, iteration_id: str, amount: Decimal
) -> bool | None:
    """``reserve`` while the project runs: the check and the reservation in one conditional
    UPDATE. None (nothing written) when the project no longer runs, False when no budget remains.
    """
    if in_one_statement(connection):
        params = {
            "b_project_id": project_id,
            "b_iteration_id": iteration_id,
            "b_amount": amount,
            "b_now": utcnow(),
        }
        admitted = connection.execute(_RESERVE_AT_ONCE, params).first() is not None
    else:
        admitted = _reserve_step_by_step(connection, project_id, iteration_id, amount)
    if not admitted:
        return False if running(connection, project_id) else None
    return True


def _reserve_step_by_step(
    connection: Connection, project_id: str, iteration_id: str, amount: Decimal
) -> bool:
    if connection.execute(_RESERVE_RUNNING, {"b_project_id": project_id, "b_amount": amount}).first() is None:
        return False
    connection.execute(_HOLD, {"b_iteration_id": iteration_id, "b_amount": amount})
    ledger = {"project_id": project_id, "iteration_id": iteration_id, "kind": LedgerKind.RESERVE}
    connection.execute(_LEDGER, {**ledger, "amount_usd": amount, "created_at": utcnow()})
    return True


def running(connection: Connection, project_id: str) -> bool:
    """Whether the project runs (its calls may reserve)."""
    return connection.scalar(_STATUS, {"project_id": project_id}) == ProjectStatus.RUNNING


def admit(session: Session, project: Project, iteration: Iteration, amount: Decimal) -> bool:
    """``reserve`` for the coordinator, which holds the project's row locked (FOR UPDATE) while
    it decides: the same rule, checked on the locked row, so the reservation is written with the
    rest of the transaction rather than by statements of its own (the hand-off waits on them).

    A worker's conditional UPDATE waits for the lock and then sees what was reserved here.
    """
    if project.budget_limit_usd - project.spent_usd - project.reserved_usd <= BELOW_A_MICRODOLLAR:
        return False
    project.reserved_usd += amount
    iteration.reserved_usd = (iteration.reserved_usd or Decimal(0)) + amount
    _record_reservation(session, project.id, iteration.id, amount)
    return True


def _record_reservation(session: Session, project_id: str, iteration_id: str | None, amount: Decimal) -> None:
    session.add(
        LedgerEntry(
            project_id=project_id,
            iteration_id=iteration_id,
            kind=LedgerKind.RESERVE,
            amount_usd=amount,
            created_at=utcnow(),
        )
    )


@dataclass(frozen=True)
class Settlement:
    spent_usd: Decimal
    limit_usd: Decimal
    warn: bool  # this settlement crossed the warning threshold for the first time


# Built once: settling is on the path between two iterations, where building a statement
# costs about as much as running it.
_HELD = select(Iteration.reserved_usd).where(Iteration.id == bindparam("iteration_id"))
_RELEASE = (
    update(Iteration)
    .where(Iteration.id == bindparam("iteration_id"))
    .values(reserved_usd=Iteration.reserved_usd - bindparam("released", type_=Money))
)
_CHARGE = (
    update(Project)
    .where(Project.id == bindparam("project_id"))
    .values(
        spent_usd=Project.spent_usd + bindparam("actual", type_=Money),
        reserved_usd=Project.reserved_usd - bindparam("held", type_=Money),
    )
    .returning(Project.spent_usd, Project.budget_limit_usd, Project.budget_warned)
)


def settle(
    session: Session,
    project_id: str,
    iteration_id: str,
    actual: Decimal,
    threshold: float,
    held: Decimal | None = None,
) -> Settlement:
    """Charge ``actual`` and release everything the iteration still holds in reservation, or
    only ``held`` of it (the call's own reservation, while later calls hold theirs)."""
    spent, limit, warned = _charge_and_release(session, project_id, iteration_id, actual, held)
    warn = not warned and limit > 0 and spent >= limit * Decimal(str(threshold))
    if warn:
        session.execute(update(Project).where(Project.id == project_id).values(budget_warned=True))
    return Settlement(spent_usd=spent, limit_usd=limit, warn=warn)


def release(session: Session, project_id: str, iteration_id: str, held: Decimal | None = None) -> None:
    """Give back everything the iteration holds in reservation and charge nothing: for a call
    that failed (its usage is unknown) or an iteration that ends without its worker.

    A settlement of zero in the ledger; unlike ``settle`` it never decides the warning, which
    only a charge can make true. ``held``: only that much of it, as in ``settle``.
    """
    _charge_and_release(session, project_id, iteration_id, Decimal(0), held)


def _charge_and_release(
    session: Session, project_id: str, iteration_id: str, actual: Decimal, held: Decimal | None
) -> tuple[Decimal, Decimal, bool]:
    """Charge ``actual``, release what the iteration held (at most ``held``); the project's
    spent, limit, warned."""
    holding = session.scalar(_HELD, {"iteration_id": iteration_id}) or Decimal(0)
    # Never more than the iteration holds: what ended it (the sweeper) may have released it all.
    released = holding if held is None else min(held, holding)
    # The project's row first, then the iteration's, as a reservation takes them: a call's
    # settlement and the next call's reservation may run at once (the gateway).
    row = session.execute(_CHARGE, {"project_id": project_id, "actual": actual, "held": released}).one()
    session.execute(_RELEASE, {"iteration_id": iteration_id, "released": released})
    session.execute(
        _LEDGER,
        {
            "project_id": project_id,
            "iteration_id": iteration_id,
            "kind": LedgerKind.SETTLE,
            "amount_usd": actual,
            "released_usd": released,
            "created_at": utcnow(),
        },
    )
    return row[0], row[1], row[2]


def top_up(session: Session, project_id: str, iteration_id: str, amount: Decimal) -> bool:
    """Make sure the iteration holds at least ``amount`` in reservation (reserving the difference)."""
    held = session.scalar(select(Iteration.reserved_usd).where(Iteration.id == iteration_id)) or Decimal(0)
    return held >= amount or reserve(session, project_id, iteration_id, amount - held)


def remaining_usd(session: Session, project_id: str) -> Decimal:
    row = session.execute(
        select(Project.budget_limit_usd - Project.spent_usd - Project.reserved_usd).where(
            Project.id == project_id
        )
    ).scalar_one()
    return Decimal(row)
