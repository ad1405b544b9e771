"""What every dashboard route needs: the signed-in session, the project it may see, and the
404 page an unknown (or another tenant's) project answers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import Depends, Request

from orchestrator.api.deps import Context, context
from orchestrator.api.tenants import authorize
from orchestrator.dashboard.sessions import COOKIE, Session, read_session
from shared.errors import NotFound, PageNotFound


def current_session(request: Request) -> Session:
    cluster_token = context(request).settings.api_token.get_secret_value()
    return read_session(request.cookies.get(COOKIE), cluster_token)


@contextmanager
def as_page() -> Iterator[None]:
    """NotFound inside the block answers the 404 page (same words as the API's)."""
    try:
        yield
    except NotFound as exc:
        if isinstance(exc, PageNotFound):
            raise
        raise PageNotFound(str(exc)) from exc


def project_session(request: Request, project_id: str) -> Session:
    """The session, if it may see ``project_id``; another tenant's project is not found."""
    session = current_session(request)
    with as_page():
        authorize(session.principal, project_id)
    return session


Signed = Annotated[Session, Depends(current_session)]
ProjectSigned = Annotated[Session, Depends(project_session)]
Ctx = Annotated[Context, Depends(context)]
