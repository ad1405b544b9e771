"""Approvals in the browser (issue #25 point 2): the inbox of what waits for me, and the signed
links of a notification.

- ``GET /approvals``: the signed-in tenant's waiting approvals (the cluster's session: every
  tenant's) with project, what, deadline and default, each with Approve / Reject and a comment.
  The actions are POSTs carrying the session's CSRF token, as every dashboard action; they call
  ``decisions.decide`` as ``raas approve`` does, for that approval (not the project's oldest).
- ``GET /approvals/link/TOKEN``: a notification's link, with no session. It shows what the link
  decides and a button (a GET never decides: mail scanners and chat unfurlers fetch links);
  the POST decides it. A forged, altered or expired token, or an approval decided already (a
  link works once), answers a page saying so, and changes nothing.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse

from orchestrator.api.deps import context
from orchestrator.api.tenants import authorize
from orchestrator.dashboard.render import render
from orchestrator.dashboard.sessions import CSRF_FIELD, CSRF_HEADER, check_csrf, check_origin
from orchestrator.dashboard.views import Ctx, Signed
from orchestrator.scheduling import approval_links, approvals, decisions
from shared.db import session_scope
from shared.errors import RaasError
from shared.models import Approval, ApprovalStatus, Project, utcnow
from shared.said import SAID_CHARS

router = APIRouter(include_in_schema=False)
Csrf = Annotated[str | None, Form(alias=CSRF_FIELD)]
Comment = Annotated[str, Form(max_length=SAID_CHARS)]
VERBS = {"approve": True, "reject": False}


@router.get("/approvals")
def inbox_page(session: Signed) -> HTMLResponse:
    with session_scope() as db:
        waiting = approvals.inbox(db, session.principal.tenant_id)
    return HTMLResponse(render("approvals.html", session=session, approvals=waiting, now=utcnow()))


@router.post("/ui/approvals/{approval_id}/{verb}")
def inbox_action(
    request: Request,
    approval_id: str,
    verb: str,
    ctx: Ctx,
    session: Signed,
    csrf: Csrf = None,
    comment: Comment = "",
) -> HTMLResponse:
    check_origin(request)
    check_csrf(session, csrf or request.headers.get(CSRF_HEADER))
    if verb not in VERBS:
        return _message(False, f"no action {verb!r}; use approve or reject", 422)
    try:
        with session_scope() as db:
            project_id = approvals.project_of(db, approval_id)
        authorize(session.principal, project_id)  # another tenant's: not found, as the API says
        decided = decisions.decide(
            project_id,
            approve=VERBS[verb],
            comment=comment.strip() or None,
            by=session.who,
            dispatcher=ctx.dispatcher,
            bus=ctx.bus,
            approval_id=approval_id,
        )
    except RaasError as exc:
        return _message(False, str(exc), exc.status_code)
    answer = _message(True, f"{decided.key} of project {project_id} {decided.status.value}", 200)
    answer.headers["HX-Trigger"] = "approvals-changed"
    return answer


def _message(ok: bool, message: str, status_code: int) -> HTMLResponse:
    return HTMLResponse(render("_message.html", ok=ok, message=message), status_code=status_code)


def _link(status_code: int = 200, **page: Any) -> HTMLResponse:
    """The link's page: what it decides (``token``, ``action``, ``approval``, ``project``), what it
    did (``done``), or why it is refused (``refused``)."""
    values = {"token": None, "action": None, "approval": None, "project": None, "done": None, "refused": None}
    body = render("approval_link.html", session=None, **{**values, **page})
    return HTMLResponse(body, status_code=status_code, headers={"Cache-Control": "no-store"})


@router.get("/approvals/link/{token}")
def link_page(request: Request, token: str) -> HTMLResponse:
    """What the link decides, and the button that decides it (no session needed)."""
    signer = approval_links.LinkSigner.of(context(request).settings)
    try:
        approval_id, action = signer.read(token, utcnow())
    except RaasError as exc:
        return _link(exc.status_code, refused=str(exc))
    with session_scope() as db:
        approval = db.get(Approval, approval_id)
        project = db.get(Project, approval.project_id) if approval is not None else None
        if approval is None or project is None:
            return _link(404, refused=f"no approval {approval_id}; its project may have been deleted")
        if approval.status != ApprovalStatus.WAITING:
            used = f"this link was used: {approval.key} was {approval.status.value} by {approval.decided_by}"
            return _link(409, refused=used)
        return _link(token=token, action=action, approval=approval, project=project)


@router.post("/approvals/link/{token}")
def link_decide(request: Request, token: str, comment: Comment = "") -> HTMLResponse:
    """Decide the link's approval as it says; once."""
    check_origin(request)
    ctx = context(request)
    try:
        approval_id, action = approval_links.LinkSigner.of(ctx.settings).read(token, utcnow())
        with session_scope() as db:
            project_id = approvals.project_of(db, approval_id)
        decided = decisions.decide(
            project_id,
            approve=VERBS[action],
            comment=comment.strip() or None,
            by=approval_links.LINK_BY,
            dispatcher=ctx.dispatcher,
            bus=ctx.bus,
            approval_id=approval_id,
        )
    except RaasError as exc:
        return _link(exc.status_code, refused=str(exc))
    return _link(done=f"{decided.title}: {decided.status.value} (project {project_id}); this link is used up")
