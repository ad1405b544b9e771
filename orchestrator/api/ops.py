"""Operations: Prometheus metrics and the live workers.

``/metrics`` (on ``public``) needs no token, like ``/healthz`` and Flower's ``/metrics``: a
Prometheus server scrapes it, and handing the monitoring system the API token would hand it
every project too (the token creates, stops and downloads projects). What it shows is
aggregate only — counts, totals, queue depths, durations; no id, name, prompt or output. Keep
it off the public side of the TLS proxy (docs/deploy.md) if even that is too much.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from orchestrator.api.deps import Caller, authed_router, context
from orchestrator.queries import metrics
from orchestrator.queries.workers import WorkerInfo, inspect_workers
from shared.celery_app import app as celery_app
from shared.errors import Unauthorized
from shared.schemas import ErrorOut

router = authed_router()
public = APIRouter()


def _registry(request: Request) -> CollectorRegistry:
    """The app's metrics registry, made on the first scrape."""
    state = request.app.state
    if getattr(state, "metrics_registry", None) is None:
        settings = context(request).settings
        state.metrics_registry = metrics.make_registry(
            settings.database_url, settings.broker_url, dict(celery_app.conf.broker_transport_options or {})
        )
    registry: CollectorRegistry = state.metrics_registry
    return registry


@public.get("/metrics", include_in_schema=False)
def prometheus_metrics(request: Request) -> Response:
    """Cluster-wide metrics, computed from Postgres and the broker at each scrape.

    The Prometheus text format, or OpenMetrics when the scraper's Accept header asks for it.
    """
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encode(_registry(request)), headers={"Content-Type": content_type})


@router.get("/workers", responses={503: {"model": ErrorOut, "description": "The broker does not answer"}})
def list_workers(
    caller: Caller,
    timeout_s: Annotated[float, Query(ge=0.1, le=5.0, description="How long to wait for replies.")] = 1.0,
) -> list[WorkerInfo]:
    """Live Celery nodes (workers and coordinators), their queues and the tasks they run.

    The whole cluster, every tenant's projects included: the cluster token only.
    """
    if not caller.is_cluster:
        msg = "`raas workers` shows the whole cluster and needs the operators' token (RAAS_API_TOKEN)"
        raise Unauthorized(msg)
    return inspect_workers(celery_app, timeout_s)
