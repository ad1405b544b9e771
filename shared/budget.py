"""The budget gate (DESIGN.md rule 1): reservations and settlements in one ledger.

Every LLM call is preceded by a reservation of its worst-case cost, taken with one conditional
UPDATE that succeeds only while some budget remains (it works on Postgres and SQLite alike),
and followed by a settlement to the real cost. Since no one can reserve while the remainder is
spoken for, the final spend is at most the limit plus one call's cost, however many workers run.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from shared.models import Iteration, LedgerEntry, LedgerKind, Money, Project, utcnow
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


def reserve(session: Session, project_id: str, iteration_id: str | None, amount: Decimal) -> bool:
    """Reserve ``amount`` if any budget remains; False (and nothing written) when none does."""
    admitted = session.execute(
        update(Project)
        .where(
            Project.id == project_id,
            Project.budget_limit_usd - Project.spent_usd - Project.reserved_usd > BELOW_A_MICRODOLLAR,
        )
        .values(reserved_usd=Project.reserved_usd + amount)
        .returning(Project.id)
    ).first()
    if admitted is None:
        return False
    if iteration_id is not None:
        session.execute(
            update(Iteration)
            .where(Iteration.id == iteration_id)
            .values(reserved_usd=Iteration.reserved_usd + amount)
        )
    _record_reservation(session, project_id, iteration_id, amount)
    return True


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
_RELEASE = update(Iteration).where(Iteration.id == bindparam("iteration_id")).values(reserved_usd=Decimal(0))
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
    session: Session, project_id: str, iteration_id: str, actual: Decimal, threshold: float
) -> Settlement:
    """Charge ``actual`` and release everything the iteration still holds in reservation."""
    spent, limit, warned = _charge_and_release(session, project_id, iteration_id, actual)
    warn = not warned and limit > 0 and spent >= limit * Decimal(str(threshold))
    if warn:
        session.execute(update(Project).where(Project.id == project_id).values(budget_warned=True))
    return Settlement(spent_usd=spent, limit_usd=limit, warn=warn)


def release(session: Session, project_id: str, iteration_id: str) -> None:
    """Give back everything the iteration holds in reservation and charge nothing: for a call
    that failed (its usage is unknown) or an iteration that ends without its worker.

    A settlement of zero in the ledger; unlike ``settle`` it never decides the warning, which
    only a charge can make true.
    """
    _charge_and_release(session, project_id, iteration_id, Decimal(0))


def _charge_and_release(
    session: Session, project_id: str, iteration_id: str, actual: Decimal
) -> tuple[Decimal, Decimal, bool]:
    """Charge ``actual``, release what the iteration held; the project's spent, limit, warned."""
    held = session.scalar(_HELD, {"iteration_id": iteration_id}) or Decimal(0)
    session.execute(_RELEASE, {"iteration_id": iteration_id})
    row = session.execute(_CHARGE, {"project_id": project_id, "actual": actual, "held": held}).one()
    session.add(
        LedgerEntry(
            project_id=project_id,
            iteration_id=iteration_id,
            kind=LedgerKind.SETTLE,
            amount_usd=actual,
            released_usd=held,
            created_at=utcnow(),
        )
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
