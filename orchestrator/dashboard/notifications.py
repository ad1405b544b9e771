"""The notifications page: the signed-in tenant's subscriptions (medium, scope, events, state,
including "paused: N failed attempts in a row" and the last error), and Pause/Resume; a
subscription's own page is its delivery log (each notification: event, status, attempts, last
error, when it was sent or is tried next).

It shows ``orchestrator.notify.subscriptions.listing``'s answer, which carries no secret (the
webhook key, Slack URL or SMTP password stays sealed in the database); the actions call
``set_paused`` as the API does, and answer a message and ``HX-Trigger: notifications-changed``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ConfigDict
from sqlalchemy import select
from sqlalchemy.orm import Session as DbSession

from orchestrator.dashboard.actions import Csrf, run_action
from orchestrator.dashboard.render import render
from orchestrator.dashboard.views import Signed, as_page
from orchestrator.notify import subscriptions
from shared.db import session_scope
from shared.errors import NotFound
from shared.models import Notification, NotificationStatus

router = APIRouter(include_in_schema=False)
VERBS = {"pause": True, "resume": False}
LOG_ROWS = 200


@router.get("/notifications")
def notifications_page(session: Signed) -> HTMLResponse:
    with session_scope() as db:
        found = subscriptions.listing(db, session.principal.tenant_id)
    return HTMLResponse(render("notifications.html", session=session, subscriptions=found))


class Delivery(BaseModel):
    """One notification of a subscription: what it said, and how sending it went."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    event_type: str
    project_id: str | None
    status: NotificationStatus
    attempts: int
    last_error: str | None
    created_at: datetime
    sent_at: datetime | None
    next_attempt_at: datetime


def delivery_log(
    db: DbSession, tenant_id: str | None, subscription_id: str, limit: int = LOG_ROWS
) -> tuple[subscriptions.SubscriptionOut, list[Delivery]]:
    """The subscription and its notifications, newest first (another tenant's is not found).

    Raises:
        NotFound: no such subscription of this tenant.
    """
    found = [s for s in subscriptions.listing(db, tenant_id) if s.id == subscription_id]
    if not found:
        msg = f"no notification subscription {subscription_id!r}; `raas notify ls` lists yours"
        raise NotFound(msg)
    rows = db.scalars(
        select(Notification)
        .where(Notification.subscription_id == subscription_id)
        .order_by(Notification.created_at.desc(), Notification.id)
        .limit(limit)
    )
    return found[0], [Delivery.model_validate(row) for row in rows]


@router.get("/notifications/{subscription_id}")
def delivery_log_page(subscription_id: str, session: Signed) -> HTMLResponse:
    """A subscription and its delivery log: each notification, its attempts and last error."""
    with as_page(), session_scope() as db:
        found, log = delivery_log(db, session.principal.tenant_id, subscription_id)
    return HTMLResponse(render("notification.html", session=session, subscription=found, log=log))


@router.post("/ui/notifications/{subscription_id}/{verb}")
def notification_action(
    request: Request, subscription_id: str, verb: str, session: Signed, csrf: Csrf = None
) -> HTMLResponse:
    def setting(paused: bool) -> Callable[[], str]:
        def act() -> str:
            with session_scope() as db:
                done = subscriptions.set_paused(db, session.principal.tenant_id, subscription_id, paused)
            return f"notification {done.id} is {done.state}"

        return act

    verbs = {verb: setting(paused) for verb, paused in VERBS.items()}
    return run_action(request, session, csrf, verb, verbs, changed="notifications-changed")
