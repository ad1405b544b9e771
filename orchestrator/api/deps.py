"""What every route needs: the context built once per app, the bearer-token check, uploads."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request

from orchestrator.dispatch import Dispatcher
from orchestrator.tenants import Principal, authenticate, authorize
from shared.errors import InvalidInput
from shared.events import EventBus
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


def context(request: Request) -> Context:
    ctx: Context = request.app.state.ctx
    return ctx


def principal(request: Request, authorization: Annotated[str | None, Header()] = None) -> Principal:
    """Who calls (from the bearer token); a route naming a project checks it may see it."""
    scheme, _, given = (authorization or "").partition(" ")
    cluster_token = context(request).settings.api_token.get_secret_value()
    caller = authenticate(given if scheme.lower() == "bearer" else "", cluster_token)
    project_id = request.path_params.get("project_id")
    if project_id is not None:
        authorize(caller, project_id)
    return caller


Ctx = Annotated[Context, Depends(context)]
Caller = Annotated[Principal, Depends(principal)]


def authed_router() -> APIRouter:
    """A router under /v1 whose every route needs a token, and a project's owner for its routes."""
    return APIRouter(prefix="/v1", dependencies=[Depends(principal)])


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
