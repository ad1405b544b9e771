"""A finished pipeline project with a long history, written straight into the database (rows
as the product writes them): one task, a searcher and an analyzer feeding its builder, then a
validator; ``events`` events, most of them the builder's output and tool calls (every call with
its result), a few errors. For the dashboard's browser tests and its browser benchmark, which
need 5,000 or 50,000 events without running 2,500 iterations."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import insert

from shared.db import session_scope
from shared.models import (
    Agent,
    AgentStatus,
    Event,
    Iteration,
    IterationStatus,
    Project,
    ProjectStatus,
    Task,
    TaskStatus,
    new_id,
    utcnow,
)

EVENTS_PER_ITERATION = 50
CONFIG = {"workflow": "pipeline", "check_command": "true", "research": ["searcher", "analyzer"]}


@dataclass(frozen=True)
class BigProject:
    id: str
    builder: str
    searcher: str
    analyzer: str
    validator: str
    events: int


def _agent(project_id: str, task_id: str, category: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": new_id(),
        "project_id": project_id,
        "task_id": task_id,
        "category": category,
        "status": AgentStatus.COMPLETED,
        "iterations": 1,
        "input_tokens": 1000,
        "output_tokens": 200,
        "cost_usd": Decimal("0.0060"),
        **extra,
    }


def make_big_project(events: int, tenant_id: str | None = None, name: str = "big") -> BigProject:
    """Write the project; its events are ``events`` long, its status completed."""
    start = utcnow() - timedelta(hours=2)
    project_id, task_id = new_id(), new_id()
    iterations = max(1, events // EVENTS_PER_ITERATION)
    builder = _agent(project_id, task_id, "builder", iterations=iterations, cost_usd=Decimal("0.0183"))
    searcher = _agent(project_id, task_id, "searcher", parent_id=builder["id"], depth=1)
    analyzer = _agent(project_id, task_id, "analyzer", parent_id=builder["id"], depth=1)
    validator = _agent(project_id, task_id, "validator")
    for offset, agent in enumerate((builder, searcher, analyzer, validator)):
        agent["created_at"] = start + timedelta(microseconds=offset)
    its = [
        {
            "id": new_id(),
            "project_id": project_id,
            "agent_id": builder["id"],
            "number": n + 1,
            "status": IterationStatus.SUCCEEDED,
            "attempt": 1,
            "worker": "bench-worker",
            "cost_usd": Decimal("0.0001"),
            "started_at": start + timedelta(seconds=10 * n),
            "finished_at": start + timedelta(seconds=10 * n + 8),
        }
        for n in range(iterations)
    ]
    rows = list(_events(project_id, builder["id"], its, events, start))
    with session_scope() as session:
        session.execute(
            insert(Project),
            [
                {
                    "id": project_id,
                    "tenant_id": tenant_id,
                    "name": name,
                    "prompt": "Build it.\nThen check it.",
                    "config": {
                        "workflow": "pipeline",
                        "check_command": "true",
                        "research": ["searcher", "analyzer"],
                    },
                    "status": ProjectStatus.COMPLETED,
                    "last_event_seq": events,
                    "budget_limit_usd": Decimal(5),
                    "spent_usd": Decimal("0.0363"),
                    "created_at": start,
                    "started_at": start,
                    "finished_at": start + timedelta(seconds=10 * iterations),
                }
            ],
        )
        session.execute(
            insert(Task),
            [
                {
                    "id": task_id,
                    "project_id": project_id,
                    "key": "main",
                    "title": "main",
                    "status": TaskStatus.COMPLETED,
                }
            ],
        )
        session.execute(insert(Agent), [builder, searcher, analyzer, validator])
        session.execute(insert(Iteration), its)
        for at in range(0, len(rows), 5000):
            session.execute(insert(Event), rows[at : at + 5000])
    return BigProject(project_id, builder["id"], searcher["id"], analyzer["id"], validator["id"], events)


def _events(project_id: str, agent_id: str, its: list[dict[str, Any]], count: int, start: datetime) -> Any:
    """``count`` events in seq order, a cycle per iteration: started, then output and tool calls
    with their results (every 40th an error), then complete."""
    for n in range(count):
        it = its[min(n // EVENTS_PER_ITERATION, len(its) - 1)]
        step = n % EVENTS_PER_ITERATION
        ts = start + timedelta(milliseconds=100 * n)
        call = f"tu-{n - 1}" if step % 3 == 2 else f"tu-{n}"
        if step == 0:
            kind, data = "iteration_started", {"number": it["number"], "attempt": 1, "worker": "bench-worker"}
        elif step == EVENTS_PER_ITERATION - 1:
            kind, data = "iteration_complete", {"number": it["number"], "completed_task": False}
        elif step % 3 == 0:
            kind, data = "agent_output_chunk", {"text": f"Looking at part {n}.\nNext line of {n}."}
        elif step % 3 == 1:
            kind = "agent_tool_call"
            data = {"tool": "bash", "input": {"command": f"echo {n}\nls -la"}, "tool_use_id": call}
        else:
            failed = n % 40 == 2
            kind = "tool_executed"
            data = {"tool": "bash", "tool_use_id": call, "is_error": failed, "output": f"out {n}\nline two"}
        yield {
            "project_id": project_id,
            "seq": n + 1,
            "agent_id": agent_id,
            "iteration_id": it["id"],
            "type": kind,
            "data": data,
            "ts": ts,
        }
