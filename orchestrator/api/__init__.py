"""The coordinator's HTTP API: a thin edge that parses, calls the core and formats.

Every route but those in ``PUBLIC_PATHS`` needs the bearer token, the OpenAPI schema included,
and the MCP endpoint (``/mcp``, ``mcp_http``) too. Each module of this package holds the routes
of one concern in its ``router``.

An edge below ``dashboard``, ``service``, ``embedded`` and ``cli``: it may import ``mcp``,
``queries``, ``transcripts``, ``delivery``, ``scheduling``, ``remotes`` and ``shared``; never
those above it, nor ``workers``.
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException

from orchestrator.api import (
    credentials,
    evals,  # issue #27
    notifications,
    ops,
    projects,
    team,
    transcripts,
    triggers,
)
from orchestrator.api.access_log import drop_query_strings
from orchestrator.api.deps import Context, principal
from orchestrator.api.mcp_http import McpEndpoint
from orchestrator.api.pull_requests import router as pull_requests_router  # issue #25
from orchestrator.scheduling.dispatch import Dispatcher
from shared.errors import RaasError
from shared.events import EventBus
from shared.schemas import ErrorOut
from shared.settings import Settings

ROUTERS = (
    projects.router,
    transcripts.router,
    ops.router,
    credentials.router,
    team.router,
    notifications.router,
    triggers.router,
    evals.router,
    pull_requests_router,
)

# The only paths answered without a token; tests/integration/test_tenancy.py walks every route
# the app serves (mounts included) against this list. /healthz is for load balancers and
# compose; /metrics is aggregate only (orchestrator.api.ops says why it is open). The OpenAPI
# schema is not here: it maps every operation, so it needs a token like they do, and FastAPI's
# /docs and /redoc pages are off (they fetch the schema without one).
PUBLIC_PATHS = frozenset({"/healthz", "/metrics", "/v1/hooks/{trigger_id}"})


def _answer(status: int, error: str, detail: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    body = ErrorOut(error=error, detail=detail).model_dump()
    return JSONResponse(status_code=status, content=body, headers=headers)


async def _raas_error(_request: Request, exc: Exception) -> JSONResponse:
    status = exc.status_code if isinstance(exc, RaasError) else 500
    return _answer(status, type(exc).__name__, str(exc))


async def _invalid_request(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    return _answer(422, "InvalidInput", f"{where}: {first['msg']}")


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's own refusals (an unreadable body, an unknown path or method) in the same shape."""
    assert isinstance(exc, HTTPException)
    name = "".join(HTTPStatus(exc.status_code).phrase.split())
    return _answer(exc.status_code, name, str(exc.detail), exc.headers)


async def _database_down(_request: Request, exc: Exception) -> JSONResponse:
    """A database restart is a 503 (try again), not a 500 (a bug)."""
    detail = "the coordinator's database does not answer; try again shortly"
    return _answer(503, "ServiceUnavailable", detail)


def create_app(settings: Settings, dispatcher: Dispatcher, bus: EventBus) -> FastAPI:
    ctx = Context(settings=settings, dispatcher=dispatcher, bus=bus)
    drop_query_strings()
    mcp = McpEndpoint(ctx)
    app = FastAPI(
        title="Constellation coordinator",
        version="0.1.0",
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        lifespan=lambda _app: mcp.running(),
    )
    app.state.ctx = ctx
    app.add_exception_handler(RaasError, _raas_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(OperationalError, _database_down)
    app.add_exception_handler(InterfaceError, _database_down)

    @app.get("/healthz")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    app.include_router(ops.public)  # /metrics: no token, see orchestrator.api.ops
    app.include_router(triggers.hooks)  # /v1/hooks/{trigger_id}: the signature is the token

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(principal)])
    def openapi_schema() -> dict[str, Any]:
        return app.openapi()

    for router in ROUTERS:
        app.include_router(router)
    app.router.routes.append(mcp.route())  # checks the Origin and the token itself (mcp_http)
    return app
