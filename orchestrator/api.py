"""The coordinator's HTTP API: a thin edge that parses, calls the core and formats.

Every route but the health check needs the bearer token.
"""

from __future__ import annotations

import hmac
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel
from starlette.background import BackgroundTask

from orchestrator import costs, graph, lifecycle, projects, scheduler, workspace
from orchestrator.costs import CostReport
from orchestrator.dispatch import Dispatcher
from orchestrator.follow import follow
from orchestrator.graph import ProjectGraph
from shared.errors import InvalidInput, RaasError, Unauthorized
from shared.events import EventBus
from shared.schemas import EventOut, ProjectDetail, ProjectOut, WorkspaceReport
from shared.settings import Settings


@dataclass(frozen=True)
class Context:
    """What the routes need, built once when the app is created."""

    settings: Settings
    dispatcher: Dispatcher
    bus: EventBus

    @property
    def workspaces_dir(self) -> Path:
        return self.settings.workspaces_dir()


def _context(request: Request) -> Context:
    ctx: Context = request.app.state.ctx
    return ctx


def _require_token(request: Request, authorization: Annotated[str | None, Header()] = None) -> None:
    expected = _context(request).settings.api_token.get_secret_value().encode()
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), expected):
        msg = "missing or wrong API token; set RAAS_API_TOKEN to the coordinator's token"
        raise Unauthorized(msg)


Ctx = Annotated[Context, Depends(_context)]
router = APIRouter(prefix="/v1", dependencies=[Depends(_require_token)])


async def _save_body(request: Request, limit_bytes: int) -> Path:
    """Stream the request body to a temporary file, refusing more than ``limit_bytes``."""
    handle = tempfile.NamedTemporaryFile(prefix="raas-body-", delete=False)  # noqa: SIM115
    size = 0
    with handle:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit_bytes:
                Path(handle.name).unlink(missing_ok=True)
                msg = f"upload larger than {limit_bytes // (1024 * 1024)} MiB; trim the project directory"
                raise InvalidInput(msg)
            handle.write(chunk)
    return Path(handle.name)


@router.post("/projects", status_code=201)
async def create_project(request: Request, ctx: Ctx, name: str | None = None) -> ProjectOut:
    body = await _save_body(request, workspace.MAX_UPLOAD_BYTES)
    try:
        return projects.create_project(ctx.workspaces_dir, body, name, ctx.bus)
    finally:
        body.unlink(missing_ok=True)


@router.get("/projects")
def list_projects() -> list[ProjectOut]:
    return projects.list_projects()


@router.post("/projects/{project_id}/start")
def start_project(project_id: str, ctx: Ctx) -> ProjectOut:
    return projects.start_project(project_id, ctx.dispatcher, ctx.bus)


@router.post("/projects/{project_id}/pause")
def pause_project(project_id: str, ctx: Ctx) -> ProjectOut:
    return lifecycle.pause_project(project_id, ctx.dispatcher, ctx.bus)


@router.post("/projects/{project_id}/resume")
def resume_project(project_id: str, ctx: Ctx) -> ProjectOut:
    return lifecycle.resume_project(project_id, ctx.dispatcher, ctx.bus)


@router.post("/projects/{project_id}/stop")
def stop_project(project_id: str, ctx: Ctx) -> ProjectOut:
    return lifecycle.stop_project(project_id, ctx.dispatcher, ctx.bus)


@router.put("/projects/{project_id}/prompt")
async def set_prompt(request: Request, project_id: str, ctx: Ctx) -> ProjectOut:
    body = await request.body()
    try:
        prompt = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = "the new PROMPT.md is not UTF-8 text"
        raise InvalidInput(msg) from exc
    return lifecycle.set_prompt(project_id, prompt, ctx.dispatcher, ctx.bus)


class BudgetIn(BaseModel):
    limit_usd: Decimal


@router.put("/projects/{project_id}/budget")
def set_budget(project_id: str, body: BudgetIn, ctx: Ctx) -> ProjectOut:
    return lifecycle.set_budget(project_id, body.limit_usd, ctx.dispatcher, ctx.bus)


@router.get("/projects/{project_id}/cost")
def project_cost(project_id: str, iterations: bool = False) -> CostReport:
    return costs.cost_report(project_id, with_receipts=iterations)


@router.get("/projects/{project_id}/graph")
def project_graph(project_id: str) -> ProjectGraph:
    return graph.project_graph(project_id)


@router.get("/projects/{project_id}/diff", response_class=PlainTextResponse)
def project_diff(project_id: str, ctx: Ctx, iteration: int | None = None) -> str:
    return projects.project_diff(ctx.workspaces_dir, project_id, iteration)


@router.get("/projects/{project_id}")
def project_status(project_id: str) -> ProjectDetail:
    return projects.project_detail(project_id)


@router.get("/projects/{project_id}/events")
def project_events(
    project_id: str, ctx: Ctx, after: int = 0, live: Annotated[bool, Query(alias="follow")] = False
) -> StreamingResponse:
    """Events after ``after`` as NDJSON; with ``follow=true`` the stream stays open until the end."""
    projects.get_project(project_id)  # a 404 before the stream starts

    def lines() -> Iterator[str]:
        source: Iterable[EventOut]
        if live:
            source = follow(ctx.settings.redis_url, project_id, after)
        else:
            source = projects.event_history(project_id, after)
        for event in source:
            yield event.model_dump_json() + "\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson")


@router.get("/projects/{project_id}/workspace.bundle")
def download_workspace(project_id: str, ctx: Ctx) -> FileResponse:
    projects.get_project(project_id)
    tmp = Path(tempfile.mkdtemp(prefix="raas-bundle-")) / "workspace.bundle"
    workspace.write_bundle(ctx.workspaces_dir, project_id, tmp)
    return FileResponse(
        tmp,
        media_type="application/x-git-bundle",
        background=BackgroundTask(shutil.rmtree, tmp.parent, ignore_errors=True),
    )


@router.post("/projects/{project_id}/iterations/{iteration_id}/workspace")
async def upload_iteration_workspace(
    request: Request, ctx: Ctx, project_id: str, iteration_id: str, base: str, attempt: int
) -> WorkspaceReport:
    body = await _save_body(request, workspace.MAX_UPLOAD_BYTES)
    try:
        sha, files = scheduler.accept_workspace(
            ctx.workspaces_dir, project_id, iteration_id, attempt, base, body
        )
    finally:
        body.unlink(missing_ok=True)
    return WorkspaceReport(sha=sha, files_changed=files)


async def _raas_error(_request: Request, exc: Exception) -> JSONResponse:
    status = exc.status_code if isinstance(exc, RaasError) else 500
    return JSONResponse(status_code=status, content={"error": type(exc).__name__, "detail": str(exc)})


async def _invalid_request(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    return JSONResponse(
        status_code=422, content={"error": "InvalidInput", "detail": f"{where}: {first['msg']}"}
    )


def create_app(settings: Settings, dispatcher: Dispatcher, bus: EventBus) -> FastAPI:
    app = FastAPI(title="Constellation coordinator", version="0.1.0")
    app.state.ctx = Context(settings=settings, dispatcher=dispatcher, bus=bus)
    app.add_exception_handler(RaasError, _raas_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)

    @app.get("/healthz")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    app.include_router(router)
    return app
