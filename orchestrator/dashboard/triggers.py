"""The triggers page: the signed-in tenant's triggers (the cluster's session: every tenant's, as
``GET /v1/triggers``), each with its next schedule slot and latest runs, and Pause/Resume; a
trigger's own page lists its runs, each with what it made (a project, or why none).

The list and the two actions call ``orchestrator.triggers.store`` as the API does, so another
tenant's trigger is not found here either; an action answers a message and ``HX-Trigger:
triggers-changed``, on which the list reloads itself.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from orchestrator.dashboard.actions import Csrf, run_action
from orchestrator.dashboard.render import render
from orchestrator.dashboard.views import Ctx, Signed, as_page
from orchestrator.triggers import store
from shared.models import TriggerStatus

router = APIRouter(include_in_schema=False)
LATEST_RUNS = 5
ALL_RUNS = 100
VERBS = {"pause": TriggerStatus.PAUSED, "resume": TriggerStatus.ACTIVE}


@router.get("/triggers")
def triggers_page(ctx: Ctx, session: Signed) -> HTMLResponse:
    tenant_id = session.principal.tenant_id
    found = store.list_triggers(tenant_id, ctx.settings)
    runs = {t.id: store.trigger_runs(tenant_id, t.id, LATEST_RUNS) for t in found}
    return HTMLResponse(render("triggers.html", session=session, triggers=found, runs=runs))


@router.get("/triggers/{trigger_id}")
def trigger_page(trigger_id: str, ctx: Ctx, session: Signed) -> HTMLResponse:
    """One trigger and its runs (the latest ``ALL_RUNS``), newest first: what each delivery made."""
    tenant_id = session.principal.tenant_id
    with as_page():
        found = store.show_trigger(tenant_id, trigger_id, ctx.settings)
        runs = store.trigger_runs(tenant_id, found.id, ALL_RUNS)
    return HTMLResponse(render("trigger.html", session=session, trigger=found, runs=runs))


@router.post("/ui/triggers/{trigger_id}/{verb}")
def trigger_action(
    request: Request, trigger_id: str, verb: str, session: Signed, csrf: Csrf = None
) -> HTMLResponse:
    def setting(status: TriggerStatus) -> Callable[[], str]:
        def act() -> str:
            done = store.set_status(session.principal.tenant_id, trigger_id, status)
            return f"trigger {done.name} is {done.status.value}"

        return act

    verbs = {verb: setting(status) for verb, status in VERBS.items()}
    return run_action(request, session, csrf, verb, verbs, changed="triggers-changed")
