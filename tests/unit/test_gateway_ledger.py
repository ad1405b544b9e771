"""The gateway's reservation and settlement on SQLite (the embedded mode, where they are three
statements in one transaction; Postgres runs one statement, checked by tests/integration/
test_gateway.py): a call reserves only while the project runs and some budget remains, and
settles exactly what it holds, whatever later calls of the lease hold meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest
from sqlalchemy import Engine, create_engine, select
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from shared import budget
from shared.models import (
    Agent,
    Base,
    Iteration,
    LedgerEntry,
    LedgerKind,
    Project,
    ProjectStatus,
    new_id,
    utcnow,
)

pytestmark = pytest.mark.unit


@pytest.fixture
def db() -> Iterator[Engine]:
    engine = create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
    Base.metadata.create_all(engine)
    yield engine
    engine.dispose()


def _project(db: Engine, limit: str, status: ProjectStatus = ProjectStatus.RUNNING) -> tuple[str, str]:
    project_id, agent_id, iteration_id = new_id(), new_id(), new_id()
    with Session(db) as session, session.begin():
        session.add(
            Project(
                id=project_id,
                name="p",
                prompt="x",
                config={},
                status=status,
                budget_limit_usd=Decimal(limit),
                created_at=utcnow(),
            )
        )
        session.add(Agent(id=agent_id, project_id=project_id, created_at=utcnow()))
        session.add(Iteration(id=iteration_id, project_id=project_id, agent_id=agent_id, number=1))
    return project_id, iteration_id


def _reserve(db: Engine, project_id: str, iteration_id: str, amount: str) -> bool | None:
    with Session(db) as session, session.begin():
        return budget.reserve_if_running(session.connection(), project_id, iteration_id, Decimal(amount))


def _held(db: Engine, project_id: str, iteration_id: str) -> tuple[Decimal, Decimal, Decimal]:
    with Session(db) as session:
        project = session.get_one(Project, project_id)
        iteration = session.get_one(Iteration, iteration_id)
        return project.reserved_usd, iteration.reserved_usd, project.spent_usd


def test_a_call_settles_what_it_holds_while_the_next_one_holds_its_own(db: Engine) -> None:
    project_id, iteration_id = _project(db, "1")
    # Given two calls of one lease, each reserving its worst case
    assert _reserve(db, project_id, iteration_id, "0.30") is True
    assert _reserve(db, project_id, iteration_id, "0.20") is True
    assert _held(db, project_id, iteration_id) == (Decimal("0.5"), Decimal("0.5"), Decimal(0))

    # When the first is settled, the second not yet
    with Session(db) as session, session.begin():
        budget.settle(session, project_id, iteration_id, Decimal("0.01"), 0.8, held=Decimal("0.30"))

    # Then only the first's reservation is given back, and the ledger says so
    assert _held(db, project_id, iteration_id) == (Decimal("0.2"), Decimal("0.2"), Decimal("0.01"))
    with Session(db) as session:
        kinds = [entry.kind for entry in session.scalars(select(LedgerEntry).order_by(LedgerEntry.id))]
    assert kinds == [LedgerKind.RESERVE, LedgerKind.RESERVE, LedgerKind.SETTLE]


def test_a_release_never_gives_back_more_than_the_iteration_holds(db: Engine) -> None:
    project_id, iteration_id = _project(db, "1")
    assert _reserve(db, project_id, iteration_id, "0.30") is True
    # Given the sweeper released everything the iteration held
    with Session(db) as session, session.begin():
        budget.release(session, project_id, iteration_id)
    # When the call's own release comes after
    with Session(db) as session, session.begin():
        budget.release(session, project_id, iteration_id, held=Decimal("0.30"))
    # Then nothing goes below zero
    assert _held(db, project_id, iteration_id) == (Decimal(0), Decimal(0), Decimal(0))


@pytest.mark.parametrize(
    ("limit", "status", "expected"),
    [
        ("0", ProjectStatus.RUNNING, False),
        ("1", ProjectStatus.PAUSED, None),
        ("1", ProjectStatus.STOPPED, None),
    ],
)
def test_a_spent_budget_or_a_project_not_running_reserves_nothing(
    db: Engine, limit: str, status: ProjectStatus, expected: bool | None
) -> None:
    project_id, iteration_id = _project(db, limit, status)
    assert _reserve(db, project_id, iteration_id, "0.30") is expected
    assert _held(db, project_id, iteration_id) == (Decimal(0), Decimal(0), Decimal(0))
