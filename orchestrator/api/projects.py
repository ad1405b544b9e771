"""The project routes: create, start, read, steer, and the workspace round trip of workers."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

from fastapi import Query, Request, Response
from fastapi.responses import FileResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel, Field
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from orchestrator.api.deps import Caller, Ctx, authed_router, save_body
from orchestrator.api.tenants import check_submission_rate
from orchestrator.delivery import redeliver
from orchestrator.queries import costs, graph, projects
from orchestrator.queries.costs import CostReport
from orchestrator.queries.follow import follow
from orchestrator.queries.graph import ProjectGraph
from orchestrator.scheduling import advance, lifecycle, submission, workspace
from shared.errors import InvalidInput
from shared.schemas import EventOut, ProjectDetail, ProjectOut, WorkspaceReport

router = authed_router()
# The database's integer columns (event seq, iteration number, attempt) hold 32-bit values:
# a larger one in a query is a database error, so the edge refuses it first.
INT32_MAX = 2**31 - 1
# Money is Numeric(14, 6): at most 8 digits before the point.
MAX_USD = Decimal("99999999")


def _raw_body(media_type: str, description: str) -> dict[str, Any]:
    """The schema of a body a route reads itself (streamed, not parsed by FastAPI)."""
    content = {media_type: {"schema": {"type": "string", "format": "binary"}}}
    return {"requestBody": {"required": True, "description": description, "content": content}}


def _raw_answer(media_type: str, description: str) -> dict[int | str, dict[str, Any]]:
    return {200: {"description": description, "content": {media_type: {}}}}


def _refuse_nul(what: str, text: str) -> None:
    # The database's text columns cannot hold NUL: say so rather than fail inside it.
    if "\x00" in text:
        msg = f"{what} contains a NUL byte; it must be plain text"
        raise InvalidInput(msg)


@router.post(
    "/projects",
    status_code=201,
    openapi_extra=_raw_body("application/gzip", "The project directory as a .tar.gz (PROMPT.md at its top)"),
)
async def create_project(
    request: Request,
    ctx: Ctx,
    caller: Caller,
    name: Annotated[str | None, Query(max_length=200)] = None,
    repo: Annotated[
        str | None,
        Query(max_length=2000, description="Start from this repository (the upload: PROMPT.md, raas.toml)"),
    ] = None,
    ref: Annotated[str | None, Query(max_length=255, description="The repository's branch")] = None,
) -> ProjectOut:
    for what, text in (("name", name), ("repo", repo), ("ref", ref)):
        _refuse_nul(what, text or "")
    check_submission_rate(caller)
    body = await save_body(request, workspace.MAX_UPLOAD_BYTES)
    try:
        # In a thread: cloning a repository takes as long as the network does, and the event
        # loop serves the workers' heartbeats and reports meanwhile.
        return await run_in_threadpool(
            submission.create_project,
            ctx.workspaces,
            body,
            name,
            ctx.bus,
            tenant_id=caller.tenant_id,
            network_allowed=ctx.settings.sandbox_network_allowed,
            repo=repo,
            ref=ref,
            settings=ctx.settings,
        )
    finally:
        body.unlink(missing_ok=True)


@router.get("/projects")
def list_projects(caller: Caller) -> list[ProjectOut]:
    return projects.list_projects(tenant_id=caller.tenant_id)


@router.post("/projects/{project_id}/start")
def start_project(project_id: str, ctx: Ctx) -> ProjectOut:
    return submission.start_project(project_id, ctx.dispatcher, ctx.bus)


@router.post("/projects/{project_id}/pause")
def pause_project(project_id: str, ctx: Ctx) -> ProjectOut:
    return lifecycle.pause_project(project_id, ctx.dispatcher, ctx.bus)


@router.post("/projects/{project_id}/resume")
def resume_project(project_id: str, ctx: Ctx) -> ProjectOut:
    return lifecycle.resume_project(project_id, ctx.dispatcher, ctx.bus)


@router.post("/projects/{project_id}/stop")
def stop_project(project_id: str, ctx: Ctx) -> ProjectOut:
    return lifecycle.stop_project(project_id, ctx.dispatcher, ctx.bus)


class RedeliveryOut(BaseModel):
    """The branches whose failed delivery was sent again."""

    branches: list[str]


@router.post("/projects/{project_id}/deliver")
def deliver_project(project_id: str, ctx: Ctx) -> RedeliveryOut:
    """Try the project's failed deliveries again (``raas deliver ID``), from the step that failed."""
    return RedeliveryOut(branches=redeliver(project_id, ctx.dispatcher, ctx.bus))


@router.put("/projects/{project_id}/prompt", openapi_extra=_raw_body("text/markdown", "The new PROMPT.md"))
async def set_prompt(request: Request, project_id: str, ctx: Ctx) -> ProjectOut:
    body = await request.body()
    try:
        prompt = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = "the new PROMPT.md is not UTF-8 text"
        raise InvalidInput(msg) from exc
    return lifecycle.set_prompt(project_id, prompt, ctx.dispatcher, ctx.bus)


class BudgetIn(BaseModel):
    limit_usd: Decimal = Field(le=MAX_USD)


@router.put("/projects/{project_id}/budget")
def set_budget(project_id: str, body: BudgetIn, ctx: Ctx) -> ProjectOut:
    return lifecycle.set_budget(project_id, body.limit_usd, ctx.dispatcher, ctx.bus)


@router.get("/projects/{project_id}/cost")
def project_cost(project_id: str, iterations: bool = False) -> CostReport:
    return costs.cost_report(project_id, with_receipts=iterations)


@router.get("/projects/{project_id}/graph")
def project_graph(project_id: str) -> ProjectGraph:
    return graph.project_graph(project_id)


# response_class=Response: errors stay documented as JSON (a PlainTextResponse class would claim text).
@router.get(
    "/projects/{project_id}/diff",
    response_class=Response,
    responses=_raw_answer("text/plain", "The diff, as `git diff` prints it"),
)
def project_diff(
    project_id: str, ctx: Ctx, iteration: Annotated[int | None, Query(ge=0, le=INT32_MAX)] = None
) -> PlainTextResponse:
    return PlainTextResponse(projects.project_diff(ctx.workspaces, project_id, iteration))


@router.get("/projects/{project_id}")
def project_status(project_id: str) -> ProjectDetail:
    return projects.project_detail(project_id)


@router.get(
    "/projects/{project_id}/events",
    response_class=StreamingResponse,
    responses=_raw_answer("application/x-ndjson", "One event (EventOut) per line"),
)
def project_events(
    project_id: str,
    ctx: Ctx,
    after: Annotated[int, Query(ge=0, le=INT32_MAX)] = 0,
    live: Annotated[bool, Query(alias="follow")] = False,
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


@router.get(
    "/projects/{project_id}/workspace.bundle",
    response_class=FileResponse,
    responses=_raw_answer("application/x-git-bundle", "A git bundle of the workspace's main branch"),
)
def download_workspace(project_id: str, ctx: Ctx) -> FileResponse:
    projects.get_project(project_id)
    tmp = Path(tempfile.mkdtemp(prefix="raas-bundle-")) / "workspace.bundle"
    workspace.write_bundle(ctx.workspaces.read(project_id), tmp)
    return FileResponse(
        tmp,
        media_type="application/x-git-bundle",
        background=BackgroundTask(shutil.rmtree, tmp.parent, ignore_errors=True),
    )


@router.post(
    "/projects/{project_id}/iterations/{iteration_id}/workspace",
    openapi_extra=_raw_body("application/x-git-bundle", "The iteration's commits since `base`, as a bundle"),
)
async def upload_iteration_workspace(
    request: Request,
    ctx: Ctx,
    project_id: str,
    iteration_id: str,
    base: str,
    attempt: Annotated[int, Query(ge=0, le=INT32_MAX)],
) -> WorkspaceReport:
    body = await save_body(request, workspace.MAX_UPLOAD_BYTES)
    try:
        sha, files = advance.accept_workspace(
            ctx.workspaces,
            project_id,
            iteration_id,
            attempt,
            base,
            body,
            dispatcher=ctx.dispatcher,
            bus=ctx.bus,
        )
    finally:
        body.unlink(missing_ok=True)
    return WorkspaceReport(sha=sha, files_changed=files)
