"""The budget ledger (DESIGN.md rule 1) holds under any interleaving of reservations and settlements.

The real ledger functions run against a real database (SQLite in memory, the embedded mode's
engine, with the project's own models), each step in its own transaction as the coordinator
and the workers do. Hypothesis draws the limit, the calls and their order; a plain Python
model of the ledger says what the database must hold after every step.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, create_engine, func, select
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from shared import budget
from shared.models import Agent, Base, Iteration, LedgerEntry, LedgerKind, Project, new_id, utcnow
from shared.pricing import ModelPrice, cost_usd
from shared.usage import Usage

pytestmark = pytest.mark.unit

CENT = Decimal("0.01")
MICRO = Decimal("0.000001")
ITERATIONS = 4
THRESHOLD = 0.8


@pytest.fixture(scope="module")
def db() -> Iterator[Engine]:
    engine = create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
    Base.metadata.create_all(engine)
    yield engine
    engine.dispose()


def _new_project(db: Engine, limit: Decimal) -> tuple[str, list[str]]:
    """A project with ``limit`` and one agent with ITERATIONS iterations; their ids."""
    project_id, agent_id = new_id(), new_id()
    iteration_ids = [new_id() for _ in range(ITERATIONS)]
    with Session(db) as session, session.begin():
        session.add(
            Project(
                id=project_id, name="p", prompt="x", config={}, budget_limit_usd=limit, created_at=utcnow()
            )
        )
        session.add(Agent(id=agent_id, project_id=project_id, created_at=utcnow()))
        for number, iteration_id in enumerate(iteration_ids):
            session.add(Iteration(id=iteration_id, project_id=project_id, agent_id=agent_id, number=number))
    return project_id, iteration_ids


@dataclass
class Books:
    """What the database must say, kept in exact decimals beside it."""

    limit: Decimal
    spent: Decimal = Decimal(0)
    held: dict[str, Decimal] = field(default_factory=dict)
    in_flight: dict[str, Decimal] = field(default_factory=dict)  # the estimate of each open call
    actuals: list[Decimal] = field(default_factory=list)

    @property
    def reserved(self) -> Decimal:
        return sum(self.held.values(), Decimal(0))

    @property
    def remaining(self) -> Decimal:
        return self.limit - self.spent - self.reserved


def _check_database(db: Engine, project_id: str, books: Books) -> None:
    with Session(db) as session:
        project = session.get_one(Project, project_id)
        held = session.scalars(select(Iteration.reserved_usd).where(Iteration.project_id == project_id)).all()
        ledger = dict(
            session.execute(
                select(
                    LedgerEntry.kind, func.sum(LedgerEntry.amount_usd) - func.sum(LedgerEntry.released_usd)
                )
                .where(LedgerEntry.project_id == project_id)
                .group_by(LedgerEntry.kind)
            ).all()
        )
        spent, reserved = project.spent_usd, project.reserved_usd
    assert reserved >= 0
    assert all(amount >= 0 for amount in held)
    assert reserved == books.reserved == sum(held, Decimal(0))
    assert spent == books.spent == sum(books.actuals, Decimal(0))
    # The ledger alone accounts for both: reserved = reservations - releases, spent = settlements.
    reserve_total = Decimal(ledger.get(LedgerKind.RESERVE) or 0).quantize(MICRO)
    settle_net = Decimal(ledger.get(LedgerKind.SETTLE) or 0).quantize(MICRO)
    assert reserve_total + settle_net == spent + reserved


# One step: (iteration index, what it does, an amount in micro-dollars, a fraction of the estimate).
STEP = st.tuples(
    st.integers(0, ITERATIONS - 1),
    st.sampled_from(["send", "call", "settle", "fail", "finish"]),
    st.integers(1, 1_000_000),
    st.just(Fraction(1)) | st.fractions(0, 1, max_denominator=1000),  # calls often cost all they may
)


def _apply(db: Engine, project_id: str, iteration_id: str, books: Books, step: tuple) -> None:
    """One step as the coordinator (send) or a worker (call, settle, fail, finish) takes it."""
    _, action, micros, fraction = step
    amount = Decimal(micros) * MICRO
    with Session(db) as session, session.begin():
        if action == "send":  # the coordinator reserves an iteration's first call, on the locked row
            before = books.remaining
            project = session.scalars(select(Project).where(Project.id == project_id).with_for_update()).one()
            iteration = session.get_one(Iteration, iteration_id)
            admitted = budget.admit(session, project, iteration, amount)
            assert admitted or before <= 0, f"refused with {before} remaining"
            event("send admitted" if admitted else "send refused")
            if admitted:
                books.held[iteration_id] = books.held.get(iteration_id, Decimal(0)) + amount
        elif action == "call" and iteration_id not in books.in_flight:  # a worker tops up before a call
            before, held = books.remaining, books.held.get(iteration_id, Decimal(0))
            admitted = budget.top_up(session, project_id, iteration_id, amount)
            assert admitted or (held < amount and before <= 0), f"refused with {before} remaining"
            event("call admitted" if admitted else "call refused")
            if admitted:
                books.held[iteration_id] = max(held, amount)
                books.in_flight[iteration_id] = amount
        elif action == "settle" and iteration_id in books.in_flight:  # the call ends: actual <= estimate
            actual = (books.in_flight.pop(iteration_id) * fraction.numerator / fraction.denominator).quantize(
                MICRO
            )
            settlement = budget.settle(session, project_id, iteration_id, actual, THRESHOLD)
            books.held.pop(iteration_id, None)
            books.spent += actual
            books.actuals.append(actual)
            assert settlement.spent_usd == books.spent
        elif action in ("fail", "finish"):  # a failed call or the iteration's end releases, charges nothing
            budget.settle(session, project_id, iteration_id, Decimal(0), THRESHOLD)
            books.held.pop(iteration_id, None)
            books.in_flight.pop(iteration_id, None)


@settings(max_examples=40, deadline=None)
@given(
    limit_cents=st.integers(1, 300),
    steps=st.lists(STEP, min_size=20, max_size=60),
)
def test_any_interleaving_keeps_the_books_and_overruns_by_at_most_one_call(
    db: Engine, limit_cents: int, steps: list[tuple]
) -> None:
    limit = limit_cents * CENT
    project_id, iteration_ids = _new_project(db, limit)
    books = Books(limit=limit)

    for step in steps:
        _apply(db, project_id, iteration_ids[step[0]], books, step)
        _check_database(db, project_id, books)

    # When every iteration ends, every reservation is released and spend is bounded.
    for iteration_id in iteration_ids:
        _apply(db, project_id, iteration_id, books, (0, "finish", 1, 0))
    _check_database(db, project_id, books)
    assert books.reserved == 0
    event("overran the limit" if books.spent > limit else "within the limit")
    assert books.spent <= limit + max(books.actuals, default=Decimal(0))


@settings(max_examples=100, deadline=None)
@given(
    limit_cents=st.integers(1, 500),
    amounts=st.lists(st.integers(1, 2_000_000), min_size=1, max_size=30),
)
def test_a_reservation_is_refused_exactly_when_nothing_remains(
    db: Engine, limit_cents: int, amounts: list[int]
) -> None:
    # Given reservations that are never settled, each is admitted while anything remains.
    limit = limit_cents * CENT
    project_id, (iteration_id, *_) = _new_project(db, limit)
    reserved = Decimal(0)
    for micros in amounts:
        amount = Decimal(micros) * MICRO
        with Session(db) as session, session.begin():
            admitted = budget.reserve(session, project_id, iteration_id, amount)
            remaining = budget.remaining_usd(session, project_id)
        assert admitted == (limit - reserved > 0)
        reserved += amount if admitted else 0
        assert remaining == limit - reserved
    # The overrun of the last admitted reservation is less than that reservation.
    assert reserved < limit + max(amounts) * MICRO


PRICE = st.decimals(min_value=0, max_value=100, places=2)


@st.composite
def prices(draw: st.DrawFn) -> ModelPrice:
    """Any price row whose cache reads cost no more than input or cache writes (as every real one)."""
    price = ModelPrice(input=draw(PRICE), output=draw(PRICE), cache_write=draw(st.none() | PRICE))
    ceiling = max(price.input, price.cache_write_price())
    read = draw(st.none() | st.decimals(min_value=0, max_value=ceiling, places=2))
    return price.model_copy(update={"cache_read": read})


@settings(max_examples=300, deadline=None)
@given(
    price=prices(),
    split=st.tuples(st.integers(0, 200_000), st.integers(0, 200_000), st.integers(0, 200_000)),
    max_output=st.integers(1, 64_000),
    used_output=st.integers(0, 64_000),
)
def test_no_call_within_its_limits_costs_more_than_its_estimate(
    price: ModelPrice, split: tuple[int, int, int], max_output: int, used_output: int
) -> None:
    # Given a call whose input is split any way between plain, cache-written and cache-read
    # tokens, and whose output is at most max_tokens
    plain, written, read = split
    usage = Usage(
        input_tokens=plain,
        cache_creation_input_tokens=written,
        cache_read_input_tokens=read,
        output_tokens=min(used_output, max_output),
    )
    # Then what it costs is at most what was reserved for it
    assert cost_usd(usage, price) <= budget.call_estimate_usd(price, plain + written + read, max_output)


# Defects found by these properties, fixed, and kept as tests.


def test_an_estimate_covers_a_call_whose_cache_reads_are_priced_above_input() -> None:
    price = ModelPrice(input=Decimal(0), output=Decimal(0), cache_read=Decimal("0.01"))
    usage = Usage(cache_read_input_tokens=51)
    assert cost_usd(usage, price) <= budget.call_estimate_usd(price, 51, 1)


def test_a_budget_reserved_to_the_cent_admits_nothing_more(db: Engine) -> None:
    project_id, (iteration_id, *_) = _new_project(db, Decimal("1.00"))
    with Session(db) as session, session.begin():
        admitted = [budget.reserve(session, project_id, iteration_id, Decimal("0.1")) for _ in range(11)]
    assert admitted == [True] * 10 + [False]
