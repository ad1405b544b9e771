"""Signing in to the dashboard: an API token (the cluster's or a tenant's, checked exactly as the
API checks a bearer token) becomes a signed, HttpOnly, SameSite=Strict session cookie.

The cookie is stateless, so a coordinator restart keeps everyone signed in: it holds the tenant,
a hash of the token and an expiry, signed with a key derived from the cluster token. Every
request checks the token still exists (a deleted token ends its sessions). Each session has a
CSRF token derived from the cookie: every action (a POST) must carry it, in the ``csrf`` form
field or the ``X-CSRF-Token`` header.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

from fastapi import Request
from sqlalchemy import select

from orchestrator.api.tenants import Principal, authenticate, token_hash
from shared.db import session_scope
from shared.errors import RaasError
from shared.models import ApiToken

COOKIE = "raas_session"
SESSION_S = 12 * 3600
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf"


class SignInRequired(RaasError):
    """No session, or one that no longer holds (expired, forged, its token deleted)."""

    status_code = 401


class CsrfRejected(RaasError):
    """An action without this session's CSRF token, or from another origin."""

    status_code = 403


@dataclass(frozen=True)
class Session:
    principal: Principal
    csrf: str


def _key(cluster_token: str) -> bytes:
    return hmac.new(cluster_token.encode(), b"raas-dashboard-session-v1", hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())


def sign_in(token: str, cluster_token: str, now: float | None = None) -> str:
    """The cookie value for ``token``.

    Raises:
        Unauthorized: the token is neither the cluster's nor a tenant's.
    """
    principal = authenticate(token.strip(), cluster_token)
    body = {
        "t": principal.tenant_id,
        "h": token_hash(token.strip()),
        "e": int((now or time.time()) + SESSION_S),
        "n": secrets.token_urlsafe(9),  # each sign-in its own session, so its own CSRF token
    }
    payload = _b64(json.dumps(body, separators=(",", ":")).encode())
    return f"{payload}.{_sign(_key(cluster_token), payload)}"


def read_session(cookie: str | None, cluster_token: str) -> Session:
    """The session a cookie stands for.

    Raises:
        SignInRequired: no cookie, or one that does not hold.
    """
    msg = "sign in with your API token"
    if not cookie or "." not in cookie:
        raise SignInRequired(msg)
    payload, _, signature = cookie.partition(".")
    key = _key(cluster_token)
    if not hmac.compare_digest(signature, _sign(key, payload)):
        raise SignInRequired(msg)
    try:
        body = json.loads(_unb64(payload))
        tenant_id, hashed, expires = body["t"], str(body["h"]), int(body["e"])
    except (ValueError, KeyError, TypeError) as exc:
        raise SignInRequired(msg) from exc
    if expires < time.time() or not _token_holds(tenant_id, hashed, cluster_token):
        raise SignInRequired(msg)
    csrf = _sign(key, "csrf:" + cookie)
    return Session(principal=Principal(tenant_id=tenant_id), csrf=csrf)


def _token_holds(tenant_id: str | None, hashed: str, cluster_token: str) -> bool:
    if tenant_id is None:
        return hmac.compare_digest(hashed, token_hash(cluster_token))
    with session_scope() as session:
        owner = session.scalar(select(ApiToken.tenant_id).where(ApiToken.token_sha256 == hashed))
    return owner == tenant_id


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
