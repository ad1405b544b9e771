"""The worker's Celery task: one ``run_iteration`` per iteration."""

from __future__ import annotations

import logging
import secrets
import socket
import threading
from typing import Any

import redis
from celery import Task
from celery.signals import worker_process_shutdown, worker_shutdown

from shared.celery_app import ADVANCE_PROJECT, COORDINATOR_QUEUE, RUN_ITERATION, app
from shared.events import RedisBus
from shared.settings import Settings, get_settings
from workers import (
    evaluation,  # noqa: F401  (registers raas.eval_verify)
    records,
)
from workers.iteration import IterationRunner
from workers.llm.client import PLACEHOLDER_KEY, close_shared_clients
from workers.llm.ratelimit import ProviderLimits, RateLimiter, key_fingerprint
from workers.sandbox.base import SandboxLimits
from workers.sandbox.docker import ENGINE_CALLS
from workers.sandbox.keeper import TaskContainers
from workers.sandbox.pool import SandboxPool
from workers.sandbox.sweeper import cluster_id

log = logging.getLogger(__name__)


_RUNNERS: dict[str, IterationRunner] = {}
# In the threads pool the first iterations arrive together: each would make a runner (and a
# warm pool) of its own.
_making_runner = threading.Lock()


def _runner(worker_name: str) -> IterationRunner:
    """The process's one runner, shared by every iteration it runs (all its threads)."""
    with _making_runner:
        runner = _RUNNERS.get(worker_name)
        if runner is None:
            settings = get_settings()
            ENGINE_CALLS.limit(settings.sandbox_engine_calls)
            runner = _RUNNERS[worker_name] = IterationRunner(
                settings,
                RedisBus(settings.redis_url),
                worker_name,
                limiter=_limiter(settings),
                pool=_pool(settings, worker_name),
                keeper=_keeper(settings, worker_name),
            )
        return runner


def _keeper(settings: Settings, worker_name: str) -> TaskContainers:
    """Where this process's tasks' containers wait for their next iteration (closed with the runner)."""
    keeper = TaskContainers(settings.task_container_idle_s, cluster_id(settings.database_url), worker_name)
    keeper.watch(settings.redis_url)
    return keeper


def _pool(settings: Settings, worker_name: str) -> SandboxPool | None:
    """Warm sandboxes (default limits) for this worker process, when RAAS_WARM_POOL_SIZE > 0."""
    if settings.warm_pool_size <= 0:
        return None
    labels = {"raas.cluster": cluster_id(settings.database_url), "raas.worker": worker_name}
    pool = SandboxPool(
        size=settings.warm_pool_size,
        image=settings.sandbox_image,
        limits=SandboxLimits(),
        labels=labels,
        name_prefix=f"raas-pool-{secrets.token_hex(4)}",
        scratch_dir=settings.scratch_dir() / "pool",
    )
    _POOLS.append(pool)
    return pool


_POOLS: list[SandboxPool] = []


@worker_process_shutdown.connect  # a prefork child
@worker_shutdown.connect  # the worker itself: where a threads pool's iterations run
def _close_pools(**_kwargs: Any) -> None:
    # Not atexit: billiard ends pool processes with os._exit, which skips atexit handlers.
    while _POOLS:
        _POOLS.pop().close()
    with _making_runner:
        for runner in _RUNNERS.values():
            runner.close()
        _RUNNERS.clear()
    close_shared_clients()


def _limiter(settings: Settings) -> RateLimiter:
    """One limiter per worker process, shared through Redis with every other worker."""
    provider = ProviderLimits(
        requests_per_minute=settings.rate_requests_per_minute,
        input_tokens_per_minute=settings.rate_input_tokens_per_minute,
        output_tokens_per_minute=settings.rate_output_tokens_per_minute,
    )
    key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else PLACEHOLDER_KEY
    return RateLimiter(redis.Redis.from_url(settings.redis_url), provider, key_fingerprint(key))


@app.task(name=RUN_ITERATION, bind=True)
def run_iteration(self: Task, project_id: str, iteration_id: str) -> None:
    """Run the iteration (if it is still queued) and ask the coordinator to advance the project."""
    worker = self.request.hostname or socket.gethostname()

    def report() -> None:
        app.send_task(
            ADVANCE_PROJECT,
            kwargs={"project_id": project_id, "iteration_id": iteration_id},
            queue=COORDINATOR_QUEUE,
        )

    claim = _runner(worker).run(iteration_id, self.request.id, report)
    # A redelivered message for a finished iteration runs nothing, but repeats the report in
    # case the first one was lost with its worker; advancing is idempotent.
    if claim is None and records.awaits_advance(iteration_id):
        report()
