"""A project's cost over time, for the dashboard's chart: the running total after each model
call, from the same rows as ``raas cost`` (assistant messages), so the chart's last point is the
report's total."""

from __future__ import annotations

from datetime import UTC
from decimal import Decimal

from pydantic import BaseModel
from sqlalchemy import select

from orchestrator.scheduling.lookup import get_project_row
from shared.db import session_scope
from shared.models import Message
from shared.project_config import ProjectConfig

MAX_POINTS = 2000


class CostSeries(BaseModel):
    """Parallel lists, as a chart wants them: seconds since the epoch and the running total."""

    t: list[float]
    usd: list[float]
    total_usd: Decimal


def cost_series(project_id: str) -> CostSeries:
    with session_scope() as session:
        get_project_row(session, project_id)
        rows = session.execute(
            select(Message.created_at, Message.cost_usd)
            .where(Message.project_id == project_id, Message.role == "assistant")
            .order_by(Message.created_at, Message.id)
        ).all()
    total = Decimal(0)
    points: list[tuple[float, Decimal]] = []
    for created, cost in rows:
        total += cost
        stamp = created if created.tzinfo else created.replace(tzinfo=UTC)  # SQLite drops the zone
        points.append((stamp.timestamp(), total))
    step = max(1, len(points) // MAX_POINTS)
    kept = points[::step]
    if points and kept[-1] is not points[-1]:
        kept.append(points[-1])  # the last point is the total, whatever was thinned
    return CostSeries(t=[t for t, _ in kept], usd=[float(u) for _, u in kept], total_usd=total)


class BudgetMeter(BaseModel):
    """Where a project stands against its limit: settled (spent), reserved for calls in flight,
    the limit, and the warning threshold (raas.toml ``[budget] warning_threshold``) in USD."""

    settled_usd: Decimal
    reserved_usd: Decimal
    limit_usd: Decimal
    warning_usd: Decimal


def budget_meter(project_id: str) -> BudgetMeter:
    with session_scope() as session:
        project = get_project_row(session, project_id)
        threshold = ProjectConfig.model_validate(project.config).budget.warning_threshold
        return BudgetMeter(
            settled_usd=project.spent_usd,
            reserved_usd=project.reserved_usd,
            limit_usd=project.budget_limit_usd,
            warning_usd=(project.budget_limit_usd * Decimal(str(threshold))).quantize(Decimal("0.000001")),
        )
