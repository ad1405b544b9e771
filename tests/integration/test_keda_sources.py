"""What KEDA's triggers on the workers (deploy/kubernetes/worker-autoscaling.yaml) read exists:
the Redis list a waiting iteration's message is in, and the coordinator's series of iterations
queued and running.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import redis
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.api import create_app
from shared.celery_app import ITERATIONS_QUEUE, RUN_ITERATION, make_celery
from shared.events import NullBus
from shared.models import IterationStatus
from shared.settings import get_settings
from tests.support.engine import RecordingDispatcher
from tests.support.manifests import keda_triggers

pytestmark = pytest.mark.integration


@pytest.fixture
def spare_broker(redis_url: str) -> Iterator[str]:
    """A Redis database of the test server that no worker of this session consumes, emptied."""
    base, _, db = redis_url.rpartition("/")
    url = f"{base}/{(int(db or 0) + 1) % 16}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


def test_a_waiting_iteration_is_in_the_redis_list_the_trigger_counts(spare_broker: str) -> None:
    # Given the Celery app as the coordinator makes it, on a broker no worker reads
    app = make_celery(get_settings().model_copy(update={"broker_url": spare_broker}))
    broker = redis.Redis.from_url(spare_broker)
    try:
        # When the coordinator enqueues an iteration (by name, as it does)
        app.send_task(RUN_ITERATION, kwargs={"iteration_id": "keda-probe"})

        # Then it waits in the list the redis trigger measures, and only there
        list_name = keda_triggers()["redis"]["metadata"]["listName"]
        assert list_name == ITERATIONS_QUEUE
        assert broker.type(list_name) == b"list"
        assert broker.llen(list_name) == 1
    finally:
        broker.close()
        app.close()


def test_the_prometheus_trigger_reads_series_the_coordinator_has(database_url: str, redis_url: str) -> None:
    # Given the query KEDA sends to Prometheus
    query = keda_triggers()["prometheus"]["metadata"]["query"]
    selector = re.fullmatch(r'.*\b(raas_\w+)\{(\w+)=~"([^"]+)"\}.*', query)
    assert selector, query
    metric, label, pattern = selector.groups()

    # When the coordinator's /metrics is scraped
    app = create_app(get_settings(), RecordingDispatcher(), NullBus())
    with TestClient(app) as client:
        response = client.get("/metrics")
    assert response.status_code == 200
    series = {
        sample.labels.get(label)
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name == metric
    }

    # Then the label values it selects are the unfinished iteration statuses, each a series there
    selected = {status for status in series if status is not None and re.fullmatch(pattern, status)}
    assert selected == {IterationStatus.QUEUED.value, IterationStatus.RUNNING.value}
