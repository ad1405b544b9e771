"""``/mcp``: the coordinator's MCP endpoint (streamable HTTP), behind the API's own rules.

Before the MCP server sees a request, two checks, in this order:

1. **Origin.** A request whose ``Origin`` header is not on RAAS_MCP_ALLOWED_ORIGINS (empty by
   default) is refused with 403. Browsers send an Origin with every cross-origin request, so a
   page elsewhere, one that rebinds its DNS name to this host included, cannot call the tools;
   MCP clients that are not browsers send none and are not affected.
2. **Token.** The bearer token must be the cluster's or a tenant's, exactly as on every other
   route (``orchestrator.api.tenants.authenticate``); 401 otherwise.

The tools then run in-process (``orchestrator.mcp.backends.CoreBackend``) as that caller: a
tenant's tools see only its projects (another tenant's id answers as an unknown one does) and
its submissions count against its hourly limit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import anyio
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from orchestrator.api.deps import Context
from orchestrator.api.tenants import authenticate, authorize, check_submission_rate
from orchestrator.mcp.backends import CoreBackend
from orchestrator.mcp.server import BACKEND_SCOPE_KEY, http_session_manager
from shared.errors import Unauthorized
from shared.schemas import ErrorOut

PATH = "/mcp"


def _refusal(status: int, error: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        ErrorOut(error=error, detail=detail).model_dump(), status_code=status, headers=headers
    )


def _bearer(headers: Headers) -> str:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class McpEndpoint:
    """The ASGI app at /mcp: the Origin and token checks, then the MCP transport."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._manager: StreamableHTTPSessionManager | None = None

    def route(self) -> Route:
        # POST only: a stateless server has no session to stream to (GET) or to end (DELETE).
        return Route(PATH, endpoint=self, methods=["POST"])

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The transport's task group, for the app's lifespan (a new one each time it starts)."""
        manager = http_session_manager()
        async with manager.run():
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is not None and origin not in self._ctx.settings.mcp_allowed_origins:
            detail = f"origin {origin!r} may not call {PATH}; list it in RAAS_MCP_ALLOWED_ORIGINS"
            await _refusal(403, "Forbidden", detail)(scope, receive, send)
            return
        settings = self._ctx.settings
        try:
            caller = await anyio.to_thread.run_sync(
                authenticate, _bearer(headers), settings.api_token.get_secret_value()
            )
        except Unauthorized as exc:
            await _refusal(401, "Unauthorized", str(exc), {"WWW-Authenticate": "Bearer"})(
                scope, receive, send
            )
            return
        if self._manager is None:
            await _refusal(503, "ServiceUnavailable", f"{PATH} is not running yet")(scope, receive, send)
            return
        backend = CoreBackend(
            settings=settings,
            dispatcher=self._ctx.dispatcher,
            bus=self._ctx.bus,
            tenant_id=caller.tenant_id,
            authorize=partial(authorize, caller),
            admit_submission=partial(check_submission_rate, caller),
            caller=caller.name,
        )
        await self._manager.handle_request({**scope, BACKEND_SCOPE_KEY: backend}, receive, send)
