"""The budget's statements (DESIGN.md rule 1): reservations and settlements in one ledger.

Every model call is preceded by a reservation of its worst-case cost, taken with one conditional
UPDATE that succeeds only while the remainder pays all of it (it works on Postgres and SQLite
alike), and followed by a settlement to the real cost, which is never above the worst case. So
``spent + reserved <= limit`` holds after every statement, however many workers run, and the
final spend is at most the limit. The worker's one road here is :class:`workers.ledger.CallLedger`
(which lowers a call's output limit to what the remainder pays, down to
:data:`FLOOR_OUTPUT_TOKENS`); the coordinator's is :func:`admit`, the iteration's first hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

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
# What the coordinator assumes of a first call's input before it has seen one, and the least a
# call is assumed to send when sizing the smallest call a budget must pay.
DEFAULT_INPUT_TOKENS = 4_000
# The smallest answer worth asking for: below it a call is refused rather than sent with a
# limit too low to do anything, and the project pauses ``budget_exceeded``.
FLOOR_OUTPUT_TOKENS = 1_024
MICRODOLLAR = Decimal("0.000001")


def worst_input_price(price: ModelPrice) -> Decimal:
    """The most one input token can cost: written to the cache, read, or plain."""
    return max(price.input, price.cache_write_price(), price.cache_read_price())


def call_estimate_usd(price: ModelPrice, input_tokens: int, max_output_tokens: int) -> Decimal:
    """The most a call can cost: every input token at its dearest, every output token used;
    rounded up to the money columns' microdollar, so a settlement never exceeds it."""
    total = input_tokens * worst_input_price(price) + max_output_tokens * price.output
    return (total / MILLION).quantize(MICRODOLLAR, rounding=ROUND_CEILING)


def output_that_fits(
    price: ModelPrice, input_tokens: int, max_output_tokens: int, affordable: Decimal
) -> int:
    """The largest output limit (at most ``max_output_tokens``) whose call's worst case
    ``affordable`` pays; 0 when not even the input fits."""
    if call_estimate_usd(price, input_tokens, max_output_tokens) <= affordable:
        return max_output_tokens
    left = affordable * MILLION - input_tokens * worst_input_price(price)
    if left < 0 or price.output <= 0:
        return 0
    tokens = min(max_output_tokens, int(left / price.output))
    while tokens > 0 and call_estimate_usd(price, input_tokens, tokens) > affordable:
        tokens -= 1  # the rounding up to a microdollar can cost a token
    return tokens


def smallest_call_usd(price: ModelPrice, input_tokens: int = DEFAULT_INPUT_TOKENS) -> Decimal:
    """What the smallest call worth making costs at most: a first request of ``input_tokens``
    (the harness's own, :attr:`shared.harnesses.Harness.first_request_tokens`) and a floor-sized
    answer. A budget below it could pay no call at all."""
    return call_estimate_usd(price, input_tokens, FLOOR_OUTPUT_TOKENS)


# The reservation's rule, one statement for every caller, built once: ``amount`` more on the
# project's reserved total if the remainder pays all of it. (b_ names: a bind named as a column
# would be SET by the iterations' UPDATE in the one-statement form below.)
_RESERVE = (
    update(Project)
    .where(
        Project.id == bindparam("b_project_id"),
        Project.budget_limit_usd
        - Project.spent_usd
        - Project.reserved_usd
        - bindparam("b_amount", type_=Money)
        > -BELOW_A_MICRODOLLAR,
    )
    .values(reserved_usd=Project.reserved_usd + bindparam("b_amount", type_=Money))
    .returning(Project.id)
)
_HOLD = (
    update(Iteration)
    .where(Iteration.id == bindparam("b_iteration_id"))
    .values(reserved_usd=Iteration.reserved_usd + bindparam("b_amount", type_=Money))
)


# A call's reservation, built once (it is on every model call's path): the
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
    UPDATE. None (nothing written) when the project no longer runs, False when the remainder
    does not pay ``amount``.
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


def admit(
    session: Session, project: Project, iteration: Iteration, amount: Decimal, smallest: Decimal
) -> bool:
    """The iteration's first hold, for the coordinator, which holds the project's row locked (FOR
    UPDATE) while it decides: ``amount`` (its first call's estimate), or what remains when that
    is less, and nothing at all (False) when what remains cannot pay ``smallest``, the smallest
    call worth making. Written with the rest of the transaction rather than by statements of its
    own (the hand-off waits on them); a worker's conditional UPDATE waits for the lock.

    The hold is the iteration's own money: its calls draw on it first (the ledger never counts
    it against them), and what they leave is given back when the iteration ends.
    """
    remaining = project.budget_limit_usd - project.spent_usd - project.reserved_usd
    if remaining < smallest - BELOW_A_MICRODOLLAR:
        return False
    amount = min(amount, remaining)
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


def remaining_usd(session: Session, project_id: str) -> Decimal:
    """What the project's reservations and spending leave of its limit."""
    row = session.execute(
        select(Project.budget_limit_usd - Project.spent_usd - Project.reserved_usd).where(
            Project.id == project_id
        )
    ).scalar_one()
    return Decimal(row)
