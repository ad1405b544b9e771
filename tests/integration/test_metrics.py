"""Prometheus metrics: computed from Postgres and the broker at scrape time, served without a
token, in the text format Prometheus parses.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from decimal import Decimal

import pytest
import redis
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import delete, update

from orchestrator.api import create_app
from orchestrator.queries.metrics import ClusterCollector, broker_client
from shared.celery_app import make_celery
from shared.db import session_scope
from shared.events import NullBus
from shared.models import Agent, Iteration, IterationStatus, Project, ProjectStatus, utcnow
from shared.settings import get_settings
from tests.support.engine import RecordingDispatcher
from tests.support.loopback import free_port

pytestmark = pytest.mark.integration
OPENMETRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _parse(
    text: str, families: Callable[[str], Iterable[Metric]] = text_string_to_metric_families
) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in families(text)
        for sample in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
def client(database_url: str, redis_url: str) -> Iterator[TestClient]:
    app = create_app(get_settings(), RecordingDispatcher(), NullBus())
    with TestClient(app) as running:
        yield running


def _scrape(client: TestClient) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return _parse(response.text)


@pytest.fixture
def made() -> Iterator[list[str]]:
    """Ids of the projects a test makes, deleted (with everything under them) afterwards."""
    ids: list[str] = []
    yield ids
    with session_scope() as session:
        session.execute(delete(Project).where(Project.id.in_(ids)))


def _project_with_history(made: list[str]) -> None:
    """A running project: an agent's totals, iterations of 2 s and 45 s and one still running."""
    start = utcnow() - timedelta(minutes=5)
    with session_scope() as session:
        project = Project(
            name="metrics",
            prompt="p",
            config={},
            status=ProjectStatus.RUNNING,
            spent_usd=Decimal("1.25"),
            reserved_usd=Decimal("0.5"),
            created_at=start,
        )
        session.add(project)
        session.flush()
        made.append(project.id)
        agent = Agent(project_id=project.id, input_tokens=1000, output_tokens=200, created_at=start)
        session.add(agent)
        session.flush()
        for number, status, seconds in [
            (1, IterationStatus.SUCCEEDED, 2),
            (2, IterationStatus.FAILED, 45),
            (3, IterationStatus.RUNNING, None),
        ]:
            finished = start + timedelta(seconds=seconds) if seconds else None
            session.add(
                Iteration(
                    project_id=project.id,
                    agent_id=agent.id,
                    number=number,
                    status=status,
                    started_at=start,
                    finished_at=finished,
                    created_at=start,
                )
            )


def test_metrics_need_no_token_and_parse_as_prometheus_text(client: TestClient) -> None:
    # When Prometheus scrapes /metrics with no Authorization header
    samples = _scrape(client)

    # Then every documented family is there, each source answered, and no status is left out
    names = {name for name, _ in samples}
    for expected in (
        "raas_projects",
        "raas_iterations",
        "raas_tokens_total",
        "raas_cost_usd_total",
        "raas_budget_reserved_usd",
        "raas_queue_depth",
        "raas_iteration_duration_seconds_bucket",
        "raas_iteration_duration_seconds_sum",
        "raas_iteration_duration_seconds_count",
    ):
        assert expected in names, expected
    assert _value(samples, "raas_metrics_source_up", source="database") == 1
    assert _value(samples, "raas_metrics_source_up", source="broker") == 1
    assert {dict(labels)["status"] for name, labels in samples if name == "raas_projects"} == {
        s.value for s in ProjectStatus
    }
    assert {dict(labels)["queue"] for name, labels in samples if name == "raas_queue_depth"} == {
        "coordinator",
        "iterations",
    }
    # while the API itself still wants its token
    assert client.get("/v1/workers").status_code == 401


def test_a_scraper_that_asks_for_openmetrics_gets_it(client: TestClient) -> None:
    # When Prometheus asks for OpenMetrics, as it does by default
    response = client.get("/metrics", headers={"Accept": OPENMETRICS})

    # Then the answer is OpenMetrics, which its strict parser accepts
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    families = {f.name: f for f in openmetrics_families(response.text)}
    assert families["raas_iteration_duration_seconds"].type == "histogram"
    assert families["raas_tokens"].type == "counter"


def test_metrics_count_what_postgres_holds(client: TestClient, made: list[str]) -> None:
    # Given a scrape before and after a project with an agent and three iterations is written
    before = _scrape(client)
    _project_with_history(made)
    after = _scrape(client)

    def delta(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    # Then the scrape counts it: projects, iterations by status, tokens and dollars
    assert delta("raas_projects", status="running") == 1
    assert delta("raas_iterations", status="succeeded") == 1
    assert delta("raas_iterations", status="failed") == 1
    assert delta("raas_iterations", status="running") == 1
    assert delta("raas_tokens_total", kind="input") == 1000
    assert delta("raas_tokens_total", kind="output") == 200
    assert delta("raas_cost_usd_total") == pytest.approx(1.25)
    assert delta("raas_budget_reserved_usd") == pytest.approx(0.5)

    # And the finished iterations' durations land in their buckets (the running one in none)
    histogram = "raas_iteration_duration_seconds"
    assert delta(f"{histogram}_bucket", status="succeeded", le="1.0") == 0
    assert delta(f"{histogram}_bucket", status="succeeded", le="5.0") == 1
    assert delta(f"{histogram}_bucket", status="failed", le="30.0") == 0
    assert delta(f"{histogram}_bucket", status="failed", le="60.0") == 1
    assert delta(f"{histogram}_bucket", status="failed", le="+Inf") == 1
    assert delta(f"{histogram}_count", status="succeeded") == 1
    assert delta(f"{histogram}_sum", status="succeeded") == pytest.approx(2.0)
    assert delta(f"{histogram}_sum", status="failed") == pytest.approx(45.0)


def test_an_iteration_that_ended_before_it_started_counts_as_zero_seconds(
    client: TestClient, made: list[str]
) -> None:
    # Given an iteration whose end reads a minute before its start (stamps from two clocks)
    _project_with_history(made)
    before = _parse(client.get("/metrics", headers={"Accept": OPENMETRICS}).text, openmetrics_families)
    with session_scope() as session:
        session.execute(
            update(Iteration)
            .where(Iteration.project_id == made[0], Iteration.number == 1)
            .values(finished_at=Iteration.started_at - timedelta(minutes=1))
        )
    # When Prometheus scrapes
    response = client.get("/metrics", headers={"Accept": OPENMETRICS})

    # Then its strict parser accepts the answer (it raises on a negative sum), and the iteration
    # counts as 0 s, not -60 s
    after = _parse(response.text, openmetrics_families)
    total = "raas_iteration_duration_seconds_sum"
    change = _value(after, total, status="succeeded") - _value(before, total, status="succeeded")
    assert change == pytest.approx(-2.0)


def test_queue_depth_is_the_length_of_the_celery_queues_on_the_broker(redis_url: str) -> None:
    # Given messages sent by Celery to a queue of its own, one of them with a priority
    queue = f"metrics-test-{secrets.token_hex(4)}"
    app = make_celery()
    broker = redis.Redis.from_url(redis_url)
    try:
        for _ in range(3):
            app.send_task("raas.nothing", queue=queue)
        app.send_task("raas.nothing", queue=queue, priority=9)
        registry = CollectorRegistry()
        registry.register(ClusterCollector(None, broker, queues=[queue]))

        # When the collector is scraped
        samples = _parse(generate_latest(registry).decode())
    finally:
        broker.delete(*broker.keys(f"*{queue}*"))
        broker.close()
        app.close()

    # Then the depth counts every message, whichever priority list kombu put it in
    assert _value(samples, "raas_queue_depth", queue=queue) == 4


def test_a_broker_that_does_not_answer_costs_only_the_queue_depth(database_url: str) -> None:
    # Given a broker address where nothing listens
    dead = broker_client(f"redis://127.0.0.1:{free_port()}/0")
    registry = CollectorRegistry()
    registry.register(ClusterCollector(None, dead))

    # When the collector is scraped
    samples = _parse(generate_latest(registry).decode())

    # Then the scrape still succeeds, says the broker is down, and has the database's metrics
    assert _value(samples, "raas_metrics_source_up", source="broker") == 0
    assert _value(samples, "raas_metrics_source_up", source="database") == 1
    assert not [name for name, _ in samples if name == "raas_queue_depth"]
    assert [name for name, _ in samples if name == "raas_projects"]
