"""What a signed-in user may do to a project from its page: pause, resume, stop, raise the
budget, replace PROMPT.md. Each calls the same core function as the API and the CLI
(``orchestrator.scheduling.lifecycle``), so the rules and the one-line refusals are the same;
the answer is a fragment shown beside the control. Every action needs the session's CSRF token.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse

from orchestrator.dashboard.render import render
from orchestrator.dashboard.sessions import CSRF_FIELD, CSRF_HEADER, Session, check_csrf, check_origin
from orchestrator.dashboard.views import Ctx, ProjectSigned
from orchestrator.scheduling import lifecycle
from shared.errors import InvalidInput, RaasError
from shared.schemas import ProjectOut

router = APIRouter(prefix="/ui/projects/{project_id}/actions", include_in_schema=False)
Csrf = Annotated[str | None, Form(alias=CSRF_FIELD)]


def _guard(request: Request, session: Session, csrf: str | None) -> None:
    check_origin(request)
    check_csrf(session, csrf or request.headers.get(CSRF_HEADER))


def _answer(done: ProjectOut | RaasError, what: str) -> HTMLResponse:
    if isinstance(done, RaasError):
        return HTMLResponse(
            render("_message.html", ok=False, message=str(done)), status_code=done.status_code
        )
    return HTMLResponse(
        render("_message.html", ok=True, message=f"{what}: the project is {done.status.value}")
    )


@router.post("/budget", name="set_budget")
def budget_action(
    request: Request,
    project_id: str,
    ctx: Ctx,
    session: ProjectSigned,
    limit_usd: Annotated[str, Form(max_length=40)],
    csrf: Csrf = None,
) -> HTMLResponse:
    _guard(request, session, csrf)
    try:
        amount = Decimal(limit_usd.strip().lstrip("$"))
    except InvalidOperation:
        return _answer(InvalidInput(f"budget limit {limit_usd!r} is not a number of USD; try 10"), "budget")
    try:
        done: ProjectOut | RaasError = lifecycle.set_budget(project_id, amount, ctx.dispatcher, ctx.bus)
    except RaasError as exc:
        done = exc
    return _answer(done, f"budget set to ${amount}")


@router.post("/prompt", name="set_prompt")
def prompt_action(
    request: Request,
    project_id: str,
    ctx: Ctx,
    session: ProjectSigned,
    prompt: Annotated[str, Form(max_length=1_000_000)],
    csrf: Csrf = None,
) -> HTMLResponse:
    _guard(request, session, csrf)
    try:  # set_prompt refuses what check_prompt refuses (NUL, empty, too large), as for the API
        done: ProjectOut | RaasError = lifecycle.set_prompt(project_id, prompt, ctx.dispatcher, ctx.bus)
    except RaasError as exc:
        done = exc
    return _answer(done, "PROMPT.md replaced")


# After the named actions: a path parameter here would take theirs.
@router.post("/{verb}")
def lifecycle_action(
    request: Request, project_id: str, verb: str, ctx: Ctx, session: ProjectSigned, csrf: Csrf = None
) -> HTMLResponse:
    _guard(request, session, csrf)
    actions = {
        "pause": lifecycle.pause_project,
        "resume": lifecycle.resume_project,
        "stop": lifecycle.stop_project,
    }
    if verb not in actions:
        return _answer(InvalidInput(f"no action {verb!r}; use pause, resume or stop"), verb)
    try:
        done: ProjectOut | RaasError = actions[verb](project_id, ctx.dispatcher, ctx.bus)
    except RaasError as exc:
        done = exc
    return _answer(done, {"pause": "paused", "resume": "resumed", "stop": "stopped"}[verb])
