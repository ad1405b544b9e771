"""The coordinator's Celery tasks: an iteration reports back and the project advances; a delivery runs."""

from __future__ import annotations

from functools import lru_cache

from orchestrator import delivery
from orchestrator.scheduling import advance
from orchestrator.scheduling.dispatch import CeleryDispatcher
from orchestrator.triggers.launch import START_TRIGGER_RUN
from orchestrator.triggers.start import start_run
from shared.celery_app import ADVANCE_PROJECT, DELIVER, app
from shared.events import RedisBus
from shared.settings import get_settings


@lru_cache(maxsize=1)
def _bus() -> RedisBus:
    return RedisBus(get_settings().redis_url)


@app.task(name=ADVANCE_PROJECT)
def advance_project(project_id: str, iteration_id: str) -> None:
    """Idempotent: a report delivered twice advances the project once."""
    advance.advance(project_id, iteration_id, CeleryDispatcher(app), _bus())


@app.task(name=DELIVER)
def deliver(delivery_id: str) -> None:
    """Idempotent: a delivery redelivered, resent or retried repeats none of its finished steps."""
    delivery.deliver(delivery_id, get_settings(), _bus())


@app.task(name=START_TRIGGER_RUN)
def start_trigger_run(run_id: str) -> None:
    """Idempotent: a run already claimed (or decided) is left alone."""
    start_run(run_id, get_settings(), CeleryDispatcher(app), _bus())
