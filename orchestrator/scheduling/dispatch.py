"""How the coordinator hands work to workers, and deliveries to its own queue. Only the
coordinator enqueues iterations.

A task's next iteration goes first to the worker that ran the task's last one within the idle
window (it may hold the task's container: :mod:`workers.sandbox.keeper`), on that worker's own
queue; the same message goes to the shared queue ``route_wait_s`` later. Whichever a worker
takes first claims the iteration (a conditional update); the other finds it claimed and runs
nothing. So a holder that is busy or dead costs the wait, never the iteration.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol

from celery import Celery
from sqlalchemy import and_, bindparam, or_, select
from sqlalchemy.orm import aliased

from shared.celery_app import COORDINATOR_QUEUE, DELIVER, ITERATIONS_QUEUE, RUN_ITERATION, worker_queue
from shared.db import session_scope
from shared.models import Agent, Iteration, utcnow
from shared.settings import Settings, get_settings


class Dispatcher(Protocol):
    def enqueue_iteration(self, project_id: str, iteration_id: str) -> None: ...

    def enqueue_delivery(self, delivery_id: str) -> None: ...


_current, _previous = aliased(Iteration), aliased(Iteration)
_agent, _sibling = aliased(Agent), aliased(Agent)
# The worker of the latest iteration, finished since ``since``, of the same task (or agent, with
# no task) as the iteration ``iteration_id``, by the task's own agents (not subagents). Built once.
_HOLDER = (
    select(_previous.worker)
    .select_from(_current)
    .join(_agent, _agent.id == _current.agent_id)
    .join(
        _sibling,
        and_(
            _sibling.project_id == _agent.project_id,
            or_(_sibling.task_id == _agent.task_id, _sibling.id == _agent.id),
            _sibling.depth == 0,
            _sibling.parallel.is_(False),
        ),
    )
    .join(_previous, _previous.agent_id == _sibling.id)
    .where(
        _current.id == bindparam("iteration_id"),
        _agent.depth == 0,
        _agent.parallel.is_(False),
        _previous.id != _current.id,
        _previous.finished_at >= bindparam("since"),
        _previous.worker.is_not(None),
    )
    .order_by(_previous.finished_at.desc())
    .limit(1)
)


def holder_of(iteration_id: str, idle_s: float) -> str | None:
    """The worker that may hold the container of the iteration's task: the one that ran the task's
    latest iteration, if it finished less than ``idle_s`` ago."""
    since = utcnow() - timedelta(seconds=idle_s)
    with session_scope() as session:
        worker: str | None = session.execute(
            _HOLDER, {"iteration_id": iteration_id, "since": since}
        ).scalar_one_or_none()
    return worker


class CeleryDispatcher:
    """Sends ``run_iteration`` by name, so the coordinator never imports worker code."""

    def __init__(self, app: Celery, settings: Settings | None = None) -> None:
        self._app = app
        settings = settings or get_settings()
        self._idle_s = settings.task_container_idle_s
        self._wait_s = settings.route_wait_s

    def enqueue_iteration(self, project_id: str, iteration_id: str) -> None:
        kwargs = {"project_id": project_id, "iteration_id": iteration_id}
        holder = holder_of(iteration_id, self._idle_s) if self._idle_s > 0 and self._wait_s > 0 else None
        if holder is None:
            self._app.send_task(RUN_ITERATION, kwargs=kwargs, queue=ITERATIONS_QUEUE)
            return
        # The holder's copy expires when the shared one becomes due: a holder that comes back
        # later (restarted under its name) does not find a stale message to run.
        self._app.send_task(RUN_ITERATION, kwargs=kwargs, queue=worker_queue(holder), expires=self._wait_s)
        self._app.send_task(RUN_ITERATION, kwargs=kwargs, queue=ITERATIONS_QUEUE, countdown=self._wait_s)

    def enqueue_delivery(self, delivery_id: str) -> None:
        """``raas.deliver`` by name: the coordinator's service runs orchestrator.delivery."""
        self._app.send_task(DELIVER, kwargs={"delivery_id": delivery_id}, queue=COORDINATOR_QUEUE)
