"""The worker watch: iterations that wait while no live worker consumes the iterations queue
are reported after RAAS_NO_WORKERS_AFTER_S (a ``no_workers`` event, a line in ``raas status``,
the ``raas_projects_waiting_for_worker`` gauge), and cleared when a real ``raas worker`` starts.

The passes are given their time (``now``), so the test waits for no clock; the broker is a
Redis server of the test's own, so no other test's worker answers its probes.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.cli.projects import format_event
from orchestrator.queries.projects import event_history, get_project
from orchestrator.scheduling.reconcile import Reconciler
from orchestrator.scheduling.worker_watch import CeleryConsumers
from shared import events
from shared.celery_app import make_celery
from shared.models import utcnow
from shared.schemas import EventOut
from tests.support.engine import Engine, engine
from tests.support.faults import PrivateRedis, wait_until
from tests.support.loopback import free_port
from tests.support.stack import Stack

pytestmark = pytest.mark.integration

AFTER_S = 5.0
COMPLETE = {
    "responses": [{"content": [{"type": "tool_use", "name": "task_complete", "input": {"summary": "ok"}}]}],
    "when_exhausted": "repeat_last",
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[PrivateRedis]:
    """The broker the watch probes: a Redis server of this test's own."""
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server)")
    server = PrivateRedis(tmp_path / "broker.log")
    server.start()
    yield server
    server.kill()


@pytest.fixture
def eng(database_url: str, redis_url: str, tmp_path: Path) -> Iterator[Engine]:
    with engine(COMPLETE, tmp_path, no_workers_after_s=AFTER_S) as running:
        yield running


def _reconciler(eng: Engine, broker_url: str) -> Reconciler:
    app = make_celery(eng.settings.model_copy(update={"broker_url": broker_url}))
    return Reconciler(eng.settings, eng.dispatcher, eng.bus, consumers=CeleryConsumers(app))


def _watch_events(project_id: str) -> list[EventOut]:
    return [e for e in event_history(project_id) if e.type in (events.NO_WORKERS, events.WORKERS_BACK)]


def _gauge(coordinator_url: str) -> float:
    text = httpx.get(f"{coordinator_url}/metrics", timeout=10).text
    family = next(
        f for f in text_string_to_metric_families(text) if f.name == "raas_projects_waiting_for_worker"
    )
    return family.samples[0].value


@pytest.mark.slow
def test_iterations_with_no_worker_are_reported_after_the_setting_and_cleared_by_a_worker(
    eng: Engine, broker: PrivateRedis, tmp_path: Path
) -> None:
    # Given a running project whose first iteration is queued, and no worker on the broker
    project_id = eng.submit()
    reconciler = _reconciler(eng, broker.url())
    stack = Stack(
        log_dir=tmp_path / "logs",
        script=tmp_path / "unused.json",
        env={"RAAS_BROKER_URL": broker.url(), "RAAS_COORDINATOR_URL": eng.settings.coordinator_url},
    )
    started = utcnow()

    # When reconcile passes run until just before RAAS_NO_WORKERS_AFTER_S has passed
    for seconds in (0.0, AFTER_S / 2, AFTER_S - 0.1):
        report = reconciler.run_once(started + timedelta(seconds=seconds))
        assert project_id not in report.no_workers

    # Then nothing is said yet
    assert _watch_events(project_id) == []
    assert get_project(project_id).waiting_for_worker_since is None

    # When a pass runs once it has passed
    report = reconciler.run_once(started + timedelta(seconds=AFTER_S))

    # Then the project is told once, `raas status` says since when, and the gauge counts it
    assert project_id in report.no_workers
    (told,) = _watch_events(project_id)
    assert told.type == events.NO_WORKERS
    assert get_project(project_id).waiting_for_worker_since == started
    assert "waiting for a worker since" in format_event(told)
    shown = stack.cli("status", project_id)
    assert shown.returncode == 0, shown.stderr
    assert "waiting for a worker since" in shown.stdout
    assert _gauge(eng.settings.coordinator_url) >= 1
    # and a later pass does not say it again
    assert project_id not in reconciler.run_once(started + timedelta(seconds=2 * AFTER_S)).no_workers
    assert len(_watch_events(project_id)) == 1

    # When a real worker starts consuming the iterations queue
    try:
        stack.spawn("worker", ["worker", "--concurrency", "1", "--name", f"watch-{free_port()}@%h"])
        wait_until(
            lambda: project_id in reconciler.run_once().workers_back, 90, "the watch to see the worker", 0.5
        )
    finally:
        stack.stop()

    # Then the project is told after the first message, and nothing says it waits any more
    told_first, back = _watch_events(project_id)
    assert (told_first.type, back.type) == (events.NO_WORKERS, events.WORKERS_BACK)
    assert back.seq > told_first.seq
    assert [name.startswith("watch-") for name in back.data["workers"]] == [True]
    assert "a worker is back" in format_event(back)
    assert get_project(project_id).waiting_for_worker_since is None
    shown = stack.cli("status", project_id)
    assert shown.returncode == 0, shown.stderr
    assert "waiting for a worker" not in shown.stdout
    assert _gauge(eng.settings.coordinator_url) == 0


def test_a_broker_that_does_not_answer_says_nothing_about_workers(eng: Engine) -> None:
    # Given a project whose iteration is queued, and a broker where nothing listens
    project_id = eng.submit()
    reconciler = _reconciler(eng, f"redis://127.0.0.1:{free_port()}/0")
    started = utcnow()

    # When reconcile passes run for far longer than RAAS_NO_WORKERS_AFTER_S
    reports = [reconciler.run_once(started + timedelta(seconds=s * AFTER_S)) for s in range(5)]

    # Then no project is told that no worker is there: nothing is known of the workers
    assert [r.no_workers for r in reports] == [[]] * 5
    assert _watch_events(project_id) == []
    assert get_project(project_id).waiting_for_worker_since is None
