"""What an operator observes of the cluster: Prometheus metrics (the live workers are in
:mod:`orchestrator.queries.workers`).

The metrics are computed when they are scraped, from Postgres and the broker, never counted in
this process: coordinators restart and may run as several replicas, and a process-local counter
would reset with its process and differ between replicas. Each scrape is a few aggregate queries
over the small tables (projects, agents, iterations) and one Redis round trip.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from enum import Enum
from typing import Any

import redis
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString
from redis.backoff import NoBackoff
from redis.retry import Retry
from sqlalchemy import ColumnElement, case, func, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from shared.celery_app import COORDINATOR_QUEUE, ITERATIONS_QUEUE
from shared.db import session_scope
from shared.models import Agent, Iteration, IterationStatus, Project, ProjectStatus

log = logging.getLogger(__name__)

QUEUES = (COORDINATOR_QUEUE, ITERATIONS_QUEUE)
#: Upper bounds of the iteration duration histogram, in seconds (an iteration's hard limit is 1 h).
DURATION_BUCKETS_S = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
# kombu's Redis transport keeps one list per queue and priority step: the queue's name for the
# lowest step, then NAME + "\x06\x16" + step (kombu.transport.redis.Channel._q_for_pri).
_KOMBU_PRIORITY_SEP = "\x06\x16"
_KOMBU_PRIORITY_STEPS = (0, 3, 6, 9)
_REDIS_TIMEOUT_S = 2.0


class ClusterCollector:
    """A Prometheus collector whose every value is read at scrape time.

    Args:
        database_url: the cluster's database (None: RAAS_DATABASE_URL).
        broker: a client of the Redis broker, or None when the broker is not Redis (then no
            queue depth is reported).
        queues: the Celery queues whose depth is reported.
        key_prefix: kombu's ``global_keyprefix`` of the broker, if the Celery app sets one.
    """

    def __init__(
        self,
        database_url: str | None,
        broker: redis.Redis | None,
        queues: Sequence[str] = QUEUES,
        key_prefix: str = "",
    ) -> None:
        self.database_url = database_url
        self.broker = broker
        self.queues = tuple(queues)
        self.key_prefix = key_prefix

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "raas_metrics_source_up",
            "Whether this scrape could read the source (1) or not (0); its metrics are missing if not.",
            labels=["source"],
        )
        try:
            with session_scope(self.database_url) as session:
                found = list(_database_metrics(session))
        except Exception:
            log.warning("metrics: the database could not be read", exc_info=True)
            found = []
            up.add_metric(["database"], 0)
        else:
            up.add_metric(["database"], 1)
        yield from found
        if self.broker is not None:
            try:
                yield self._queue_depth(self.broker)
            except redis.RedisError:
                log.warning("metrics: the broker could not be read", exc_info=True)
                up.add_metric(["broker"], 0)
            else:
                up.add_metric(["broker"], 1)
        yield up

    def _queue_depth(self, broker: redis.Redis) -> GaugeMetricFamily:
        pipe = broker.pipeline(transaction=False)
        for queue in self.queues:
            for key in _queue_keys(self.key_prefix + queue):
                pipe.llen(key)
        lengths = iter(pipe.execute())
        depth = GaugeMetricFamily(
            "raas_queue_depth",
            "Messages waiting in a Celery queue on the broker (not those a worker has taken).",
            labels=["queue"],
        )
        for queue in self.queues:
            depth.add_metric([queue], sum(next(lengths) for _ in _KOMBU_PRIORITY_STEPS))
        return depth


def _queue_keys(queue: str) -> list[str]:
    return [queue if step == 0 else f"{queue}{_KOMBU_PRIORITY_SEP}{step}" for step in _KOMBU_PRIORITY_STEPS]


def _database_metrics(session: Session) -> Iterator[Metric]:
    projects = GaugeMetricFamily("raas_projects", "Projects by status.", labels=["status"])
    for status, count in _counts(session, Project.status, ProjectStatus):
        projects.add_metric([status], count)
    yield projects
    waiting = session.scalar(
        select(func.count(Project.id)).where(Project.waiting_for_worker_since.is_not(None))
    )
    yield GaugeMetricFamily(
        "raas_projects_waiting_for_worker",
        "Projects whose iterations wait with no live worker on the iterations queue (alert on > 0).",
        value=waiting or 0,
    )

    iterations = GaugeMetricFamily("raas_iterations", "Iterations by status.", labels=["status"])
    for status, count in _counts(session, Iteration.status, IterationStatus):
        iterations.add_metric([status], count)
    yield iterations

    # The agents' running totals, not the messages: one row per agent keeps the scrape cheap.
    tokens_in, tokens_out = session.execute(
        select(_total(Agent.input_tokens), _total(Agent.output_tokens))
    ).one()
    tokens = CounterMetricFamily("raas_tokens", "LLM tokens used, by kind.", labels=["kind"])
    tokens.add_metric(["input"], tokens_in)
    tokens.add_metric(["output"], tokens_out)
    yield tokens

    spent, reserved = session.execute(select(_total(Project.spent_usd), _total(Project.reserved_usd))).one()
    yield CounterMetricFamily("raas_cost_usd", "USD spent on LLM calls (settled).", value=float(spent))
    yield GaugeMetricFamily(
        "raas_budget_reserved_usd",
        "USD held by budget reservations of calls in flight.",
        value=float(reserved),
    )
    yield _durations(session)


def _counts(
    session: Session, column: InstrumentedAttribute[Any], statuses: Iterable[Enum]
) -> list[tuple[str, int]]:
    """Rows per status, every status listed (a status with no rows is 0, not absent)."""
    found = {
        status.value: count
        for status, count in session.execute(select(column, func.count()).group_by(column))
    }
    return [(status.value, found.get(status.value, 0)) for status in statuses]


def _total(column: InstrumentedAttribute[Any]) -> ColumnElement[Any]:
    return func.coalesce(func.sum(column), 0)


def _duration_s(session: Session) -> ColumnElement[Any]:
    """Seconds from an iteration's start to its end, never below 0.

    The two stamps can come from different clocks (the worker that claimed it, the coordinator
    that failed it), so an end may read before its start. A negative duration would make the
    histogram's sum negative, and Prometheus' OpenMetrics parser then rejects the whole scrape.
    """
    if session.get_bind().dialect.name == "sqlite":
        days = func.julianday(Iteration.finished_at) - func.julianday(Iteration.started_at)
        return func.max(days * 86400.0, 0.0)
    return func.greatest(func.extract("epoch", Iteration.finished_at - Iteration.started_at), 0)


def _durations(session: Session) -> HistogramMetricFamily:
    """Finished iterations' durations (of their last attempt), bucketed in one query."""
    seconds = _duration_s(session)
    columns = [func.sum(case((seconds <= bound, 1), else_=0)) for bound in DURATION_BUCKETS_S]
    rows = session.execute(
        select(Iteration.status, func.count(), func.coalesce(func.sum(seconds), 0), *columns)
        .where(
            Iteration.status.in_([IterationStatus.SUCCEEDED, IterationStatus.FAILED]),
            Iteration.started_at.is_not(None),
            Iteration.finished_at.is_not(None),
        )
        .group_by(Iteration.status)
    ).all()
    found = {row[0]: row[1:] for row in rows}
    histogram = HistogramMetricFamily(
        "raas_iteration_duration_seconds",
        "Wall-clock time of finished iterations (their last attempt), by how they ended.",
        labels=["status"],
    )
    for status in (IterationStatus.SUCCEEDED, IterationStatus.FAILED):
        count, total, *cumulative = found.get(status, (0, 0, *(0 for _ in DURATION_BUCKETS_S)))
        bounds = zip(DURATION_BUCKETS_S, cumulative, strict=True)
        buckets = [(floatToGoString(bound), int(n or 0)) for bound, n in bounds]
        histogram.add_metric([status.value], [*buckets, ("+Inf", int(count))], float(total))
    return histogram


def broker_client(broker_url: str) -> redis.Redis | None:
    """A client of a Redis broker that fails fast (the next scrape is the retry); None if not Redis."""
    if not broker_url.startswith(("redis://", "rediss://", "unix://")):
        log.warning("metrics: the broker %s is not Redis; no queue depth", broker_url.split(":", 1)[0])
        return None
    return redis.Redis.from_url(
        broker_url,
        socket_timeout=_REDIS_TIMEOUT_S,
        socket_connect_timeout=_REDIS_TIMEOUT_S,
        retry=Retry(NoBackoff(), 0),
    )


def make_registry(
    database_url: str | None, broker_url: str, transport_options: dict[str, Any]
) -> CollectorRegistry:
    """A registry holding only the cluster collector (no per-process metrics: see module doc)."""
    registry = CollectorRegistry(auto_describe=False)
    prefix = str(transport_options.get("global_keyprefix", ""))
    registry.register(ClusterCollector(database_url, broker_client(broker_url), key_prefix=prefix))
    return registry
