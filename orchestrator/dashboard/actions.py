"""What a signed-in user may do from the dashboard, in one shape (:func:`run_action`): the
Origin and the session's CSRF token checked, the verb looked up, the core function called, and
its answer (or its refusal's one line, with its status) as a fragment shown beside the control.

A project's actions are here: pause, resume, stop, raise the budget, replace PROMPT.md, say
something to its agent. Each calls the same core function as the API and the CLI
(``orchestrator.scheduling.lifecycle``, ``talk``), so the rules and the one-line refusals are
the same. The triggers' and notifications' pages pause and resume through :func:`run_action` too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse

from orchestrator.dashboard.render import render
from orchestrator.dashboard.sessions import CSRF_FIELD, CSRF_HEADER, Session, check_csrf, check_origin
from orchestrator.dashboard.views import Ctx, ProjectSigned
from orchestrator.scheduling import lifecycle, talk
from shared.errors import InvalidInput, RaasError
from shared.said import SAID_CHARS
from shared.schemas import ProjectOut

router = APIRouter(prefix="/ui/projects/{project_id}/actions", include_in_schema=False)
Csrf = Annotated[str | None, Form(alias=CSRF_FIELD)]


def run_action(
    request: Request,
    session: Session,
    csrf: str | None,
    verb: str,
    verbs: Mapping[str, Callable[[], str]],
    changed: str | None = None,
) -> HTMLResponse:
    """Do ``verbs[verb]`` (which answers the line to show) for a checked request.

    A verb not in ``verbs`` is refused in one line naming those there are; a ``RaasError`` is
    shown with its status. On success, ``changed`` (an htmx event) is sent in ``HX-Trigger``,
    so a list showing what changed reloads itself.
    """
    check_origin(request)
    check_csrf(session, csrf or request.headers.get(CSRF_HEADER))
    try:
        if verb not in verbs:
            msg = f"no action {verb!r}; use {' or '.join(verbs)}"
            raise InvalidInput(msg)
        message = verbs[verb]()
    except RaasError as exc:
        body = render("_message.html", ok=False, message=str(exc))
        return HTMLResponse(body, status_code=exc.status_code)
    headers = {"HX-Trigger": changed} if changed else None
    return HTMLResponse(render("_message.html", ok=True, message=message), headers=headers)


def _usd(text: str) -> Decimal:
    try:
        return Decimal(text.strip().lstrip("$"))
    except InvalidOperation:
        msg = f"budget limit {text!r} is not a number of USD; try 10"
        raise InvalidInput(msg) from None


@router.post("/budget", name="set_budget")
def budget_action(
    request: Request,
    project_id: str,
    ctx: Ctx,
    session: ProjectSigned,
    limit_usd: Annotated[str, Form(max_length=40)],
    csrf: Csrf = None,
) -> HTMLResponse:
    def set_budget() -> str:
        amount = _usd(limit_usd)
        return _said(
            f"budget set to ${amount}", lifecycle.set_budget(project_id, amount, ctx.dispatcher, ctx.bus)
        )

    return run_action(request, session, csrf, "budget", {"budget": set_budget})


@router.post("/prompt", name="set_prompt")
def prompt_action(
    request: Request,
    project_id: str,
    ctx: Ctx,
    session: ProjectSigned,
    prompt: Annotated[str, Form(max_length=1_000_000)],
    csrf: Csrf = None,
) -> HTMLResponse:
    def set_prompt() -> str:  # refuses what check_prompt refuses (NUL, empty, too large), as the API
        return _said("PROMPT.md replaced", lifecycle.set_prompt(project_id, prompt, ctx.dispatcher, ctx.bus))

    return run_action(request, session, csrf, "prompt", {"prompt": set_prompt})


@router.post("/say", name="say")
def say_action(
    request: Request,
    project_id: str,
    ctx: Ctx,
    session: ProjectSigned,
    text: Annotated[str, Form(max_length=SAID_CHARS)],
    now: Annotated[str | None, Form()] = None,
    csrf: Csrf = None,
) -> HTMLResponse:
    def say() -> str:  # refuses what the API's raas say refuses (blank, an ended project)
        talk.say_to(
            project_id,
            text,
            author=session.who,
            agent_id=None,
            now=bool(now),
            dispatcher=ctx.dispatcher,
            bus=ctx.bus,
        )
        when = "after the tool call in flight" if now else "at its next turn"
        return f"said; the agent reads it {when}"

    return run_action(request, session, csrf, "say", {"say": say})


# After the named actions: a path parameter here would take theirs.
@router.post("/{verb}")
def lifecycle_action(
    request: Request, project_id: str, verb: str, ctx: Ctx, session: ProjectSigned, csrf: Csrf = None
) -> HTMLResponse:
    dispatcher, bus = ctx.dispatcher, ctx.bus
    verbs = {
        "pause": lambda: _said("paused", lifecycle.pause_project(project_id, dispatcher, bus)),
        "resume": lambda: _said("resumed", lifecycle.resume_project(project_id, dispatcher, bus)),
        "stop": lambda: _said("stopped", lifecycle.stop_project(project_id, dispatcher, bus)),
    }
    return run_action(request, session, csrf, verb, verbs)


def _said(what: str, done: ProjectOut) -> str:
    return f"{what}: the project is {done.status.value}"
