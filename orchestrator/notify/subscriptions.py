"""Subscriptions: which events of a tenant's projects (or of one of them) go to which medium.

Bad input is refused in one line naming what is wrong, before anything is written: a webhook
URL that is not http(s), a medium without its secret, an unknown event type, a project the
caller cannot see. The secret (a webhook's HMAC key, the Slack incoming webhook's URL, the SMTP
password) is sealed with the operator's key (orchestrator.remotes.credentials) before it is
stored, and never comes back out: listings show the target and the state.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from orchestrator.notify.media.mail import recipients
from orchestrator.remotes import credentials
from shared.errors import InvalidInput, NotFound
from shared.event_payloads import NOTIFIABLE
from shared.models import (
    Notification,
    NotificationMedium,
    NotificationStatus,
    Project,
    Subscription,
    SubscriptionStatus,
    utcnow,
)
from shared.settings import Settings

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class MailServer(BaseModel):
    """The SMTP server a mail subscription sends through (its password is the secret)."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field(min_length=1, max_length=255)
    port: int = Field(default=587, ge=1, le=65535)
    username: str = Field(min_length=1, max_length=200)
    sender: str = Field(default="", max_length=300, description="From: address; default: the username")
    tls: Literal["starttls", "ssl", "none"] = Field(
        default="starttls", description='"none" only for a server on loopback'
    )


class SubscriptionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    medium: NotificationMedium
    target: str = Field(
        default="", max_length=2000, description="webhook: its URL; mail: the recipients; slack: none"
    )
    secret: SecretStr = Field(
        default=SecretStr(""),
        max_length=credentials.MAX_SECRET_BYTES,
        description="webhook: the HMAC key; slack: the incoming webhook's URL; mail: the SMTP password",
    )
    events: list[str] | None = Field(default=None, description="Event types; default: all of them")
    project_id: str | None = Field(default=None, max_length=32, description="Only this project's events")
    smtp: MailServer | None = None


class SubscriptionOut(BaseModel):
    id: str
    medium: NotificationMedium
    target: str
    events: list[str]
    project_id: str | None
    status: SubscriptionStatus
    state: str
    """The status in words: why a failing endpoint was paused."""
    consecutive_failures: int
    pending: int
    created_at: datetime


def _http_url(url: str, what: str) -> str:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = f"{parts.scheme}://…" if parts.scheme else "(no scheme)"
        msg = f"the {what} must be an http:// or https:// URL, not {shown}"
        raise InvalidInput(msg)
    return url.strip()


def _events(given: list[str] | None) -> list[str]:
    if given is None:
        return list(NOTIFIABLE)
    unknown = [name for name in given if name not in NOTIFIABLE]
    if unknown or not given:
        what = f"unknown event type {unknown[0]!r}" if unknown else "no event types given"
        msg = f"{what}; choose from {', '.join(NOTIFIABLE)}"
        raise InvalidInput(msg)
    return sorted(set(given))


def _missing_secret(medium: NotificationMedium) -> InvalidInput:
    what = {
        NotificationMedium.WEBHOOK: "its HMAC secret (the key the receiver verifies signatures with)",
        NotificationMedium.SLACK: "its secret: the Slack incoming webhook's URL",
        NotificationMedium.MAIL: "its secret: the SMTP password",
    }[medium]
    return InvalidInput(f"a {medium.value} notification needs {what}; give --secret-file FILE")


def _checked(body: SubscriptionIn) -> tuple[str, dict[str, object]]:
    """The target to show and the options to keep, or the bad input in one line."""
    secret = body.secret.get_secret_value().strip()
    if body.medium is NotificationMedium.WEBHOOK:
        target = _http_url(body.target, "webhook URL")
        if not secret:
            raise _missing_secret(body.medium)
        return target, {}
    if body.medium is NotificationMedium.SLACK:
        if body.target:
            msg = "a slack notification takes no target: its incoming webhook URL is the secret"
            raise InvalidInput(msg)
        if not secret:
            raise _missing_secret(body.medium)
        parts = urlsplit(_http_url(secret, "Slack incoming webhook URL"))
        return f"{parts.scheme}://{parts.netloc}/…", {}
    if not recipients(body.target) or any("@" not in a for a in recipients(body.target)):
        msg = "a mail notification needs its recipients (name@example.org, comma-separated)"
        raise InvalidInput(msg)
    if body.smtp is None:
        msg = "a mail notification needs its SMTP server: --smtp smtp://USER@HOST:PORT"
        raise InvalidInput(msg)
    if not secret:
        raise _missing_secret(body.medium)
    if body.smtp.tls == "none" and body.smtp.host not in LOOPBACK:
        msg = f"SMTP without TLS sends the password in clear: loopback servers only, not {body.smtp.host}"
        raise InvalidInput(msg)
    server = body.smtp.model_copy(update={"sender": body.smtp.sender or body.smtp.username})
    if "@" not in server.sender:
        msg = f"the mail's sender {server.sender!r} is not an address; give --from ADDRESS"
        raise InvalidInput(msg)
    return ", ".join(recipients(body.target)), server.model_dump()


def add(session: Session, settings: Settings, tenant_id: str | None, body: SubscriptionIn) -> SubscriptionOut:
    """Subscribe; nothing is written when the input is bad.

    Raises:
        InvalidInput: the input is bad, or no key is configured to seal the secret with.
        NotFound: ``project_id`` is not a project the caller can see.
    """
    target, options = _checked(body)
    events = _events(body.events)
    if body.project_id is not None:
        owner = session.execute(select(Project.tenant_id).where(Project.id == body.project_id)).one_or_none()
        if owner is None or (tenant_id is not None and owner[0] != tenant_id):
            msg = f"no project {body.project_id!r}; `raas ls` lists your projects"
            raise NotFound(msg)
    row = Subscription(
        tenant_id=tenant_id,
        project_id=body.project_id,
        medium=body.medium,
        target=target,
        events=events,
        secret_encrypted=credentials.seal(settings, body.secret.get_secret_value().strip()),
        options=options,
        status=SubscriptionStatus.ACTIVE,
        consecutive_failures=0,
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    return _out(row, 0)


def listing(session: Session, tenant_id: str | None) -> list[SubscriptionOut]:
    """The caller's subscriptions, oldest first, with their state and pending notifications."""
    pending = dict(
        session.execute(
            select(Notification.subscription_id, func.count())
            .where(Notification.status == NotificationStatus.PENDING)
            .group_by(Notification.subscription_id)
        ).all()
    )
    rows = session.scalars(select(Subscription).where(_owner(tenant_id)).order_by(Subscription.created_at))
    return [_out(row, pending.get(row.id, 0)) for row in rows]


def set_paused(
    session: Session, tenant_id: str | None, subscription_id: str, paused: bool
) -> SubscriptionOut:
    """Pause (nothing new is written for it) or resume (its failures forgotten, pending rows due now).

    Raises:
        NotFound: the caller has no such subscription.
    """
    row = _row(session, tenant_id, subscription_id)
    row.status = SubscriptionStatus.PAUSED if paused else SubscriptionStatus.ACTIVE
    if not paused:
        row.consecutive_failures = 0
        now = utcnow()
        for notification in session.scalars(
            select(Notification).where(
                Notification.subscription_id == row.id, Notification.status == NotificationStatus.PENDING
            )
        ):
            notification.next_attempt_at = now
    session.flush()
    return _out(row, 0)


def remove(session: Session, tenant_id: str | None, subscription_id: str) -> None:
    """Forget the subscription and its notifications, sent or not.

    Raises:
        NotFound: the caller has no such subscription.
    """
    session.delete(_row(session, tenant_id, subscription_id))


def _owner(tenant_id: str | None):  # type: ignore[no-untyped-def]
    return Subscription.tenant_id.is_(None) if tenant_id is None else Subscription.tenant_id == tenant_id


def _row(session: Session, tenant_id: str | None, subscription_id: str) -> Subscription:
    row = session.scalars(
        select(Subscription).where(_owner(tenant_id), Subscription.id == subscription_id).with_for_update()
    ).first()
    if row is None:
        msg = f"no notification {subscription_id!r}; `raas notify ls` lists yours"
        raise NotFound(msg)
    return row


def state(row: Subscription) -> str:
    if row.status is SubscriptionStatus.FAILING:
        return f"paused: {row.consecutive_failures} failed attempts in a row (last: {row.last_error})"
    if row.status is SubscriptionStatus.PAUSED:
        return "paused"
    if row.consecutive_failures:
        return f"active, {row.consecutive_failures} failed attempts in a row (last: {row.last_error})"
    return "active"


def _out(row: Subscription, pending: int) -> SubscriptionOut:
    return SubscriptionOut(
        id=row.id,
        medium=row.medium,
        target=row.target,
        events=list(row.events),
        project_id=row.project_id,
        status=row.status,
        state=state(row),
        consecutive_failures=row.consecutive_failures,
        pending=pending,
        created_at=row.created_at,
    )
