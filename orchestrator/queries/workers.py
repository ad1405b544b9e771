"""The live workers, for ``raas workers`` and ``GET /v1/workers``: who answers on the broker.

They come from Celery's inspect API (a broadcast on the broker), joined with the iteration rows
their tasks are running. A broker that does not answer is a ServiceUnavailable, whichever client
library noticed it first (kombu's OperationalError, or redis-py's ConnectionError).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import redis
from celery import Celery
from kombu.exceptions import OperationalError
from pydantic import BaseModel
from sqlalchemy import select

from shared.db import session_scope
from shared.errors import ServiceUnavailable
from shared.models import Agent, Iteration


class ActiveTask(BaseModel):
    """A task a worker is running; for an iteration, what the database knows of it."""

    task_id: str
    name: str
    project_id: str | None = None
    iteration_id: str | None = None
    started_at: datetime | None = None
    number: int | None = None
    attempt: int | None = None
    agent_id: str | None = None
    category: str | None = None


class WorkerInfo(BaseModel):
    """A live Celery node: a worker, or a coordinator consuming the coordinator queue."""

    name: str
    queues: list[str]
    concurrency: int | None = None
    active: list[ActiveTask]


def inspect_workers(app: Celery, timeout_s: float = 1.0) -> list[WorkerInfo]:
    """The nodes that answer a broadcast within ``timeout_s``, with their queues and tasks.

    Raises:
        ServiceUnavailable: the broker does not answer.
    """
    try:
        queues: dict[str, list[dict[str, Any]]] = app.control.inspect(timeout=timeout_s).active_queues() or {}
        if not queues:
            return []
        nodes = sorted(queues)
        # Now that the nodes are known, a reply from each ends the wait early.
        known = app.control.inspect(destination=nodes, timeout=timeout_s, limit=len(nodes))
        active: dict[str, list[dict[str, Any]]] = known.active() or {}
        stats: dict[str, dict[str, Any]] = known.stats() or {}
    except (OperationalError, OSError, redis.ConnectionError) as exc:
        msg = f"the broker does not answer ({type(exc).__name__}: {exc}); is it running?"
        raise ServiceUnavailable(msg) from exc
    tasks = {node: [_active_task(t) for t in active.get(node) or []] for node in nodes}
    _add_iterations(task for node_tasks in tasks.values() for task in node_tasks)
    return [
        WorkerInfo(
            name=node,
            queues=sorted(q["name"] for q in queues[node]),
            concurrency=_concurrency(stats.get(node)),
            active=tasks[node],
        )
        for node in nodes
    ]


def _concurrency(stats: dict[str, Any] | None) -> int | None:
    pool = (stats or {}).get("pool")
    return pool.get("max-concurrency") if isinstance(pool, dict) else None


def _active_task(info: dict[str, Any]) -> ActiveTask:
    kwargs = info.get("kwargs")
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    started = info.get("time_start")
    return ActiveTask(
        task_id=info["id"],
        name=info.get("name") or "?",
        project_id=kwargs.get("project_id"),
        iteration_id=kwargs.get("iteration_id"),
        started_at=datetime.fromtimestamp(started, UTC) if started else None,
    )


def _add_iterations(tasks: Iterable[ActiveTask]) -> None:
    by_iteration: dict[str, list[ActiveTask]] = {}
    for task in tasks:
        if task.iteration_id:
            by_iteration.setdefault(task.iteration_id, []).append(task)
    if not by_iteration:
        return
    with session_scope() as session:
        rows = session.execute(
            select(Iteration.id, Iteration.number, Iteration.attempt, Iteration.agent_id, Agent.category)
            .join(Agent, Agent.id == Iteration.agent_id)
            .where(Iteration.id.in_(list(by_iteration)))
        ).all()
    for iteration_id, number, attempt, agent_id, category in rows:
        for task in by_iteration[iteration_id]:
            task.number, task.attempt, task.agent_id, task.category = number, attempt, agent_id, category
