"""What every route needs: the context built once per app, the bearer-token check, uploads,
and the error answers every authenticated route may give.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from orchestrator.api.tenants import Principal, authenticate, authorize
from orchestrator.scheduling.dispatch import Dispatcher
from orchestrator.workspaces import WorkspaceStore, get_store
from shared.errors import InvalidInput
from shared.events import EventBus
from shared.schemas import ErrorOut
from shared.settings import Settings


@dataclass(frozen=True)
class Context:
    """What the routes need, built once when the app is created."""

    settings: Settings
    dispatcher: Dispatcher
    bus: EventBus

    @property
    def workspaces(self) -> WorkspaceStore:
        return get_store(self.settings)


def context(request: Request) -> Context:
    ctx: Context = request.app.state.ctx
    return ctx


# Declared as the OpenAPI security scheme; a missing or malformed header is our own 401 below.
_bearer = HTTPBearer(auto_error=False, description="RAAS_API_TOKEN, or a tenant's token")


def principal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    """Who calls (from the bearer token); a route naming a project checks it may see it."""
    cluster_token = context(request).settings.api_token.get_secret_value()
    caller = authenticate(credentials.credentials if credentials else "", cluster_token)
    project_id = request.path_params.get("project_id")
    if project_id is not None:
        authorize(caller, project_id)
    return caller


Ctx = Annotated[Context, Depends(context)]
Caller = Annotated[Principal, Depends(principal)]


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorOut, "description": description}


# What shared.errors maps to (one handler, orchestrator.api), so that the schema says it too.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _error("The request body could not be read (e.g. JSON that is not UTF-8)"),
    401: _error("No token, or one that is neither the cluster's nor a tenant's"),
    404: _error("No such project (or another tenant's)"),
    409: _error("The project is not in a state that allows this"),
    422: _error("Invalid input: the message says which part and why"),
    429: _error("The tenant submitted too many projects in the last hour"),
}


def authed_router() -> APIRouter:
    """A router under /v1 whose every route needs a token, and a project's owner for its routes."""
    return APIRouter(prefix="/v1", dependencies=[Depends(principal)], responses=ERROR_RESPONSES)


async def save_body(request: Request, limit_bytes: int) -> Path:
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
