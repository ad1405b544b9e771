"""The trigger routes: a tenant's triggers (authenticated), and the receiver every delivery reaches
(``POST /v1/hooks/{trigger_id}``: public, its signature is its authentication).

The receiver reads at most ``MAX_BODY_BYTES``, checks the signature over the raw bytes before
parsing (``orchestrator.triggers.intake``), writes one row and answers 202; the run starts after
the commit (``orchestrator.triggers.launch``). A redelivery answers 200 with the run the first one
made.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from orchestrator.api.deps import Caller, Ctx, authed_router, save_body
from orchestrator.scheduling import workspace
from orchestrator.triggers import intake, store
from orchestrator.triggers.launch import CeleryLauncher, Launcher
from shared.celery_app import app as celery_app
from shared.models import TriggerStatus
from shared.schemas import ErrorOut, ProjectOut
from shared.triggers import HookAnswer, TriggerOut, TriggerRunOut, TriggerSpec

router = authed_router()
hooks = APIRouter(prefix="/v1")


@router.post("/triggers", status_code=201)
def add_trigger(spec: TriggerSpec, ctx: Ctx, caller: Caller) -> TriggerOut:
    return store.add_trigger(spec, caller.tenant_id, ctx.settings)


@router.get("/triggers")
def list_triggers(ctx: Ctx, caller: Caller) -> list[TriggerOut]:
    return store.list_triggers(caller.tenant_id, ctx.settings)


@router.get("/triggers/{ref}")
def show_trigger(ref: str, ctx: Ctx, caller: Caller) -> TriggerOut:
    return store.show_trigger(caller.tenant_id, ref, ctx.settings)


@router.put(
    "/triggers/{ref}/files",
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "The directory every run starts from, as a .tar.gz",
            "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def set_trigger_files(ref: str, request: Request, ctx: Ctx, caller: Caller) -> TriggerOut:
    body = await save_body(request, workspace.MAX_UPLOAD_BYTES)
    try:
        return await run_in_threadpool(store.set_files, caller.tenant_id, ref, body, ctx.settings)
    finally:
        body.unlink(missing_ok=True)


@router.post("/triggers/{ref}/pause")
def pause_trigger(ref: str, caller: Caller) -> TriggerOut:
    return store.set_status(caller.tenant_id, ref, TriggerStatus.PAUSED)


@router.post("/triggers/{ref}/resume")
def resume_trigger(ref: str, caller: Caller) -> TriggerOut:
    return store.set_status(caller.tenant_id, ref, TriggerStatus.ACTIVE)


@router.delete("/triggers/{ref}", status_code=204)
def remove_trigger(ref: str, ctx: Ctx, caller: Caller) -> Response:
    store.remove_trigger(caller.tenant_id, ref, ctx.settings)
    return Response(status_code=204)


@router.get("/triggers/{ref}/runs")
def trigger_runs(
    ref: str, caller: Caller, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[TriggerRunOut]:
    return store.trigger_runs(caller.tenant_id, ref, limit)


@router.get("/triggers/{ref}/projects")
def trigger_projects(
    ref: str, caller: Caller, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[ProjectOut]:
    return store.trigger_projects(caller.tenant_id, ref, limit)


@lru_cache(maxsize=1)
def _celery_launcher() -> CeleryLauncher:
    return CeleryLauncher(celery_app)


def launcher(request: Request) -> Launcher:
    """The app's launcher (tests and the embedded engine set one), else the coordinator queue."""
    found: Launcher | None = getattr(request.app.state, "trigger_launcher", None)
    return found if found is not None else _celery_launcher()


async def _read_body(request: Request) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > intake.MAX_BODY_BYTES:
        raise HTTPException(413, f"a delivery is at most {intake.MAX_BODY_BYTES} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > intake.MAX_BODY_BYTES:
            raise HTTPException(413, f"a delivery is at most {intake.MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _refusal(description: str) -> dict[str, Any]:
    return {"model": ErrorOut, "description": description}


# Every answer the receiver gives, so that the schema says it (tests/integration/test_api_fuzz.py).
HOOK_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": HookAnswer, "description": "A redelivery (the first one's run), or a delivery ignored"},
    401: _refusal("The signature or token does not hold, or the timestamp is too old; nothing written"),
    404: _refusal("No trigger of that id takes deliveries (unknown, or a schedule)"),
    413: _refusal(f"The body is over {intake.MAX_BODY_BYTES} bytes; nothing read or written"),
    422: _refusal("Signed, but not JSON (an object for a generic hook), or without its delivery id"),
}
# The body is read raw (the signature is over its bytes), so FastAPI cannot infer it.
HOOK_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"description": "The sender's delivery, as it signed it"}}
        },
    }
}


@hooks.post(
    "/hooks/{trigger_id}",
    status_code=202,
    responses=HOOK_RESPONSES,
    openapi_extra=HOOK_BODY,
    summary="Receive a delivery",
)
async def receive_delivery(trigger_id: str, request: Request, response: Response, ctx: Ctx) -> HookAnswer:
    body = await _read_body(request)
    headers = {k.lower(): v for k, v in request.headers.items()}
    received = await run_in_threadpool(intake.receive, trigger_id, headers, body, ctx.settings)
    if received.launch is not None:
        await run_in_threadpool(launcher(request).launch, received.launch)
    if received.answer.duplicate or received.answer.run is None:
        response.status_code = 200
    return received.answer
