"""How the coordinator hands work to workers, and deliveries to its own queue. Only the
coordinator enqueues iterations."""

from __future__ import annotations

from typing import Protocol

from celery import Celery

from shared.celery_app import COORDINATOR_QUEUE, DELIVER, ITERATIONS_QUEUE, RUN_ITERATION


class Dispatcher(Protocol):
    def enqueue_iteration(self, project_id: str, iteration_id: str) -> None: ...

    def enqueue_delivery(self, delivery_id: str) -> None: ...


class CeleryDispatcher:
    """Sends ``run_iteration`` by name, so the coordinator never imports worker code."""

    def __init__(self, app: Celery) -> None:
        self._app = app

    def enqueue_iteration(self, project_id: str, iteration_id: str) -> None:
        self._app.send_task(
            RUN_ITERATION,
            kwargs={"project_id": project_id, "iteration_id": iteration_id},
            queue=ITERATIONS_QUEUE,
        )

    def enqueue_delivery(self, delivery_id: str) -> None:
        """``raas.deliver`` by name: the coordinator's service runs orchestrator.delivery."""
        self._app.send_task(DELIVER, kwargs={"delivery_id": delivery_id}, queue=COORDINATOR_QUEUE)
