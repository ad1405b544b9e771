"""Mounting the dashboard on a FastAPI app (the coordinator's, or ``raas run --ui``'s): its
pages, its static files, security headers on every answer, and its error pages.

The API keeps its paths (``/v1``, ``/healthz``, ``/metrics``, ``/mcp``); the dashboard has ``/``,
``/login``, ``/logout``, ``/workers``, ``/triggers``, ``/notifications``, ``/projects/…`` (with
its ``downloads/…`` and ``rounds``) and ``/ui/…`` (fragments and streams), and
``/static/<version>/…``. :func:`close_streams` ends the open streams of a server about to stop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Form, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.dashboard import actions, assets, downloads, notifications, pages, rounds, stream, triggers
from orchestrator.dashboard.approvals import router as approvals_router
from orchestrator.dashboard.evals import router as evals_router
from orchestrator.dashboard.render import render
from orchestrator.dashboard.sessions import (
    COOKIE,
    CSRF_FIELD,
    CSRF_HEADER,
    check_csrf,
    check_origin,
    sign_out,
)
from orchestrator.dashboard.stream import HEARTBEAT_S, Follower, Streams
from orchestrator.dashboard.views import Signed
from orchestrator.queries.workers import WorkerInfo
from shared.errors import CsrfRejected, PageNotFound, SignInRequired

# Scripts only from this server, never inline: what an agent wrote cannot run here.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]


@dataclass(frozen=True)
class DashboardOptions:
    """What differs between the coordinator and ``raas run --ui``."""

    workers: Callable[[], list[WorkerInfo]] | None = None
    """Who answers on the broker; None in an embedded run (its worker is in-process)."""
    flower_url: str | None = None
    follower: Follower | None = None
    """How a project's events are followed; None: Redis (``orchestrator.queries.follow``)."""
    heartbeat_s: float = HEARTBEAT_S
    """An idle stream gets a comment line this often (proxies and browsers keep it open)."""


class SecurityHeaders:
    """Adds the CSP and its companions to every answer (streams included: pure ASGI)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in SECURITY_HEADERS if k not in names]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def _sign_in_required(request: Request, exc: Exception) -> Response:
    wants_page = request.method == "GET" and not request.url.path.startswith("/ui/")
    if wants_page:
        return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
    return PlainTextResponse(str(exc), status_code=401)


async def _csrf_rejected(_request: Request, exc: Exception) -> Response:
    return HTMLResponse(render("_message.html", ok=False, message=str(exc)), status_code=403)


async def _not_found(request: Request, exc: Exception) -> Response:
    if request.url.path.startswith("/ui/"):
        return HTMLResponse(render("_message.html", ok=False, message=str(exc)), status_code=404)
    return HTMLResponse(render("not_found.html", message=str(exc), session=None), status_code=404)


signing_out = APIRouter(include_in_schema=False)


@signing_out.post("/logout")
def logout(
    request: Request, session: Signed, csrf: Annotated[str | None, Form(alias=CSRF_FIELD)] = None
) -> Response:
    """Sign out: the session ends on the server (its cookie, even a copy, signs no one in), and
    the browser drops the cookie. Routed before ``pages``' own /logout, which only dropped it."""
    check_origin(request)
    check_csrf(session, csrf or request.headers.get(CSRF_HEADER))
    sign_out(request.cookies.get(COOKIE))
    answer = RedirectResponse("/login", status_code=303)
    answer.delete_cookie(COOKIE, path="/")
    return answer


def close_streams(app: FastAPI) -> None:
    """End the dashboard's open streams (and any opened later): call it before stopping the
    server that serves ``app``, whose graceful shutdown would otherwise wait for them."""
    streams: Streams = app.state.streams
    streams.close()


def mount_dashboard(app: FastAPI, options: DashboardOptions | None = None) -> FastAPI:
    """Serve the dashboard from ``app`` (made by ``orchestrator.api.create_app``)."""
    app.state.dashboard = options or DashboardOptions()
    app.state.streams = Streams()
    app.add_middleware(SecurityHeaders)
    app.add_exception_handler(SignInRequired, _sign_in_required)
    app.add_exception_handler(CsrfRejected, _csrf_rejected)
    app.add_exception_handler(PageNotFound, _not_found)
    routers = (signing_out, pages.router, actions.router, triggers.router, notifications.router)
    for router in (*routers, downloads.router, rounds.router, stream.router):
        app.include_router(router)
    app.include_router(approvals_router)
    app.include_router(evals_router)  # issue #27
    app.mount(assets.prefix(), assets.VersionedStatic(directory=assets.STATIC_DIR), name="dashboard-static")
    return app
