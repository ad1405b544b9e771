"""What a pull request reports of each task: what it cost, how long it took, what its agents said.

Read from the same rows as ``raas costs`` (assistant messages carry each call's usage and cost),
summed by task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from shared import events
from shared.models import Agent, Event, Iteration, Message, Task
from shared.usage import Usage


@dataclass
class TaskReceipt:
    key: str
    title: str
    status: str
    iterations: int = 0
    tokens: Usage = field(default_factory=Usage)
    cost_usd: Decimal = Decimal(0)
    duration_s: float = 0.0
    validator: str = "—"  # "passed", "failed" or none
    summary: str | None = None  # the last summary a builder of the task wrote


def task_receipts(session: Session, project_id: str) -> list[TaskReceipt]:
    tasks = session.scalars(
        select(Task).where(Task.project_id == project_id).order_by(Task.wave, Task.key)
    ).all()
    receipts = {t.id: TaskReceipt(key=t.key, title=t.title, status=t.status.value) for t in tasks}
    sums = session.execute(
        select(
            Agent.task_id,
            *(func.coalesce(func.sum(getattr(Message, name)), 0) for name in Usage.model_fields),
            func.coalesce(func.sum(Message.cost_usd), 0),
        )
        .join(Agent, Agent.id == Message.agent_id)
        .where(Message.project_id == project_id, Message.role == "assistant")
        .group_by(Agent.task_id)
    )
    for task_id, *counts, cost in sums:
        if task_id in receipts:
            receipts[task_id].tokens = Usage.from_counts(int(c) for c in counts)
            receipts[task_id].cost_usd = Decimal(cost)
    iterations = session.execute(
        select(Agent.task_id, Agent.parent_id, Iteration.started_at, Iteration.finished_at, Iteration.summary)
        .join(Agent, Agent.id == Iteration.agent_id)
        .where(Iteration.project_id == project_id)
        .order_by(Iteration.created_at)
    )
    for task_id, parent_id, started, finished, summary in iterations:
        receipt = receipts.get(task_id) if task_id is not None else None
        if receipt is None:
            continue
        receipt.iterations += 1
        if started is not None and finished is not None:
            receipt.duration_s += (finished - started).total_seconds()
        if parent_id is None and summary:
            receipt.summary = summary
    by_key = {r.key: r for r in receipts.values()}
    for data in session.scalars(
        select(Event.data)
        .where(Event.project_id == project_id, Event.type == events.TASK_VALIDATED)
        .order_by(Event.seq)
    ):
        if data.get("task") in by_key:
            by_key[data["task"]].validator = "passed" if data.get("passed") else "failed"
    return list(receipts.values())
