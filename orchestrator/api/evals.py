"""The eval routes (issue #27): a tenant's eval runs, their reports and comparisons.

``POST /v1/evals`` takes a .tar.gz of ``suite/`` and ``eval.json`` (see orchestrator.evals.store),
checks all of it and writes the run and its attempts; the coordinator's eval driver starts them.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Request
from starlette.concurrency import run_in_threadpool

from orchestrator.api.deps import Caller, Ctx, authed_router, save_body
from orchestrator.evals import checks, report, store
from orchestrator.evals.driver import CeleryVerifier
from orchestrator.scheduling import workspace
from shared.celery_app import app as celery_app

router = authed_router()


@router.post(
    "/evals",
    status_code=201,
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "suite/ and eval.json, as a .tar.gz",
            "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def create_eval(request: Request, ctx: Ctx, caller: Caller) -> dict[str, Any]:
    body = await save_body(request, workspace.MAX_UPLOAD_BYTES)
    try:
        run = await run_in_threadpool(store.create_run, body, caller.tenant_id, ctx.settings)
    finally:
        body.unlink(missing_ok=True)
    return {"id": run.id, "suite": run.suite_name, "suite_digest": run.suite_digest, "k": run.k}


@router.post(
    "/evals/checks",
    status_code=201,
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "suite/, as a .tar.gz",
            "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def create_check(request: Request, caller: Caller) -> dict[str, str]:
    """Check every task of the suite on the workers (raas eval check --remote)."""
    body = await save_body(request, workspace.MAX_UPLOAD_BYTES)
    try:
        check_id = await run_in_threadpool(
            checks.create_check, body, caller.tenant_id, CeleryVerifier(celery_app)
        )
    finally:
        body.unlink(missing_ok=True)
    return {"id": check_id}


@router.get("/evals/checks/{check_id}")
def show_check(check_id: str, caller: Caller) -> list[dict[str, Any]]:
    return checks.check_results(check_id, caller.tenant_id)


@router.get("/evals")
def list_evals(caller: Caller) -> list[dict[str, Any]]:
    return store.list_runs(caller.tenant_id)


# No NUL (the database's text cannot hold one): refused as the caller's input, not a 500.
PLAIN = r"^[^\x00]*$"


@router.get("/evals/compare")
def compare_evals(
    a: Annotated[str, Query(description="RUN or RUN:CONFIG", max_length=200, pattern=PLAIN)],
    b: Annotated[str, Query(description="RUN or RUN:CONFIG", max_length=200, pattern=PLAIN)],
    caller: Caller,
) -> dict[str, Any]:
    return report.compare(a, b, caller.tenant_id)


@router.get("/evals/{run_id}")
def show_eval(run_id: str, caller: Caller) -> dict[str, Any]:
    return report.build_report(run_id, caller.tenant_id)


@router.get("/evals/{run_id}/attempts")
def eval_attempts(run_id: str, caller: Caller) -> list[dict[str, Any]]:
    return report.attempts(run_id, caller.tenant_id)
