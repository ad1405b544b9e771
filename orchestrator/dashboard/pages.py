"""The dashboard's pages and the fragments htmx swaps into them: sign-in, the projects list, a
project (graph, inspector, costs), the workers. Every answer comes from the same queries as the
API's (``orchestrator.queries``, ``orchestrator.transcripts``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from orchestrator.dashboard import state, timeline
from orchestrator.dashboard.render import render
from orchestrator.dashboard.sessions import COOKIE, CSRF_FIELD, SESSION_S, check_csrf, check_origin, sign_in
from orchestrator.dashboard.views import Ctx, ProjectSigned, Signed, as_page
from orchestrator.queries import agents, cost_series, costs, graph, listing, projects
from orchestrator.transcripts.store import load_transcript
from shared.errors import QueryRefused, RaasError, Unauthorized
from shared.models import ProjectStatus

router = APIRouter(include_in_schema=False)
TABS = ("overview", "history", "outputs", "config")
RECEIPTS_SHOWN = 100  # the latest iterations' receipts on the page; the CLI lists every one


def _page(template: str, **context: Any) -> HTMLResponse:
    return HTMLResponse(render(template, **context))


def _safe_next(target: str | None) -> str:
    """Only a path of this site: never another origin (``//host``) or a scheme."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


@router.get("/login")
def login_page(next_: Annotated[str | None, Query(alias="next")] = None) -> HTMLResponse:
    return _page("login.html", session=None, next=_safe_next(next_), error=None)


@router.post("/login")
def login(
    request: Request,
    ctx: Ctx,
    token: Annotated[str, Form(max_length=500)],
    next_: Annotated[str, Form(alias="next")] = "/",
) -> Response:
    check_origin(request)
    try:
        cookie = sign_in(token, ctx.settings.api_token.get_secret_value())
    except Unauthorized as exc:
        body = render("login.html", session=None, next=_safe_next(next_), error=str(exc))
        return HTMLResponse(body, status_code=401)
    answer = RedirectResponse(_safe_next(next_), status_code=303)
    answer.set_cookie(
        COOKIE,
        cookie,
        max_age=SESSION_S,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return answer


@router.post("/logout")
def logout(
    request: Request, session: Signed, csrf: Annotated[str | None, Form(alias=CSRF_FIELD)] = None
) -> Response:
    check_origin(request)
    check_csrf(session, csrf or request.headers.get("x-csrf-token"))
    answer = RedirectResponse("/login", status_code=303)
    answer.delete_cookie(COOKIE, path="/")
    return answer


def _status(value: str | None) -> ProjectStatus | None:
    try:
        return ProjectStatus(value) if value else None
    except ValueError:
        return None


@router.get("/")
def projects_page(
    session: Signed, status: str | None = None, after: Annotated[str | None, Query(max_length=100)] = None
) -> HTMLResponse:
    page = listing.project_page(tenant_id=session.principal.tenant_id, status=_status(status), after=after)
    return _page(
        "projects.html",
        session=session,
        page=page,
        status=_status(status),
        after=after,
        statuses=list(ProjectStatus),
    )


@router.get("/ui/projects/rows")
def project_rows(
    session: Signed, status: str | None = None, after: Annotated[str | None, Query(max_length=100)] = None
) -> HTMLResponse:
    page = listing.project_page(tenant_id=session.principal.tenant_id, status=_status(status), after=after)
    return _page("_project_rows.html", page=page, status=_status(status))


@router.get("/workers")
def workers_page(request: Request, session: Signed) -> HTMLResponse:
    options = request.app.state.dashboard
    found, error = [], None
    if not session.principal.is_cluster:
        # As GET /v1/workers: the whole cluster, every tenant's projects included.
        error = "the workers page shows the whole cluster and needs the operators' token (RAAS_API_TOKEN)"
    elif options.workers is not None:
        try:
            found = options.workers()
        except RaasError as exc:
            error = str(exc)
    return _page(
        "workers.html",
        session=session,
        workers=found,
        error=error,
        embedded=options.workers is None,
        flower_url=options.flower_url
        if (options.flower_url or "").startswith(("http://", "https://"))
        else None,
    )


@router.get("/projects/{project_id}")
def project_page(project_id: str, session: ProjectSigned) -> HTMLResponse:
    with as_page():
        detail = projects.project_detail(project_id)
        meter = cost_series.budget_meter(project_id)
        prompt = state.current_prompt(project_id)
    return _page(
        "project.html",
        session=session,
        project=detail,
        meter=meter,
        prompt=prompt,
        event_types=timeline.event_types(),
    )


@router.get("/ui/projects/{project_id}/header")
def project_header(project_id: str, session: ProjectSigned) -> HTMLResponse:
    with as_page():
        detail = projects.project_detail(project_id)
        meter = cost_series.budget_meter(project_id)
    return _page("_project_header.html", project=detail, meter=meter)


@router.get("/ui/projects/{project_id}/state.json")
def project_state(project_id: str, session: ProjectSigned) -> JSONResponse:
    """The page's one store starts from this (and reads it again when the stream says so)."""
    with as_page():
        return JSONResponse(state.project_state(project_id))


def _refused(exc: RaasError) -> JSONResponse:
    return JSONResponse({"error": type(exc).__name__, "detail": str(exc)}, status_code=exc.status_code)


@router.get("/ui/projects/{project_id}/timeline.json")
def project_timeline(
    project_id: str,
    session: ProjectSigned,
    before: Annotated[str | None, Query(max_length=20)] = None,
    limit: Annotated[str | None, Query(max_length=20)] = None,
    agent: Annotated[str | None, Query(max_length=64)] = None,
    task: Annotated[str | None, Query(max_length=200)] = None,
    type: Annotated[str | None, Query(max_length=64)] = None,
    errors: Annotated[str | None, Query(max_length=8)] = None,
    q: Annotated[str | None, Query(max_length=1000)] = None,
) -> JSONResponse:
    """Rows newest first; ``before`` (a seq) pages to older ones. Every filter is optional."""
    try:
        numbers = {name: _number(name, value) for name, value in (("before", before), ("limit", limit))}
        if errors not in (None, "", "0", "1", "true", "false"):
            msg = f"errors={errors!r} is not a yes or no; use errors=1 or leave it out"
            raise QueryRefused(msg)
        filters = timeline.Filters(
            agent=agent or None,
            task=task or None,
            type=type or None,
            errors=errors in ("1", "true"),
            q=q or None,
        )
        with as_page():
            page = timeline.timeline_page(
                project_id, filters, numbers["before"], numbers["limit"] or timeline.PAGE_SIZE
            )
    except QueryRefused as exc:
        return _refused(exc)
    return JSONResponse(page)


def _number(name: str, value: str | None) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        msg = f"{name}={value!r} is not a whole number; e.g. {name}=50"
        raise QueryRefused(msg) from None


@router.get("/ui/projects/{project_id}/graph.json")
def project_graph(project_id: str, session: ProjectSigned) -> JSONResponse:
    with as_page():
        plan = graph.project_graph(project_id).model_dump(mode="json")
        plan["task_stats"] = agents.task_attempts(project_id)
    return JSONResponse(plan)


@router.get("/ui/projects/{project_id}/costs")
def project_costs(project_id: str, session: ProjectSigned) -> HTMLResponse:
    with as_page():
        report = costs.cost_report(project_id, with_receipts=True)
        meter = cost_series.budget_meter(project_id)
        shown = (report.receipts or [])[-RECEIPTS_SHOWN:]
        outcomes = state.iteration_outcomes(project_id, [r.iteration_id for r in shown])
    return _page("_costs.html", report=report, meter=meter, outcomes=outcomes, receipts_shown=RECEIPTS_SHOWN)


@router.get("/ui/projects/{project_id}/cost-series.json")
def project_cost_series(project_id: str, session: ProjectSigned) -> JSONResponse:
    with as_page():
        return JSONResponse(cost_series.cost_series(project_id).model_dump(mode="json"))


@router.get("/ui/projects/{project_id}/agents/{agent_id}")
def inspector(
    project_id: str, agent_id: str, ctx: Ctx, session: ProjectSigned, tab: str = "overview"
) -> HTMLResponse:
    tab = tab if tab in TABS else "overview"
    with as_page():
        overview = agents.agent_overview(project_id, agent_id)
        shown: dict[str, Any] = {}
        if tab == "history":
            shown["transcript"] = load_transcript(project_id, agent_id)
        elif tab == "outputs":
            shown["outputs"] = agents.agent_outputs(ctx.workspaces, project_id, agent_id)
        elif tab == "config":
            shown["config"] = agents.agent_config(project_id, agent_id)
        output = timeline.recent_output(project_id, agent_id) if tab == "overview" else []
    return _page("_inspector.html", agent=overview, tab=tab, tabs=TABS, output=output, **shown)
