"""Recovery: the reconcile loop re-runs iterations whose worker died, fails those past their
attempt limit, resends lost messages and reports, terminates a stopped project's stragglers;
the worker's sweep removes sandboxes whose iteration no longer runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import docker
import pytest
from sqlalchemy import select, update

from orchestrator.scheduling import lifecycle
from orchestrator.scheduling.reconcile import Reconciler
from shared.db import session_scope
from shared.models import ErrorKind, Iteration, IterationStatus, Project, ProjectStatus, utcnow
from tests.support.engine import Engine, engine
from workers.claim import claim_iteration
from workers.sandbox.base import SandboxLimits
from workers.sandbox.docker import DockerSandbox
from workers.sandbox.reaper import reap
from workers.sandbox.sweeper import cluster_id, is_live

pytestmark = [pytest.mark.integration, pytest.mark.docker]

COMPLETE = {
    "responses": [{"content": [{"type": "tool_use", "name": "task_complete", "input": {"summary": "ok"}}]}],
    "when_exhausted": "repeat_last",
}


@pytest.fixture
def eng(services: dict[str, str], tmp_path: Path) -> Iterator[Engine]:
    with engine(COMPLETE, tmp_path) as running:
        yield running


def _reconciler(eng: Engine, terminated: list[str] | None = None) -> Reconciler:
    sink = terminated if terminated is not None else []
    return Reconciler(eng.settings, eng.dispatcher, eng.bus, terminate=sink.append)


def _age(iteration_id: str, **fields: object) -> None:
    with session_scope() as session:
        session.execute(update(Iteration).where(Iteration.id == iteration_id).values(**fields))


def _iteration(iteration_id: str) -> Iteration:
    with session_scope() as session:
        return session.get_one(Iteration, iteration_id)


def _status(project_id: str) -> ProjectStatus:
    with session_scope() as session:
        return session.get_one(Project, project_id).status


def test_iteration_whose_worker_died_is_requeued_and_rerun_as_a_new_attempt(eng: Engine) -> None:
    # Given an iteration claimed by a worker that then died (its heartbeat went stale)
    project_id = eng.submit()
    iteration_id = eng.dispatcher.take(project_id)
    assert iteration_id is not None
    assert claim_iteration(iteration_id, "dead-worker", stale_after_s=30) is not None
    long_ago = utcnow() - timedelta(minutes=10)
    _age(iteration_id, heartbeat_at=long_ago, enqueued_at=long_ago)

    # When the reconcile loop runs
    report = _reconciler(eng).run_once()

    # Then it is sent again, and a worker re-runs it as attempt 2 to the end of the project
    # (the session's database holds other tests' projects too: look at ours)
    assert iteration_id in report.requeued
    assert eng.dispatcher.pending(project_id)
    eng.run_next(project_id)
    assert _iteration(iteration_id).attempt == 2
    assert _status(project_id) == ProjectStatus.COMPLETED


def test_iteration_past_its_attempt_limit_is_failed_and_the_project_moves_on(eng: Engine) -> None:
    project_id = eng.submit()
    iteration_id = eng.dispatcher.take(project_id)
    assert iteration_id is not None
    claim_iteration(iteration_id, "dead-worker", stale_after_s=30)
    _age(
        iteration_id,
        attempt=eng.settings.max_iteration_attempts,
        heartbeat_at=utcnow() - timedelta(minutes=10),
    )

    report = _reconciler(eng).run_once()

    failed = _iteration(iteration_id)
    assert iteration_id in report.failed
    assert failed.status == IterationStatus.FAILED
    assert failed.error_kind == ErrorKind.WORKER_LOST
    assert iteration_id not in report.advanced  # advanced on the next pass, after the report grace period
    _age(iteration_id, finished_at=utcnow() - timedelta(minutes=1))
    assert iteration_id in _reconciler(eng).run_once().advanced
    assert eng.dispatcher.pending(project_id)  # iteration 2 is on its way


def test_a_lost_report_is_advanced_by_the_reconcile_loop(eng: Engine) -> None:
    project_id = eng.submit()
    iteration_id = eng.dispatcher.take(project_id)
    assert iteration_id is not None
    eng.runner().run(iteration_id)  # finished, but its report to the coordinator never arrived
    assert _status(project_id) == ProjectStatus.RUNNING
    _age(iteration_id, finished_at=utcnow() - timedelta(minutes=1))

    assert iteration_id in _reconciler(eng).run_once().advanced
    assert _status(project_id) == ProjectStatus.COMPLETED


def test_a_queued_iteration_whose_message_was_lost_is_sent_again(eng: Engine) -> None:
    project_id = eng.submit()
    iteration_id = eng.dispatcher.take(project_id)  # the broker lost it
    assert iteration_id is not None
    assert iteration_id not in _reconciler(eng).run_once().requeued
    _age(iteration_id, enqueued_at=utcnow() - timedelta(hours=1))

    assert iteration_id in _reconciler(eng).run_once().requeued
    eng.run_next(project_id)
    assert _status(project_id) == ProjectStatus.COMPLETED


def test_a_restarted_coordinators_first_pass_sends_queued_work_again_at_once(eng: Engine) -> None:
    # Given an iteration sent a moment ago by a coordinator that died before the message left
    project_id = eng.submit()
    iteration_id = eng.dispatcher.take(project_id)  # lost with the coordinator
    assert iteration_id is not None
    assert iteration_id not in _reconciler(eng).run_once().requeued  # the steady state waits

    # When a restarted coordinator's reconcile loop makes its first pass
    report = _reconciler(eng).run_once(resume=True)

    # Then the iteration is sent again at once, not requeue_after_s (300 s) later, and runs
    assert iteration_id in report.requeued
    eng.run_next(project_id)
    assert _status(project_id) == ProjectStatus.COMPLETED


def test_a_stopped_projects_straggler_is_terminated_after_the_grace_period(eng: Engine) -> None:
    project_id = eng.submit()
    iteration_id = eng.dispatcher.take(project_id)
    assert iteration_id is not None
    claim_iteration(iteration_id, "slow-worker", stale_after_s=30, celery_task_id="celery-task-1")
    lifecycle.stop_project(project_id, eng.dispatcher, eng.bus)
    terminated: list[str] = []
    assert iteration_id not in _reconciler(eng, terminated).run_once().terminated

    with session_scope() as session:
        session.execute(
            update(Project)
            .where(Project.id == project_id)
            .values(finished_at=utcnow() - timedelta(minutes=1))
        )
    assert iteration_id in _reconciler(eng, terminated).run_once().terminated
    assert "celery-task-1" in terminated
    assert _iteration(iteration_id).status == IterationStatus.FAILED


def test_sweep_removes_the_sandbox_of_an_iteration_that_no_longer_runs(eng: Engine, tmp_path: Path) -> None:
    # Given two sandboxes, one for a running attempt and one for an attempt that was taken over
    project_id = eng.submit()
    iteration_id = eng.dispatcher.take(project_id)
    assert iteration_id is not None
    claim = claim_iteration(iteration_id, "w", stale_after_s=30)
    assert claim is not None
    boxes = []
    for attempt in (claim.attempt, claim.attempt - 1):
        workdir = tmp_path / f"ws{attempt}"
        workdir.mkdir()
        labels = {
            "raas.cluster": cluster_id(eng.settings.database_url),
            "raas.project": project_id,
            "raas.iteration": iteration_id,
            "raas.attempt": str(attempt),
        }
        boxes.append(
            DockerSandbox.start(
                image=eng.settings.sandbox_image,
                host_workspace=workdir,
                limits=SandboxLimits(),
                labels=labels,
                name=f"raas-test-sweep-{iteration_id}-{attempt}",
            )
        )
    client = docker.from_env()
    try:
        # When the worker's sweep runs
        removed = reap(client, is_live)
        # Then only the dead attempt's container is gone
        assert removed == [f"raas-test-sweep-{iteration_id}-0"]
        remaining = [
            c.name
            for c in client.containers.list(all=True, filters={"label": f"raas.iteration={iteration_id}"})
        ]
        assert remaining == [f"raas-test-sweep-{iteration_id}-1"]
        # A sandbox of another cluster (another database) is never ours to reap
        assert is_live({"raas.cluster": "elsewhere", "raas.iteration": iteration_id, "raas.attempt": "0"})
    finally:
        for box in boxes:
            box.close()
        client.close()
    with session_scope() as session:
        assert session.scalars(select(Iteration).where(Iteration.id == iteration_id)).one().attempt == 1


def test_sweep_removes_a_live_workers_task_container_once_its_project_can_run_no_iteration(
    eng: Engine,
) -> None:
    # Given a task container (kept between a task's iterations) of a worker that answers, whose
    # project has an iteration running
    project_id = eng.submit()
    iteration_id = eng.dispatcher.take(project_id)
    assert iteration_id is not None
    assert claim_iteration(iteration_id, "w0@host", stale_after_s=30) is not None
    cluster = cluster_id(eng.settings.database_url)
    labels = {
        "raas.cluster": cluster,
        "raas.project": project_id,
        "raas.task": "build",
        "raas.worker": "w0@host",
        "raas.iteration": iteration_id,
        "raas.attempt": "1",
    }
    workers = {"w0@host"}
    assert is_live(labels, cluster, live_workers=workers)

    # When the project is paused and then ends while that iteration still runs, it is kept
    # (its iteration may still use it) ...
    with session_scope() as session:
        session.execute(update(Project).where(Project.id == project_id).values(status=ProjectStatus.PAUSED))
    assert is_live(labels, cluster, live_workers=workers)
    with session_scope() as session:
        session.execute(
            update(Project).where(Project.id == project_id).values(status=ProjectStatus.COMPLETED)
        )
    assert is_live(labels, cluster, live_workers=workers)

    # ... and once no iteration of it runs, the sweep may remove it though its worker answers
    _age(iteration_id, status=IterationStatus.SUCCEEDED, finished_at=utcnow())
    assert not is_live(labels, cluster, live_workers=workers)
    # (a project unknown to this database has nothing to run either; a worker gone, the same)
    assert not is_live({**labels, "raas.project": "no-such-project"}, cluster, live_workers=workers)
    with session_scope() as session:
        session.execute(update(Project).where(Project.id == project_id).values(status=ProjectStatus.RUNNING))
    assert is_live(labels, cluster, live_workers=workers)
    assert not is_live(labels, cluster, live_workers={"w1@host"})
