"""Admission (orchestrator/scheduling/admission.py): which waiting iterations go to the workers.

A project has at most ``max_parallel`` iterations queued or running; only one iteration of a
non-parallel agent (a writer of the workspace) at a time; and none is sent without a reservation
of its first call's worst case, the project pausing when nothing in flight can give money back.
Specs on a migrated SQLite file; no service, no worker: an iteration in flight is ended by hand.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import select

from orchestrator.scheduling.admission import pump, schedule
from orchestrator.scheduling.lookup import get_project_row
from orchestrator.scheduling.outbox import transaction
from shared import budget, events
from shared.db import session_scope
from shared.events import NullBus
from shared.models import (
    Agent,
    Iteration,
    IterationStatus,
    LedgerEntry,
    LedgerKind,
    Project,
    ProjectStatus,
    utcnow,
)
from shared.pricing import find_price
from shared.project_config import ProjectConfig
from tests.support.coordinator import RecordingDispatcher, migrated_template, sqlite_database, waiting

pytestmark = pytest.mark.unit

CONFIG = ProjectConfig()
PRICE = find_price(CONFIG.model)
assert PRICE is not None
FIRST_CALL_USD = budget.call_estimate_usd(PRICE, budget.DEFAULT_INPUT_TOKENS, CONFIG.max_tokens)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return migrated_template(tmp_path_factory.mktemp("admission"))


@pytest.fixture(autouse=True)
def database(template: Path, tmp_path: Path) -> Iterator[str]:
    with sqlite_database(template, tmp_path / "raas.db") as url:
        yield url


def running_project(config: ProjectConfig = CONFIG, *, limit_usd: Decimal = Decimal(5)) -> str:
    with session_scope() as session:
        project = Project(
            name="spec",
            prompt="Do the work.",
            config=config.model_dump(mode="json"),
            status=ProjectStatus.RUNNING,
            budget_limit_usd=limit_usd,
            created_at=utcnow(),
            started_at=utcnow(),
        )
        session.add(project)
        session.flush()
        return project.id


def agents(project_id: str, category: str, count: int) -> list[str]:
    """``count`` agents of a default category (searchers run in parallel, builders write)."""
    with session_scope() as session:
        rows = [
            Agent(
                project_id=project_id,
                category=category,
                parallel=CONFIG.category(category).parallel,
                created_at=utcnow(),
            )
            for _ in range(count)
        ]
        session.add_all(rows)
        session.flush()
        return [row.id for row in rows]


def schedule_each(
    project_id: str, agent_ids: list[str], config: ProjectConfig = CONFIG
) -> tuple[list[str], list[bool]]:
    """Schedule every agent's first iteration, one transaction each, as advances do; what each
    transaction sent, and whether the project still ran after each."""
    dispatcher, still_running = RecordingDispatcher(), []
    for agent_id in agent_ids:
        with transaction(dispatcher, NullBus()) as out:
            project = get_project_row(out.session, project_id, lock=True)
            still_running.append(schedule(out, project, config, agent_id, 1))
    return dispatcher.sent, still_running


def pump_again(project_id: str, config: ProjectConfig = CONFIG) -> list[str]:
    dispatcher = RecordingDispatcher()
    with transaction(dispatcher, NullBus()) as out:
        pump(out, get_project_row(out.session, project_id, lock=True), config)
    return dispatcher.sent


def end(iteration_id: str) -> None:
    """What a worker's finish does to admission: the iteration is over, its reservation back."""
    with session_scope() as session:
        iteration = session.get_one(Iteration, iteration_id)
        iteration.status = IterationStatus.SUCCEEDED
        budget.release(session, iteration.project_id, iteration_id)


def agent_of(iteration_id: str) -> str:
    with session_scope() as session:
        return session.get_one(Iteration, iteration_id).agent_id


def project(project_id: str) -> Project:
    with session_scope() as session:
        return session.get_one(Project, project_id)


# --- max_parallel -------------------------------------------------------------------------------


def test_no_more_than_max_parallel_iterations_of_a_project_are_sent() -> None:
    config = ProjectConfig(max_parallel=2)
    project_id = running_project(config)
    sent, _ = schedule_each(project_id, agents(project_id, "searcher", 5), config)
    assert len(sent) == 2
    assert len(waiting(project_id)) == 3  # in the database, not in the queue


def test_a_waiting_iteration_is_sent_when_one_in_flight_ends() -> None:
    # Given two searchers in flight at max_parallel = 2, and a third waiting
    config = ProjectConfig(max_parallel=2)
    project_id = running_project(config)
    sent, _ = schedule_each(project_id, agents(project_id, "searcher", 3), config)
    (held,) = waiting(project_id)
    # When one ends, the next pump sends the one that waited
    end(sent[0])
    assert pump_again(project_id, config) == [held.id]
    assert waiting(project_id) == []


def test_the_oldest_waiting_iteration_is_sent_first() -> None:
    config = ProjectConfig(max_parallel=1)
    project_id = running_project(config)
    searchers = agents(project_id, "searcher", 3)
    sent, _ = schedule_each(project_id, searchers, config)
    end(sent[0])
    (second,) = pump_again(project_id, config)
    assert agent_of(second) == searchers[1]


def test_iterations_running_on_workers_count_against_max_parallel() -> None:
    # Given one iteration claimed by a worker (running) and the limit at 1
    config = ProjectConfig(max_parallel=1)
    project_id = running_project(config)
    first, second = agents(project_id, "searcher", 2)
    sent, _ = schedule_each(project_id, [first], config)
    with session_scope() as session:
        session.get_one(Iteration, sent[0]).status = IterationStatus.RUNNING
    # When another is scheduled, it waits
    assert schedule_each(project_id, [second], config)[0] == []


# --- one writer of the workspace ----------------------------------------------------------------


def test_a_second_builder_waits_while_one_writes_the_workspace() -> None:
    project_id = running_project()
    first, second = agents(project_id, "builder", 2)
    sent, _ = schedule_each(project_id, [first, second])
    assert [agent_of(iteration_id) for iteration_id in sent] == [first]
    assert [row.agent_id for row in waiting(project_id)] == [second]


def test_the_waiting_builder_is_sent_once_the_writer_has_finished() -> None:
    project_id = running_project()
    first, second = agents(project_id, "builder", 2)
    sent, _ = schedule_each(project_id, [first, second])
    end(sent[0])
    (next_sent,) = pump_again(project_id)
    assert agent_of(next_sent) == second


def test_parallel_agents_run_beside_the_writer_and_do_not_wait_for_it() -> None:
    # Given a builder in flight
    project_id = running_project(ProjectConfig(max_parallel=4))
    (builder,) = agents(project_id, "builder", 1)
    searchers = agents(project_id, "searcher", 2)
    # When two read-only searchers and another builder are scheduled
    (other_builder,) = agents(project_id, "builder", 1)
    sent, _ = schedule_each(project_id, [builder, *searchers, other_builder])
    # Then the searchers go beside the writer; only the second writer waits
    assert {agent_of(iteration_id) for iteration_id in sent} == {builder, *searchers}
    assert [row.agent_id for row in waiting(project_id)] == [other_builder]


def test_a_waiting_writer_does_not_hold_back_parallel_agents_behind_it() -> None:
    config = ProjectConfig(max_parallel=3)
    project_id = running_project(config)
    first, second = agents(project_id, "builder", 2)
    (searcher,) = agents(project_id, "searcher", 1)
    sent, _ = schedule_each(project_id, [first, second, searcher], config)
    assert [agent_of(iteration_id) for iteration_id in sent] == [first, searcher]


# --- the budget gate ----------------------------------------------------------------------------


def test_sending_an_iteration_reserves_its_first_calls_worst_case() -> None:
    project_id = running_project()
    sent, _ = schedule_each(project_id, agents(project_id, "builder", 1))
    with session_scope() as session:
        iteration = session.get_one(Iteration, sent[0])
        ledger = session.scalars(select(LedgerEntry).where(LedgerEntry.project_id == project_id)).all()
    assert iteration.reserved_usd == FIRST_CALL_USD
    assert project(project_id).reserved_usd == FIRST_CALL_USD
    assert [(entry.kind, entry.amount_usd, entry.iteration_id) for entry in ledger] == [
        (LedgerKind.RESERVE, FIRST_CALL_USD, sent[0])
    ]


def test_iterations_are_sent_while_the_budget_pays_a_smallest_call_and_never_overrun_it() -> None:
    # Given room for one and a half first calls (the half more than a smallest call)
    project_id = running_project(limit_usd=FIRST_CALL_USD * 3 / 2)
    assert budget.smallest_call_usd(PRICE) <= FIRST_CALL_USD / 2
    # When three searchers are scheduled
    sent, still_running = schedule_each(project_id, agents(project_id, "searcher", 3))
    # Then two go, the second holding only what was left; the third waits for money back
    assert len(sent) == 2
    assert len(waiting(project_id)) == 1
    assert still_running == [True, True, True]
    assert project(project_id).reserved_usd == FIRST_CALL_USD * 3 / 2


def test_an_iteration_is_not_sent_when_what_is_left_cannot_pay_a_smallest_call() -> None:
    # Given a first call in flight, and less than a smallest call left besides
    smallest = budget.smallest_call_usd(PRICE)
    project_id = running_project(limit_usd=FIRST_CALL_USD + smallest / 2)
    first, second = agents(project_id, "searcher", 2)
    assert len(schedule_each(project_id, [first])[0]) == 1
    # When another is scheduled, it waits: nothing is held for a call that could not be made
    sent, still_running = schedule_each(project_id, [second])
    assert sent == []
    assert still_running == [True]
    assert project(project_id).reserved_usd == FIRST_CALL_USD


def test_with_the_budget_spent_and_nothing_in_flight_the_project_pauses() -> None:
    project_id = running_project(limit_usd=Decimal(1))
    with session_scope() as session:
        session.get_one(Project, project_id).spent_usd = Decimal(1)
    sent, still_running = schedule_each(project_id, agents(project_id, "builder", 1))
    assert sent == []
    assert still_running == [False]
    assert project(project_id).status == ProjectStatus.PAUSED
    with session_scope() as session:
        assert events.BUDGET_EXCEEDED in [event.type for event in events.history(session, project_id)]


def test_with_the_budget_held_by_work_in_flight_the_next_iteration_waits_without_pausing() -> None:
    # Given an iteration in flight holding all that is left of the budget
    project_id = running_project(limit_usd=FIRST_CALL_USD)
    first, second = agents(project_id, "searcher", 2)
    sent, _ = schedule_each(project_id, [first])
    assert len(sent) == 1
    # When another is scheduled, it waits: the one in flight may give money back when it settles
    sent, still_running = schedule_each(project_id, [second])
    assert sent == []
    assert still_running == [True]
    assert project(project_id).status == ProjectStatus.RUNNING
    # And once the first ends and gives its reservation back, the second goes
    end(agent_iteration(first))
    assert len(pump_again(project_id)) == 1


def agent_iteration(agent_id: str) -> str:
    with session_scope() as session:
        return session.scalars(select(Iteration.id).where(Iteration.agent_id == agent_id)).one()


# --- the circuit breaker before scheduling --------------------------------------------------------


def test_no_iteration_is_added_while_the_circuit_breaker_is_open() -> None:
    # Given a breaker opened a moment ago (its cooldown not over)
    project_id = running_project()
    with session_scope() as session:
        session.get_one(Project, project_id).breaker = {
            "state": "open",
            "opened_at": utcnow().isoformat(),
            "reason": "no_progress",
            "no_progress": 3,
        }
    # When the builder's next iteration is scheduled
    sent, still_running = schedule_each(project_id, agents(project_id, "builder", 1))
    # Then none is added and the project pauses, saying why
    assert (sent, still_running) == ([], [False])
    assert waiting(project_id) == []
    assert project(project_id).status == ProjectStatus.PAUSED
