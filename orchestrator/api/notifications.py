"""The caller's notifications: subscribe events to a webhook, Slack or mail; list, pause, resume
and remove them. Secrets go in and never come out (orchestrator.notify.subscriptions)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path as PathParam
from fastapi import Response

from orchestrator.api.deps import Caller, Ctx, authed_router
from orchestrator.notify import subscriptions
from orchestrator.notify.subscriptions import SubscriptionIn, SubscriptionOut
from shared.db import session_scope

router = authed_router()
SubscriptionId = Annotated[str, PathParam(max_length=32, description="The id `raas notify ls` shows")]


@router.post("/notifications", status_code=201)
def add_notification(body: SubscriptionIn, ctx: Ctx, caller: Caller) -> SubscriptionOut:
    with session_scope() as session:
        return subscriptions.add(session, ctx.settings, caller.tenant_id, body)


@router.get("/notifications")
def list_notifications(caller: Caller) -> list[SubscriptionOut]:
    with session_scope() as session:
        return subscriptions.listing(session, caller.tenant_id)


@router.post("/notifications/{subscription_id}/pause")
def pause_notification(subscription_id: SubscriptionId, caller: Caller) -> SubscriptionOut:
    with session_scope() as session:
        return subscriptions.set_paused(session, caller.tenant_id, subscription_id, paused=True)


@router.post("/notifications/{subscription_id}/resume")
def resume_notification(subscription_id: SubscriptionId, caller: Caller) -> SubscriptionOut:
    with session_scope() as session:
        return subscriptions.set_paused(session, caller.tenant_id, subscription_id, paused=False)


@router.delete("/notifications/{subscription_id}", status_code=204)
def remove_notification(subscription_id: SubscriptionId, caller: Caller) -> Response:
    with session_scope() as session:
        subscriptions.remove(session, caller.tenant_id, subscription_id)
    return Response(status_code=204)
