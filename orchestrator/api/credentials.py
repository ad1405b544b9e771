"""The caller's git credentials: set, list and forget them; secrets go in and never come out.

A tenant's token manages that tenant's credentials; the cluster token manages the ones used for
projects submitted with the cluster token (embedded runs, operators).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path as PathParam
from fastapi import Response
from pydantic import BaseModel, Field

from orchestrator.api.deps import Caller, Ctx, authed_router
from orchestrator.remotes import credentials
from shared.db import session_scope
from shared.models import CredentialKind

router = authed_router()
Host = Annotated[
    str, PathParam(max_length=255, description="The repository URL's host, with its port if any")
]


class CredentialIn(BaseModel):
    kind: CredentialKind = Field(
        default=CredentialKind.TOKEN,
        description='"token": HTTPS username and token; "ssh_key": a private key',
    )
    username: str = Field(default="", max_length=200, description="HTTPS user name (ignored for ssh_key)")
    secret: str = Field(
        min_length=1,
        max_length=credentials.MAX_SECRET_BYTES,
        description="The token, or the private key's text",
    )


class CredentialOut(BaseModel):
    host: str
    kind: str
    username: str
    updated_at: str


@router.put("/credentials/{host}", status_code=204)
def set_credential(host: Host, body: CredentialIn, ctx: Ctx, caller: Caller) -> Response:
    with session_scope() as session:
        credentials.set_credential(
            session, ctx.settings, caller.tenant_id, host, body.kind, body.username, body.secret
        )
    return Response(status_code=204)


@router.get("/credentials")
def list_credentials(caller: Caller) -> list[CredentialOut]:
    with session_scope() as session:
        return [CredentialOut(**row) for row in credentials.list_credentials(session, caller.tenant_id)]


@router.delete("/credentials/{host}", status_code=204)
def delete_credential(host: Host, caller: Caller) -> Response:
    with session_scope() as session:
        credentials.delete_credential(session, caller.tenant_id, host)
    return Response(status_code=204)
