"""The worker's periodic sweep of sandbox containers whose iteration no longer runs.

A worker killed mid-iteration leaves its container behind; whichever worker shares that Docker
engine removes it on its next sweep. Liveness comes from the database: the container's
iteration must be running, in the attempt the container was made for.
"""

from __future__ import annotations

import hashlib
import logging
import threading

import docker
from sqlalchemy import select

from shared.db import session_scope
from shared.models import Iteration, IterationStatus
from shared.settings import get_settings
from workers.sandbox.reaper import reap

log = logging.getLogger(__name__)
SWEEP_INTERVAL_S = 30.0


def cluster_id(database_url: str) -> str:
    """Which cluster a sandbox belongs to: its database. One Docker engine may serve several."""
    return hashlib.sha256(database_url.encode()).hexdigest()[:16]


def is_live(labels: dict[str, str], cluster: str | None = None) -> bool:
    """True unless the labels name an iteration attempt of our cluster that is no longer running."""
    iteration_id, attempt = labels.get("raas.iteration"), labels.get("raas.attempt")
    if not iteration_id or not attempt:
        return True  # not an iteration's sandbox (a pool's, a test's): not ours to judge
    if labels.get("raas.cluster") != (cluster or cluster_id(get_settings().database_url)):
        return True  # another cluster's database decides about it
    with session_scope() as session:
        row = session.execute(
            select(Iteration.status, Iteration.attempt).where(Iteration.id == iteration_id)
        ).one_or_none()
    return row is not None and row.status == IterationStatus.RUNNING and str(row.attempt) == attempt


def sweep_forever(stop: threading.Event, interval_s: float = SWEEP_INTERVAL_S) -> None:
    while True:
        try:
            client = docker.from_env()
            try:
                removed = reap(client, is_live)
            finally:
                client.close()
            if removed:
                log.info("reaped %d orphan sandbox(es): %s", len(removed), ", ".join(removed))
        except Exception:
            log.warning("sandbox sweep failed", exc_info=True)
        if stop.wait(interval_s):
            return
