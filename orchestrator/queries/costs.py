"""What a project cost: totals, by agent, by model, by hour, and one receipt per iteration."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BaseModel
from sqlalchemy import func, select

from orchestrator.scheduling.lookup import get_project_row
from shared.db import session_scope
from shared.models import Agent, Iteration, Message
from shared.pricing import ModelPrice, find_price
from shared.project_config import ProjectConfig
from shared.usage import Spelled, Usage

#: Usage as cost reports spell it (their JSON predates the one Usage model).
Tokens = Annotated[
    Usage,
    Spelled(
        input_tokens="input",
        output_tokens="output",
        cache_creation_input_tokens="cache_write",
        cache_read_input_tokens="cache_read",
    ),
]


class CostLine(BaseModel):
    key: str
    calls: int
    tokens: Tokens
    cost_usd: Decimal


class Receipt(BaseModel):
    """One iteration's bill (users asked for per-task receipts: ralph-claude-code#110)."""

    iteration_id: str
    agent_id: str
    number: int
    attempts: int
    model: str | None
    calls: int
    tokens: Tokens
    price: ModelPrice | None
    cost_usd: Decimal
    duration_s: float | None


class CostReport(BaseModel):
    project_id: str
    total_usd: Decimal
    limit_usd: Decimal
    reserved_usd: Decimal
    tokens: Tokens
    by_agent: list[CostLine]
    by_model: list[CostLine]
    by_hour: list[CostLine]
    receipts: list[Receipt] | None = None


# The call count, the sum of each Usage count (its columns are named as its fields), the cost.
CALL_SUMS = (
    func.count(Message.id),
    *(func.coalesce(func.sum(getattr(Message, name)), 0) for name in Usage.model_fields),
    func.coalesce(func.sum(Message.cost_usd), 0),
)


def cost_line(key: str, row: tuple[Any, ...]) -> CostLine:
    """A line of a report from a row of ``CALL_SUMS`` (the dashboard's agent overview sums so too)."""
    calls, *counts, cost = row
    return CostLine(key=key, calls=calls, tokens=Usage.from_counts(counts), cost_usd=Decimal(cost))


def cost_report(project_id: str, with_receipts: bool = False) -> CostReport:
    with session_scope() as session:
        project = get_project_row(session, project_id)
        calls = select(*CALL_SUMS).where(Message.project_id == project_id, Message.role == "assistant")
        total = cost_line("total", tuple(session.execute(calls).one()))
        by_agent = [
            cost_line(f"{row[6]} ({row[7]}, depth {row[8]})", tuple(row[:6]))
            for row in session.execute(
                calls.add_columns(Agent.id, Agent.category, Agent.depth)
                .join(Agent, Agent.id == Message.agent_id)
                .group_by(Agent.id, Agent.category, Agent.depth)
            )
        ]
        by_model = [
            cost_line(row[6] or "?", tuple(row[:6]))
            for row in session.execute(calls.add_columns(Message.model).group_by(Message.model))
        ]
        hours: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0), Decimal(0)])
        for created, cost in session.execute(
            select(Message.created_at, Message.cost_usd).where(
                Message.project_id == project_id, Message.role == "assistant"
            )
        ):
            bucket = hours[_hour(created)]
            bucket[0] += 1
            bucket[1] += cost
        by_hour = [
            CostLine(key=h, calls=int(v[0]), tokens=Usage(), cost_usd=v[1]) for h, v in sorted(hours.items())
        ]
        report = CostReport(
            project_id=project.id,
            total_usd=total.cost_usd,
            limit_usd=project.budget_limit_usd,
            reserved_usd=project.reserved_usd,
            tokens=total.tokens,
            by_agent=by_agent,
            by_model=by_model,
            by_hour=by_hour,
        )
        config = ProjectConfig.model_validate(project.config)
    # After the session: on SQLite every transaction is BEGIN IMMEDIATE, so a second session
    # opened inside the first waited for its lock (busy_timeout, 30 s) while holding it.
    if with_receipts:
        report.receipts = _receipts(project_id, config)
    return report


def _hour(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:00")


def _receipts(project_id: str, config: ProjectConfig) -> list[Receipt]:
    with session_scope() as session:
        iterations = session.scalars(
            select(Iteration).where(Iteration.project_id == project_id).order_by(Iteration.created_at)
        ).all()
        rows = session.execute(
            select(Message.iteration_id, Message.model, *CALL_SUMS)
            .where(Message.project_id == project_id, Message.role == "assistant")
            .group_by(Message.iteration_id, Message.model)
        ).all()
    usage = {row[0]: (row[1], cost_line("", tuple(row[2:]))) for row in rows}
    receipts = []
    for it in iterations:
        model, line = usage.get(it.id, (None, cost_line("", (0, 0, 0, 0, 0, Decimal(0)))))
        duration = (
            (it.finished_at - it.started_at).total_seconds() if it.finished_at and it.started_at else None
        )
        receipts.append(
            Receipt(
                iteration_id=it.id,
                agent_id=it.agent_id,
                number=it.number,
                attempts=it.attempt,
                model=model,
                calls=line.calls,
                tokens=line.tokens,
                price=find_price(model, config.pricing) if model else None,
                cost_usd=line.cost_usd,
                duration_s=duration,
            )
        )
    return receipts
