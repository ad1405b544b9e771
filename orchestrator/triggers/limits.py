"""May a trigger's run start now? One decision, under the trigger's row lock (issue #24, point 6).

In order: a run for the same subject still active (``on_active``), the trigger's concurrency cap
(the run waits), runs per hour and per day, the budget per day (every started run counts its
whole per-run limit: the worst case, as the budget gate counts it), and the tenant's projects per
hour (the limit ``raas submit`` has too). A limit refuses; a cap or a busy subject makes it wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from enum import Enum

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from orchestrator.scheduling.submission import projects_this_hour
from shared.models import (
    OnActive,
    Project,
    ProjectStatus,
    RunStatus,
    Tenant,
    Trigger,
    TriggerRun,
)

TERMINAL = (ProjectStatus.COMPLETED, ProjectStatus.FAILED, ProjectStatus.STOPPED)


class Verdict(str, Enum):
    START = "start"
    WAIT = "wait"
    IGNORE = "ignore"
    REFUSE = "refuse"
    RESTART = "restart"  # stop ``active`` first, then start


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str = ""
    active: str | None = None  # the subject's active run's project (ignore, restart)


def active_runs(
    session: Session, trigger_id: str, run_id: str, subject: str | None = None
) -> list[tuple[str, str | None]]:
    """(run id, project id) of the trigger's runs that hold a slot: starting, or started and not
    ended; only those about ``subject`` when it is given."""
    query = (
        select(TriggerRun.id, TriggerRun.project_id)
        .outerjoin(Project, Project.id == TriggerRun.project_id)
        .where(
            TriggerRun.trigger_id == trigger_id,
            TriggerRun.id != run_id,
            or_(
                TriggerRun.status == RunStatus.STARTING,
                (TriggerRun.status == RunStatus.STARTED) & Project.status.not_in(TERMINAL),
            ),
        )
    )
    if subject is not None:
        query = query.where(TriggerRun.subject == subject)
    return [(row[0], row[1]) for row in session.execute(query)]


def _started_since(session: Session, trigger: Trigger, since: datetime) -> tuple[int, Decimal]:
    """Runs started (or being started) since ``since``, and the budget they hold: each its project's
    limit, or the trigger's per-run budget while its project is being made."""
    per_run = trigger.budget_per_run_usd
    count, budget = session.execute(
        select(
            func.count(TriggerRun.id),
            func.coalesce(func.sum(func.coalesce(Project.budget_limit_usd, per_run)), 0),
        )
        .outerjoin(Project, Project.id == TriggerRun.project_id)
        .where(
            TriggerRun.trigger_id == trigger.id,
            TriggerRun.status.in_((RunStatus.STARTING, RunStatus.STARTED)),
            TriggerRun.started_at >= since,
        )
    ).one()
    return int(count), Decimal(budget)


def _tenant_over(session: Session, tenant_id: str | None, now: datetime) -> str | None:
    if tenant_id is None:
        return None
    limit = session.scalar(select(Tenant.submissions_per_hour).where(Tenant.id == tenant_id))
    recent = projects_this_hour(session, tenant_id, now)
    if limit is not None and recent >= limit:
        return f"the tenant created {recent} projects in the last hour (limit {limit})"
    return None


def decide(
    session: Session, trigger: Trigger, run: TriggerRun, limits: dict[str, int | None], now: datetime
) -> Decision:
    """What to do with ``run`` now; ``limits`` holds runs_per_hour and runs_per_day (None: none)."""
    if run.subject is not None:
        busy = active_runs(session, trigger.id, run.id, run.subject)
        if busy and trigger.on_active is OnActive.IGNORE:
            return Decision(Verdict.IGNORE, f"run {busy[0][0]} for {run.subject} is still active", busy[0][1])
        if busy and trigger.on_active is OnActive.QUEUE:
            return Decision(Verdict.WAIT, f"waits for run {busy[0][0]} of {run.subject}")
        if busy and busy[0][1] is not None:
            return Decision(Verdict.RESTART, f"restarts run {busy[0][0]} of {run.subject}", busy[0][1])
    running = active_runs(session, trigger.id, run.id)
    if len(running) >= trigger.max_concurrent:
        return Decision(Verdict.WAIT, f"{len(running)} runs active (max_concurrent {trigger.max_concurrent})")
    for window, key in ((timedelta(hours=1), "runs_per_hour"), (timedelta(days=1), "runs_per_day")):
        cap = limits.get(key)
        count, _ = _started_since(session, trigger, now - window)
        if cap is not None and count >= cap:
            return Decision(Verdict.REFUSE, f"{count} runs started in the last {key[9:]} ({key} = {cap})")
    if trigger.budget_per_day_usd is not None:
        _, committed = _started_since(session, trigger, now - timedelta(days=1))
        if committed + trigger.budget_per_run_usd > trigger.budget_per_day_usd:
            return Decision(
                Verdict.REFUSE,
                f"a run of ${trigger.budget_per_run_usd} would exceed the day's budget "
                f"(${committed} of ${trigger.budget_per_day_usd} committed in the last 24 hours)",
            )
    over = _tenant_over(session, trigger.tenant_id, now)
    return Decision(Verdict.REFUSE, over) if over else Decision(Verdict.START)
