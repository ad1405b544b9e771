"""The one ledger (issue #23): budgets are never exceeded, not even by one call — one spec, run on
SQLite (the embedded mode) and on Postgres alike.

The real :class:`workers.ledger.CallLedger` and the coordinator's first hold
(:func:`shared.budget.admit`) run against a real database, each step in its own transactions as
the workers and the coordinator do. Hypothesis draws the limit, the calls (their size, their
output limit, what they then use within it) and their order across iterations; after every step
the database must hold ``spent + reserved <= limit``, nothing reserved below zero, and every
call charged once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from shared import budget
from shared.db import session_scope
from shared.errors import BudgetExceeded, ProjectNotRunning
from shared.migrate import upgrade
from shared.models import Agent, Iteration, IterationStatus, Message, Project, ProjectStatus, new_id, utcnow
from shared.pricing import cost_usd, find_price
from shared.project_config import ProjectConfig
from shared.usage import Usage
from workers.claim import Claim
from workers.ledger import CallLedger, Ticket, input_bound

pytestmark = pytest.mark.integration

CONFIG = ProjectConfig()
MODEL = CONFIG.model
PRICE = find_price(MODEL)
assert PRICE is not None
# SQLite keeps money as floating point: equal within a microdollar's half.
SLACK = Decimal("0.0000005")


@pytest.fixture(params=["sqlite", "postgres"], scope="module")
def url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "postgres":
        yield request.getfixturevalue("database_url")
        return
    path: Path = tmp_path_factory.mktemp("ledger") / "raas.db"
    sqlite_url = f"sqlite:///{path}"
    upgrade(sqlite_url)
    yield sqlite_url


def _project(url: str, limit: Decimal, iterations: int) -> tuple[str, list[Claim]]:
    """A running project with ``limit`` and ``iterations`` running iterations; their claims."""
    project_id, agent_id = new_id(), new_id()
    ids = [new_id() for _ in range(iterations)]
    with session_scope(url) as session:
        session.add(
            Project(
                id=project_id,
                name="p",
                prompt="x",
                config={},
                status=ProjectStatus.RUNNING,
                budget_limit_usd=limit,
                created_at=utcnow(),
            )
        )
        session.flush()
        session.add(Agent(id=agent_id, project_id=project_id, created_at=utcnow()))
        session.flush()
        for number, iteration_id in enumerate(ids, 1):
            session.add(
                Iteration(
                    id=iteration_id,
                    project_id=project_id,
                    agent_id=agent_id,
                    number=number,
                    status=IterationStatus.RUNNING,
                    attempt=1,
                )
            )
    claims = [
        _claim(project_id, agent_id, iteration_id, number) for number, iteration_id in enumerate(ids, 1)
    ]
    return project_id, claims


def _claim(project_id: str, agent_id: str, iteration_id: str, number: int) -> Claim:
    return Claim(
        project_id=project_id,
        iteration_id=iteration_id,
        agent_id=agent_id,
        number=number,
        attempt=1,
        project_name="p",
        prompt="x",
        task_title="t",
        task_description="",
        config=CONFIG,
        memory_bank="",
    )


def _hold(url: str, claim: Claim, amount: Decimal) -> bool:
    """The coordinator's first hold for ``claim``'s iteration."""
    with session_scope(url) as session:
        project = session.get_one(Project, claim.project_id, with_for_update=True)
        iteration = session.get_one(Iteration, claim.iteration_id)
        assert PRICE is not None
        return budget.admit(session, project, iteration, amount, budget.smallest_call_usd(PRICE))


@dataclass
class Books:
    """What the spec expects: every settled call charged once."""

    charged: Decimal = Decimal(0)
    calls: int = 0
    open: list[tuple[CallLedger, Ticket]] = field(default_factory=list)


def _check(url: str, project_id: str, books: Books) -> None:
    with session_scope(url) as session:
        project = session.get_one(Project, project_id)
        held = session.scalar(
            select(func.coalesce(func.sum(Iteration.reserved_usd), 0)).where(
                Iteration.project_id == project_id
            )
        )
        answers = session.execute(
            select(func.count(), func.coalesce(func.sum(Message.cost_usd), 0)).where(
                Message.project_id == project_id, Message.role == "assistant"
            )
        ).one()
        assert project.spent_usd + project.reserved_usd <= project.budget_limit_usd + SLACK
        assert project.reserved_usd >= -SLACK
        assert abs(Decimal(held) - project.reserved_usd) <= SLACK
        assert (
            session.scalar(select(func.min(Iteration.reserved_usd)).where(Iteration.project_id == project_id))
            >= -SLACK
        )
        # Every call charged once: one answer each, and the spend is their sum.
        assert answers[0] == books.calls
        assert abs(Decimal(answers[1]) - books.charged) <= SLACK
        assert abs(project.spent_usd - books.charged) <= SLACK


def _usage(draw: st.DrawFn, ticket: Ticket) -> Usage:
    """What the call used: within what it may (its input bound, its output limit), split at
    random between plain input, cache writes and cache reads."""
    tokens = draw(st.integers(0, ticket.input_tokens))
    written = draw(st.integers(0, tokens))
    read = draw(st.integers(0, tokens - written))
    return Usage(
        input_tokens=tokens - written - read,
        cache_creation_input_tokens=written,
        cache_read_input_tokens=read,
        output_tokens=draw(st.integers(0, ticket.max_output_tokens)),
    )


def _worst(ticket: Ticket) -> Usage:
    """All a call may use: its whole input bound written to the cache, its whole output limit."""
    return Usage(cache_creation_input_tokens=ticket.input_tokens, output_tokens=ticket.max_output_tokens)


STEPS = st.lists(
    st.tuples(
        st.sampled_from(["hold", "admit", "admit", "admit", "settle", "settle", "release", "end"]),
        st.integers(0, 3),  # which iteration
        st.integers(200, 60_000),  # the request's bytes
        st.integers(1, 32_000),  # the output limit asked for
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(limit=st.decimals(Decimal("0.01"), Decimal("3"), places=4), steps=STEPS, data=st.data())
def test_any_interleaving_keeps_spent_and_reserved_within_the_limit(
    url: str, limit: Decimal, steps: list[tuple[str, int, int, int]], data: st.DataObject
) -> None:
    project_id, claims = _project(url, limit, 4)
    ledgers = [CallLedger(claim, wait_s=0, url=url) for claim in claims]
    books = Books()
    for op, which, size, asked in steps:
        ledger, claim = ledgers[which], claims[which]
        if op == "hold":
            assert PRICE is not None
            event(f"hold admitted: {_hold(url, claim, budget.call_estimate_usd(PRICE, 4_000, asked))}")
        elif op == "admit":
            try:
                ticket = ledger.admit(MODEL, size, asked)
            except BudgetExceeded:
                event("refused")
            else:
                assert ticket.max_output_tokens <= asked
                assert ticket.max_output_tokens >= min(budget.FLOOR_OUTPUT_TOKENS, asked)
                event("lowered" if ticket.lowered else "admitted whole")
                books.open.append((ledger, ticket))
        elif op in ("settle", "release") and books.open:
            owner, ticket = books.open.pop(data.draw(st.integers(0, len(books.open) - 1)))
            if op == "settle":
                usage = _usage(data.draw, ticket)
                owner.settle(ticket, [{"type": "text", "text": "ok"}], usage, model=MODEL)
                assert PRICE is not None
                books.charged += cost_usd(usage, PRICE)
                books.calls += 1
                # A settlement asked for again charges nothing more.
                assert owner.settle(ticket, [], usage, model=MODEL) is None
            else:
                owner.release(ticket)
        elif op == "end":
            # The iteration's end gives back what it holds (its calls' ended or not: a dead worker).
            with session_scope(url) as session:
                budget.release(session, claim.project_id, claim.iteration_id)
            books.open = [(owner, t) for owner, t in books.open if owner is not ledger]
            # Its next run is another attempt, with a ledger of its own.
            claims[which] = replace(claim, attempt=claim.attempt + 1)
            ledgers[which] = CallLedger(claims[which], wait_s=0, url=url)
        _check(url, project_id, books)


def test_a_call_never_counts_its_own_iterations_hold_against_itself(url: str) -> None:
    # Given a limit the coordinator's first hold takes whole
    assert PRICE is not None
    first_call = budget.call_estimate_usd(PRICE, 4_000, 8_192)
    project_id, (claim,) = _project(url, first_call, 1)
    assert _hold(url, claim, first_call)
    # When the iteration's first call asks for that much and more
    ticket = CallLedger(claim, wait_s=0, url=url).admit(MODEL, 10_000, 32_000)
    # Then it draws on the hold, lowered to what the hold pays, rather than being refused
    assert ticket.lowered
    assert ticket.held <= first_call
    with session_scope(url) as session:
        assert session.get_one(Project, project_id).reserved_usd == first_call


def test_a_call_the_remainder_cannot_pay_is_lowered_then_refused_below_the_floor(url: str) -> None:
    assert PRICE is not None
    floor_call = budget.call_estimate_usd(PRICE, input_bound(1_000), budget.FLOOR_OUTPUT_TOKENS)
    # Given room for a floor-sized call and a half
    project_id, (claim,) = _project(url, floor_call * 3 / 2, 1)
    ledger = CallLedger(claim, wait_s=0, url=url)
    # When a call asks for 32,000 tokens, it is sent asking for what the budget pays
    ticket = ledger.admit(MODEL, 1_000, 32_000)
    assert budget.FLOOR_OUTPUT_TOKENS <= ticket.max_output_tokens < 32_000
    # And with it settled at its worst, the next call no longer fits: refused
    worst = Usage(
        input_tokens=0,
        cache_creation_input_tokens=ticket.input_tokens,
        output_tokens=ticket.max_output_tokens,
    )
    ledger.settle(ticket, [], worst, model=MODEL)
    with pytest.raises(BudgetExceeded):
        ledger.admit(MODEL, 1_000, 32_000)
    with session_scope(url) as session:
        project = session.get_one(Project, project_id)
        assert project.spent_usd <= project.budget_limit_usd
        assert project.budget_limit_usd - project.spent_usd < floor_call


def test_a_refusal_waits_for_the_attempts_earlier_call_to_settle(url: str) -> None:
    # Given a call whose worst case holds the whole budget, its settlement still to be written
    assert PRICE is not None
    limit = budget.call_estimate_usd(PRICE, input_bound(2_000), 4_096)
    _, (claim,) = _project(url, limit, 1)
    written = threading.Event()
    held: list[Ticket] = []

    def drain() -> None:  # the gateway's recorder writing the held-back settlement
        ledger.settle(held[0], [], Usage(input_tokens=100, output_tokens=10), model=MODEL)
        written.set()

    ledger = CallLedger(claim, drain=drain, wait_s=5, url=url)
    held.append(ledger.admit(MODEL, 2_000, 4_096))
    # When the next call is admitted
    second = ledger.admit(MODEL, 2_000, 4_096)
    # Then the earlier one was settled first, and the second was not refused
    assert written.is_set()
    assert second.held > 0


def test_two_iterations_short_of_a_call_do_not_wait_for_each_others_hold(url: str) -> None:
    # Given two running iterations, each holding a first hold that alone cannot pay the call it
    # wants, though the two together can
    assert PRICE is not None
    size = 11_000
    call = budget.call_estimate_usd(PRICE, input_bound(size), budget.FLOOR_OUTPUT_TOKENS)
    hold = call * 3 / 4
    _, claims = _project(url, hold * 2 + Decimal("0.001"), 2)
    for claim in claims:
        assert _hold(url, claim, hold)
    ledgers = [CallLedger(claim, wait_s=60, poll_s=0.05, url=url) for claim in claims]
    admitted: list[Ticket] = []
    refused: list[BaseException] = []

    def one(ledger: CallLedger) -> None:
        try:
            ticket = ledger.admit(MODEL, size, budget.FLOOR_OUTPUT_TOKENS)
        except BudgetExceeded as exc:
            refused.append(exc)
            return
        admitted.append(ticket)
        ledger.settle(ticket, [], Usage(input_tokens=10, output_tokens=10), model=MODEL)

    # When both call at once
    threads = [threading.Thread(target=one, args=(ledger,)) for ledger in ledgers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    # Then one waiting gave its idle hold back and both calls were made, one after the other
    # (holding on to it, each waited for the other's until its wait ran out: both refused)
    assert refused == []
    assert len(admitted) == 2


def test_a_paused_project_refuses_its_calls(url: str) -> None:
    project_id, (claim,) = _project(url, Decimal(5), 1)
    with session_scope(url) as session:
        session.get_one(Project, project_id).status = ProjectStatus.PAUSED
    with pytest.raises(ProjectNotRunning):
        CallLedger(claim, wait_s=0, url=url).admit(MODEL, 1_000, 1_000)


def test_calls_from_many_threads_never_spend_more_than_the_limit(url: str) -> None:
    # Given 8 iterations on 8 threads (workers) calling until the budget refuses them
    limit = Decimal("0.9")
    project_id, claims = _project(url, limit, 8)
    errors: list[BaseException] = []

    def worker(claim: Claim) -> None:
        ledger = CallLedger(claim, wait_s=0, url=url)
        try:
            while True:
                ticket = ledger.admit(MODEL, 6_000, 8_192)
                # Each uses all it may: the worst case, charged in full
                usage = Usage(
                    cache_creation_input_tokens=ticket.input_tokens, output_tokens=ticket.max_output_tokens
                )
                ledger.settle(ticket, [], usage, model=MODEL)
        except BudgetExceeded:
            return
        except BaseException as exc:  # the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(claim,)) for claim in claims]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors
    # Then the spend reached the limit but never passed it, and nothing is left reserved
    with session_scope(url) as session:
        project = session.get_one(Project, project_id)
        assert project.spent_usd <= limit
        assert project.reserved_usd <= SLACK
        assert PRICE is not None
        assert limit - project.spent_usd < budget.call_estimate_usd(
            PRICE, input_bound(6_000), budget.FLOOR_OUTPUT_TOKENS
        )
