"""The evals pages (issue #27): the signed-in tenant's eval runs, and a run's report as a matrix —
per configuration its resolve rate (95% interval), pass@k, pass^k and $ per resolved task, per
task which configurations solved it — with the attempts that did not run.

Both read ``orchestrator.evals`` as the API does, so another tenant's run is not found here either.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from orchestrator.dashboard.render import render
from orchestrator.dashboard.views import Signed, as_page
from orchestrator.evals import report, store

router = APIRouter(include_in_schema=False)


@router.get("/evals")
def evals_page(session: Signed) -> HTMLResponse:
    runs = store.list_runs(session.principal.tenant_id)
    return HTMLResponse(render("evals.html", session=session, runs=runs, report=None))


@router.get("/evals/{run_id}")
def eval_page(run_id: str, session: Signed) -> HTMLResponse:
    with as_page():
        found = report.build_report(run_id, session.principal.tenant_id)
    return HTMLResponse(render("evals.html", session=session, runs=None, report=found))
