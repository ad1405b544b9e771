"""How a committed trigger run reaches the code that starts it: after the commit, by id.

The coordinator sends ``raas.start_trigger_run`` by name to its own queue (as it sends
deliveries), so the receiver answers at once and the clone happens on a consumer; the clock's
sweep (:mod:`orchestrator.triggers.clock`) sends again what a crash lost. The start is idempotent
(the run's row is claimed with a conditional write), so a copy is harmless.
"""

from __future__ import annotations

from typing import Protocol

from celery import Celery

from shared.celery_app import COORDINATOR_QUEUE

START_TRIGGER_RUN = "raas.start_trigger_run"


class Launcher(Protocol):
    def launch(self, run_id: str) -> None: ...


class CeleryLauncher:
    def __init__(self, app: Celery) -> None:
        self._app = app

    def launch(self, run_id: str) -> None:
        self._app.send_task(START_TRIGGER_RUN, kwargs={"run_id": run_id}, queue=COORDINATOR_QUEUE)
