"""Signing in to the dashboard: an API token (the cluster's or a tenant's, checked exactly as the
API checks a bearer token) becomes a session, held on the server, and an HttpOnly,
SameSite=Strict cookie naming it.

The cookie holds a random secret; the ``dashboard_sessions`` row holds its SHA-256, the tenant
and the API token's hash. So a session can end: signing out deletes the row (a copied cookie then
gets 401, or the sign-in page), one unused for longer than ``RAAS_DASHBOARD_IDLE_S`` is refused,
and one older than ``SESSION_S`` too, whatever its use. Every request checks the token still
exists (a deleted token ends its sessions). A coordinator restart keeps everyone signed in: the
rows are in the database. Each session has a CSRF token derived from the cookie: every action (a
POST) must carry it, in the ``csrf`` form field or the ``X-CSRF-Token`` header.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from fastapi import Request
from sqlalchemy import delete, or_, select
from sqlalchemy.orm import Session as DbSession

from orchestrator.api.tenants import Principal, authenticate, token_hash
from shared.db import session_scope
from shared.errors import CsrfRejected, SignInRequired
from shared.models import ApiToken, utcnow
from shared.models.tenancy import DashboardSession
from shared.settings import get_settings

COOKIE = "raas_session"
SESSION_S = 12 * 3600
"""The longest a session lasts, however busy."""
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf"
TOUCH_S = 60.0
"""A session's last use is written at most this often (not a database write per request)."""


@dataclass(frozen=True)
class Session:
    principal: Principal
    csrf: str

    @property
    def who(self) -> str:
        """Who acts, as approvals and what people say name callers (``token:<id>``,
        ``operator``); a session that does not know its token is named by its tenant."""
        if self.principal.token_id is None and self.principal.tenant_id is not None:
            return f"tenant:{self.principal.tenant_id}"
        return self.principal.name


def _key(cluster_token: str) -> bytes:
    return hmac.new(cluster_token.encode(), b"raas-dashboard-session-v1", hashlib.sha256).digest()


def _row_id(cookie: str) -> str:
    return hashlib.sha256(cookie.encode()).hexdigest()


def _idle(idle_s: float | None) -> timedelta:
    return timedelta(seconds=get_settings().dashboard_idle_s if idle_s is None else idle_s)


def _forget_ended(db: DbSession, now: datetime, idle: timedelta) -> None:
    db.execute(
        delete(DashboardSession).where(
            or_(
                DashboardSession.last_seen_at < now - idle,
                DashboardSession.created_at < now - timedelta(seconds=SESSION_S),
            )
        )
    )


def sign_in(token: str, cluster_token: str, now: datetime | None = None) -> str:
    """A new session for ``token``; the answer is its cookie's value.

    Raises:
        Unauthorized: the token is neither the cluster's nor a tenant's.
    """
    principal = authenticate(token.strip(), cluster_token)
    cookie = secrets.token_urlsafe(32)
    moment = now or utcnow()
    with session_scope() as db:
        _forget_ended(db, moment, _idle(None))  # ended sessions leave no rows behind
        db.add(
            DashboardSession(
                id=_row_id(cookie),
                tenant_id=principal.tenant_id,
                token_sha256=token_hash(token.strip()),
                created_at=moment,
                last_seen_at=moment,
            )
        )
    return cookie


def sign_out(cookie: str | None) -> None:
    """End the session ``cookie`` names, on the server: the cookie signs no one in any more."""
    if cookie:
        with session_scope() as db:
            db.execute(delete(DashboardSession).where(DashboardSession.id == _row_id(cookie)))


def read_session(
    cookie: str | None,
    cluster_token: str,
    now: datetime | None = None,
    idle_s: float | None = None,
    *,
    use: bool = True,
) -> Session:
    """The session a cookie stands for, its last use noted (unless ``use`` is False).

    ``idle_s``: how long it may have gone unused (None: ``RAAS_DASHBOARD_IDLE_S``).

    Raises:
        SignInRequired: no cookie, or one whose session ended (signed out, idle, too old, its
            token deleted) or never was.
    """
    msg = "sign in with your API token"
    if not cookie:
        raise SignInRequired(msg)
    moment, idle = now or utcnow(), _idle(idle_s)
    principal = None
    with session_scope() as db:
        row = db.get(DashboardSession, _row_id(cookie))
        if row is not None and (_ended(row, moment, idle) or not _token_holds(db, row, cluster_token)):
            db.delete(row)  # ended: its cookie, and every copy, signs no one in again
        elif row is not None:
            if use and _aware(row.last_seen_at) < moment - min(timedelta(seconds=TOUCH_S), idle / 10):
                row.last_seen_at = moment
            principal = Principal(tenant_id=row.tenant_id)
    if principal is None:
        raise SignInRequired(msg)
    return Session(principal=principal, csrf=_csrf(cookie, cluster_token))


def session_holds(cookie: str | None, cluster_token: str) -> bool:
    """Whether the session still holds, asked now and then by its open streams (so signing out
    ends them too). Not a use: a page left open does not keep its session from going idle; the
    requests it makes (a click, a fragment reloaded on an event) do."""
    try:
        read_session(cookie, cluster_token, use=False)
    except SignInRequired:
        return False
    return True


def _aware(moment: datetime) -> datetime:
    # SQLite gives back naive datetimes (UTC); Postgres aware ones.
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _ended(row: DashboardSession, now: datetime, idle: timedelta) -> bool:
    too_old = _aware(row.created_at) < now - timedelta(seconds=SESSION_S)
    return too_old or _aware(row.last_seen_at) < now - idle


def _csrf(cookie: str, cluster_token: str) -> str:
    digest = hmac.new(_key(cluster_token), ("csrf:" + cookie).encode(), hashlib.sha256).hexdigest()
    return digest[:43]


def _token_holds(db: DbSession, row: DashboardSession, cluster_token: str) -> bool:
    if row.tenant_id is None:
        return hmac.compare_digest(row.token_sha256, token_hash(cluster_token))
    owner = db.scalar(select(ApiToken.tenant_id).where(ApiToken.token_sha256 == row.token_sha256))
    return owner == row.tenant_id


def check_origin(request: Request) -> None:
    """A browser's POST names its origin: it must be this server (defence beside the token)."""
    origin = request.headers.get("origin")
    if origin is None:
        return
    expected = f"{request.url.scheme}://{request.headers.get('host', '')}"
    if origin != expected:
        msg = f"an action from {origin!r} is refused; use the dashboard itself"
        raise CsrfRejected(msg)


def check_csrf(session: Session, given: str | None) -> None:
    if not given or not hmac.compare_digest(given, session.csrf):
        msg = "this form has expired (no valid CSRF token); reload the page and try again"
        raise CsrfRejected(msg)
