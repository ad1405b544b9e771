"""Tenants and their tokens: who may see which project, and how fast a tenant may submit.

The cluster token (RAAS_API_TOKEN) is the operators' and the workers': it sees every project.
A tenant's token sees only that tenant's projects; any other project answers 404, exactly as
one that does not exist, so ids leak nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import select

from orchestrator.scheduling.submission import projects_this_hour
from shared.db import session_scope
from shared.errors import Conflict, InvalidInput, NotFound, SubmissionsRateLimited, Unauthorized
from shared.models import ApiToken, Project, Tenant, utcnow

TOKEN_PREFIX = "raas_"


@dataclass(frozen=True)
class Principal:
    """Who is calling: a tenant, or the cluster itself (tenant_id None)."""

    tenant_id: str | None
    # The tenant's token that called (None: the cluster token); approvals name it.
    token_id: str | None = None

    @property
    def is_cluster(self) -> bool:
        return self.tenant_id is None

    @property
    def name(self) -> str:
        """Who it is in an approval, a ``person_said`` event: ``operator`` or ``token:<id>``."""
        return "operator" if self.token_id is None else f"token:{self.token_id}"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def authenticate(token: str, cluster_token: str) -> Principal:
    """The principal a bearer token stands for.

    Raises:
        Unauthorized: no token, or one that is not the cluster's nor any tenant's.
    """
    if token and hmac.compare_digest(token.encode(), cluster_token.encode()):
        return Principal(tenant_id=None)
    if token:
        with session_scope() as session:
            found = session.execute(
                select(ApiToken.tenant_id, ApiToken.id).where(ApiToken.token_sha256 == token_hash(token))
            ).one_or_none()
        if found is not None:
            return Principal(tenant_id=found[0], token_id=found[1])
    msg = "missing or wrong API token; set RAAS_API_TOKEN to your token"
    raise Unauthorized(msg)


def authorize(principal: Principal, project_id: str) -> None:
    """Refuse a tenant another tenant's project, with the answer an unknown id gets."""
    if principal.is_cluster:
        return
    with session_scope() as session:
        owner = session.execute(select(Project.tenant_id).where(Project.id == project_id)).one_or_none()
    if owner is None or owner[0] != principal.tenant_id:
        msg = f"no project {project_id!r}; `raas ls` lists your projects"
        raise NotFound(msg)


def check_submission_rate(principal: Principal) -> None:
    """A tenant may create at most its ``submissions_per_hour`` projects in any hour."""
    tenant_id = principal.tenant_id
    if principal.is_cluster or tenant_id is None:
        return
    with session_scope() as session:
        limit = session.scalar(select(Tenant.submissions_per_hour).where(Tenant.id == tenant_id))
        recent = projects_this_hour(session, tenant_id, utcnow())
    if limit is not None and recent >= limit:
        msg = f"this tenant submitted {recent} projects in the last hour (limit {limit}); try again later"
        raise SubmissionsRateLimited(msg)


def create_tenant(name: str, submissions_per_hour: int = 60) -> tuple[str, str]:
    """A new tenant and its first token; the token is shown once and stored only as a hash."""
    if not name.strip() or submissions_per_hour < 1:
        msg = "a tenant needs a name and a submissions_per_hour of at least 1"
        raise InvalidInput(msg)
    with session_scope() as session:
        if session.scalar(select(Tenant.id).where(Tenant.name == name)) is not None:
            msg = f"tenant {name!r} exists already; `raas tenant token {name}` makes another token"
            raise Conflict(msg)
        tenant = Tenant(name=name, submissions_per_hour=submissions_per_hour, created_at=utcnow())
        session.add(tenant)
        session.flush()
        tenant_id = tenant.id
    return tenant_id, issue_token(name)


def issue_token(tenant_name: str) -> str:
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with session_scope() as session:
        tenant_id = session.scalar(select(Tenant.id).where(Tenant.name == tenant_name))
        if tenant_id is None:
            msg = f"no tenant {tenant_name!r}; `raas tenant add NAME` creates one"
            raise NotFound(msg)
        session.add(ApiToken(tenant_id=tenant_id, token_sha256=token_hash(token), created_at=utcnow()))
    return token
