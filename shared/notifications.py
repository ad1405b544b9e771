"""The notification outbox's writing side: an event that people may subscribe to becomes one
row per matching subscription, in the event's own transaction (DESIGN.md rule 12).

:func:`shared.events.record` calls :func:`fan_out` for every event whose payload says ``NOTIFY``
(``shared.event_payloads.NOTIFIABLE``), whoever records it: the coordinator's transitions, a
worker's budget warning. A transaction that rolls back takes its rows with it, so nothing is
sent for a transition that did not happen; the coordinator's sender (orchestrator.notify) sends
the rows after the commit. Nothing here imports ``shared.events``: it calls in here.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlalchemy import and_, insert, or_, select
from sqlalchemy.orm import Session

from shared.models import (
    Notification,
    NotificationStatus,
    Project,
    Subscription,
    SubscriptionStatus,
    new_id,
    utcnow,
)
from shared.schemas import EventOut


def fan_out(session: Session, event: EventOut) -> int:
    """Write a notification of a project's ``event`` for each active subscription that takes
    its type (the tenant's and the project's own); how many were written."""
    project = session.get(Project, event.project_id)
    if project is None:
        return 0
    snapshot = {
        "id": project.id,
        "name": project.name,
        "status": project.status.value,
        "reason": project.status_line,
        "spent_usd": _money(project.spent_usd),
        "limit_usd": _money(project.budget_limit_usd),
    }
    payload = {
        "type": event.type,
        "seq": event.seq,
        "ts": event.ts.isoformat(),
        "data": event.data,
        "project": snapshot,
    }
    return enqueue(
        session,
        tenant_id=project.tenant_id,
        project_id=project.id,
        event_type=event.type,
        event_key=f"{project.id}:{event.seq}",
        payload=payload,
    )


def enqueue(
    session: Session,
    *,
    tenant_id: str | None,
    project_id: str | None,
    event_type: str,
    event_key: str,
    payload: dict[str, Any],
) -> int:
    """Write one notification per active subscription of the tenant (and of ``project_id``, when
    the event is a project's) that takes ``event_type``; ``event_key`` names the event, once per
    subscription. For news without a project (a trigger that refused a run) call this directly."""
    owner = Subscription.tenant_id.is_(None) if tenant_id is None else Subscription.tenant_id == tenant_id
    # The tenant's own subscriptions to all its projects, and any to this project (the cluster
    # token may subscribe to any project; a tenant only to its own, checked when it subscribes).
    scope = and_(owner, Subscription.project_id.is_(None))
    if project_id is not None:
        scope = or_(scope, Subscription.project_id == project_id)
    subscriptions = session.execute(
        select(Subscription.id, Subscription.events).where(
            scope, Subscription.status == SubscriptionStatus.ACTIVE
        )
    ).all()
    now = utcnow()
    rows = [
        {
            "id": new_id(),
            "subscription_id": subscription_id,
            "project_id": project_id,
            "event_type": event_type,
            "event_key": event_key,
            "payload": payload,
            "status": NotificationStatus.PENDING,
            "attempts": 0,
            "next_attempt_at": now,
            "created_at": now,
        }
        for subscription_id, types in subscriptions
        if event_type in types
    ]
    if rows:
        session.execute(insert(Notification), rows)
    return len(rows)


def _money(amount: Decimal | None) -> str:
    return f"{Decimal(amount or 0):.6f}"
