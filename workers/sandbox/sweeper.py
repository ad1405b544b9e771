"""The worker's periodic sweep of sandbox containers whose iteration no longer runs.

A worker killed mid-iteration leaves its container behind; whichever worker shares that Docker
engine removes it on its next sweep. Liveness comes from the database: the container's
iteration must be running, in the attempt the container was made for. A warm pool's sandboxes
(made before their iteration is known) lives as long as its worker answers a ping; a task's
container (kept between the task's iterations, :mod:`workers.sandbox.keeper`) as long as its
worker answers and its project may still run an iteration.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Collection
from datetime import timedelta
from functools import partial

import docker
from sqlalchemy import select

from shared.db import session_scope
from shared.models import Iteration, IterationStatus, Project, ProjectStatus, utcnow
from shared.settings import get_settings
from workers.sandbox.keeper import TASK_LABEL, orphaned_here
from workers.sandbox.pool import POOL_LABEL
from workers.sandbox.reaper import reap

log = logging.getLogger(__name__)
SWEEP_INTERVAL_S = 30.0
PING_TIMEOUT_S = 2.0
# A project in one of these runs no iteration until a person (resume) or its PR (a round) wakes it.
_ENDED = frozenset(
    {
        ProjectStatus.COMPLETED,
        ProjectStatus.FAILED,
        ProjectStatus.STOPPED,
        ProjectStatus.DELIVERED,
        ProjectStatus.PAUSED,
    }
)


def cluster_id(database_url: str) -> str:
    """Which cluster a sandbox belongs to: its database. One Docker engine may serve several."""
    return hashlib.sha256(database_url.encode()).hexdigest()[:16]


def is_live(
    labels: dict[str, str], cluster: str | None = None, live_workers: Collection[str] | None = None
) -> bool:
    """True unless the labels name a sandbox of our cluster whose owner is gone: an iteration
    attempt that no longer runs, or (a warm pool's, a task's) a worker that no longer answers."""
    if labels.get("raas.cluster") != (cluster or cluster_id(get_settings().database_url)):
        return True  # not ours (another cluster's, a test's): its own database decides about it
    if orphaned_here(labels):
        return False
    if POOL_LABEL in labels:
        return live_workers is None or labels.get("raas.worker") in live_workers
    if TASK_LABEL in labels:
        if live_workers is not None and labels.get("raas.worker") not in live_workers:
            return False
        return _project_may_run(labels.get("raas.project", ""))
    iteration_id, attempt = labels.get("raas.iteration"), labels.get("raas.attempt")
    if not iteration_id or not attempt:
        return True
    with session_scope() as session:
        row = session.execute(
            select(Iteration.status, Iteration.attempt).where(Iteration.id == iteration_id)
        ).one_or_none()
    return row is not None and row.status == IterationStatus.RUNNING and str(row.attempt) == attempt


def _project_may_run(project_id: str) -> bool:
    """Whether a task container of ``project_id`` may still serve an iteration: the project runs
    (or waits to), or one of its iterations is still running. Its keeper drops it when it hears
    the project end; this catches one the keeper lost track of (an engine outage made its
    removal or its creation's answer fail), which nothing else would remove while its worker
    answers."""
    if not project_id:
        return True
    with session_scope() as session:
        status = session.scalar(select(Project.status).where(Project.id == project_id))
        if status is None or status not in _ENDED:
            return status is not None
        running = session.scalar(
            select(Iteration.id)
            .where(Iteration.project_id == project_id, Iteration.status == IterationStatus.RUNNING)
            .limit(1)
        )
    return running is not None


def _live_workers() -> set[str] | None:
    """The Celery nodes that answer a ping now (None if the broker cannot tell)."""
    from shared.celery_app import app

    try:
        replies = app.control.ping(timeout=PING_TIMEOUT_S) or []
    except Exception:
        log.warning("cannot ping the workers; warm pools are left alone this sweep", exc_info=True)
        return None
    return {node for reply in replies for node in reply}


def _busy_workers() -> set[str]:
    """The workers running an iteration whose heartbeat is fresh: alive, though a ping may miss
    one that is busy (its task containers in use must not go for a late pong)."""
    stale = utcnow() - timedelta(seconds=get_settings().heartbeat_stale_s)
    with session_scope() as session:
        rows = session.scalars(
            select(Iteration.worker)
            .where(Iteration.status == IterationStatus.RUNNING, Iteration.heartbeat_at >= stale)
            .distinct()
        ).all()
    return {worker for worker in rows if worker}


def sweep_forever(stop: threading.Event, interval_s: float = SWEEP_INTERVAL_S) -> None:
    while True:
        try:
            client = docker.from_env()
            cluster, workers = cluster_id(get_settings().database_url), _live_workers()
            if workers is not None:
                workers |= _busy_workers()
            try:
                removed = reap(client, partial(is_live, cluster=cluster, live_workers=workers))
            finally:
                client.close()
            if removed:
                log.info("reaped %d orphan sandbox(es): %s", len(removed), ", ".join(removed))
        except Exception:
            log.warning("sandbox sweep failed", exc_info=True)
        if stop.wait(interval_s):
            return
