"""A failed iteration gives back what it held in reservation, whoever fails it.

The coordinator reserves an iteration's first call before it sends it (DESIGN.md rule 1). A
worker that ends the iteration settles that reservation itself; when the worker is gone — dead
past its attempt limit, or a stopped project's straggler that never ended — the coordinator
fails the iteration, and the money it held must come back to the project, or the project's
remaining budget shrinks for good with every lost worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import update

from orchestrator.scheduling import lifecycle
from orchestrator.scheduling.reconcile import Reconciler
from shared.db import session_scope
from shared.models import Iteration, IterationStatus, Project, ProjectStatus, utcnow
from tests.support.engine import Engine, engine
from workers.claim import claim_iteration

pytestmark = [pytest.mark.integration, pytest.mark.docker]

COMPLETE = {
    "responses": [{"content": [{"type": "tool_use", "name": "task_complete", "input": {"summary": "ok"}}]}],
    "when_exhausted": "repeat_last",
}


@pytest.fixture
def eng(services: dict[str, str], tmp_path: Path) -> Iterator[Engine]:
    with engine(COMPLETE, tmp_path) as running:
        yield running


def _set(model: type[Project] | type[Iteration], row_id: str, **fields: object) -> None:
    with session_scope() as session:
        session.execute(update(model).where(model.id == row_id).values(**fields))


def _reserved(project_id: str, iteration_id: str) -> tuple[Decimal, Decimal]:
    """What the project and the iteration hold in reservation."""
    with session_scope() as session:
        project = session.get_one(Project, project_id)
        iteration = session.get_one(Iteration, iteration_id)
        return project.reserved_usd, iteration.reserved_usd


def _claimed_by_a_worker(eng: Engine, project_id: str, celery_task_id: str | None = None) -> str:
    """The project's first iteration, sent with its first call reserved and claimed by a worker."""
    iteration_id = eng.dispatcher.take(project_id)
    assert iteration_id is not None
    claimed = claim_iteration(iteration_id, "doomed-worker", stale_after_s=30, celery_task_id=celery_task_id)
    assert claimed is not None
    project_reserved, iteration_reserved = _reserved(project_id, iteration_id)
    assert project_reserved == iteration_reserved > 0
    return iteration_id


def test_an_iteration_failed_for_a_lost_worker_releases_its_reservation(eng: Engine) -> None:
    # Given a running iteration, holding its first call's reservation, whose worker died on its
    # last allowed attempt
    project_id = eng.submit()
    iteration_id = _claimed_by_a_worker(eng, project_id)
    _set(
        Iteration,
        iteration_id,
        attempt=eng.settings.max_iteration_attempts,
        heartbeat_at=utcnow() - timedelta(minutes=10),
    )

    # When the reconcile loop fails it
    report = Reconciler(eng.settings, eng.dispatcher, eng.bus).run_once()

    # Then nothing stays reserved for it: not on the iteration, not on the project
    assert iteration_id in report.failed
    assert _reserved(project_id, iteration_id) == (Decimal(0), Decimal(0))

    # And the project's next iteration runs to the end with nothing left reserved
    _set(Iteration, iteration_id, finished_at=utcnow() - timedelta(minutes=1))
    assert iteration_id in Reconciler(eng.settings, eng.dispatcher, eng.bus).run_once().advanced
    eng.run_to_end(project_id)
    with session_scope() as session:
        project = session.get_one(Project, project_id)
        assert (project.status, project.reserved_usd) == (ProjectStatus.COMPLETED, Decimal(0))


def test_a_running_iteration_terminated_after_raas_stop_releases_its_reservation(eng: Engine) -> None:
    # Given a running iteration, holding its first call's reservation, of a project stopped long
    # enough ago that the iteration counts as a straggler
    project_id = eng.submit()
    iteration_id = _claimed_by_a_worker(eng, project_id, celery_task_id="celery-task-1")
    lifecycle.stop_project(project_id, eng.dispatcher, eng.bus)
    _set(Project, project_id, finished_at=utcnow() - timedelta(minutes=1))

    # When the reconcile loop terminates it
    terminated: list[str] = []
    report = Reconciler(eng.settings, eng.dispatcher, eng.bus, terminate=terminated.append).run_once()

    # Then it is failed, its Celery task is terminated, and nothing stays reserved
    assert iteration_id in report.terminated
    assert terminated == ["celery-task-1"]
    with session_scope() as session:
        assert session.get_one(Iteration, iteration_id).status == IterationStatus.FAILED
    assert _reserved(project_id, iteration_id) == (Decimal(0), Decimal(0))


def test_a_queued_iteration_dropped_by_raas_stop_releases_its_reservation(eng: Engine) -> None:
    # Given an iteration sent with its first call reserved, that no worker has claimed yet
    project_id = eng.submit()
    iteration_id = eng.dispatcher.take(project_id)
    assert iteration_id is not None
    assert _reserved(project_id, iteration_id)[0] > 0

    # When the project is stopped
    lifecycle.stop_project(project_id, eng.dispatcher, eng.bus)

    # Then the iteration is failed and nothing stays reserved
    with session_scope() as session:
        assert session.get_one(Iteration, iteration_id).status == IterationStatus.FAILED
    assert _reserved(project_id, iteration_id) == (Decimal(0), Decimal(0))
