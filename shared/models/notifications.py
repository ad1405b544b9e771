"""News out (issue #24): subscriptions of a tenant's or a project's events to a medium, and the
notification outbox every matching event writes in its own transaction (DESIGN.md rule 12)."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from shared.models.base import Base, enum_column, new_id, timestamp


class NotificationMedium(str, Enum):
    WEBHOOK = "webhook"  # a signed POST (Standard Webhooks headers); the secret is the HMAC key
    SLACK = "slack"  # a Slack incoming webhook; the secret is its URL
    MAIL = "mail"  # mail over SMTP; the secret is the SMTP password


class SubscriptionStatus(str, Enum):
    ACTIVE = "active"
    PAUSED = "paused"  # by a person (``raas notify pause``)
    FAILING = "failing"  # paused by the sender after RAAS_NOTIFY_PAUSE_AFTER failed attempts in a row


class NotificationStatus(str, Enum):
    PENDING = "pending"  # to be sent (again, after ``next_attempt_at``)
    SENT = "sent"
    FAILED = "failed"  # given up: still failing RAAS_NOTIFY_RETRY_FOR_S after it was written


class Subscription(Base):
    """Which events of a tenant's projects (or of one project) go to which medium.

    The secret (the webhook's HMAC key, the Slack URL, the SMTP password) is held only as its
    Fernet token under the operator's key (orchestrator.remotes.credentials); ``target`` is what
    may be shown: the webhook's URL, the Slack URL's origin, the mail's recipients.
    """

    __tablename__ = "notification_subscriptions"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    # None: the cluster token's (its projects are those submitted with it, as for credentials).
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    # None: every project of the tenant.
    project_id: Mapped[str | None] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    medium: Mapped[NotificationMedium] = mapped_column(enum_column(NotificationMedium))
    target: Mapped[str] = mapped_column(String(2000))
    # The event types it takes (shared.event_payloads.NOTIFIABLE).
    events: Mapped[list[Any]]
    secret_encrypted: Mapped[str] = mapped_column(Text)
    # What a medium needs besides its target and secret (mail: the SMTP server), never a secret.
    options: Mapped[dict[str, Any]]
    status: Mapped[SubscriptionStatus] = mapped_column(
        enum_column(SubscriptionStatus), default=SubscriptionStatus.ACTIVE
    )
    consecutive_failures: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = timestamp(nullable=False)


class Notification(Base):
    """One event for one subscription: an outbox row, written in the transaction of the event.

    Its id is the webhook's ``webhook-id``: the same on every attempt, so a receiver drops a
    repeat. A sender claims the row (``claimed_until``) with one conditional UPDATE before each
    attempt; ``body`` is what the first attempt rendered, sent again as it was.
    """

    __tablename__ = "notifications"
    __table_args__ = (
        UniqueConstraint("subscription_id", "event_key"),
        # The sender reads the pending ones every pass: the index holds only those.
        Index(
            "ix_notifications_pending",
            "next_attempt_at",
            postgresql_where=text("status = 'pending'"),
            sqlite_where=text("status = 'pending'"),
        ),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    subscription_id: Mapped[str] = mapped_column(
        ForeignKey("notification_subscriptions.id", ondelete="CASCADE"), index=True
    )
    project_id: Mapped[str | None] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    event_type: Mapped[str] = mapped_column(String(50))
    # What made it, once per subscription: "<project id>:<event seq>" for a project's event.
    event_key: Mapped[str] = mapped_column(String(120))
    # The event and the project as they were in its transaction.
    payload: Mapped[dict[str, Any]]
    body: Mapped[str | None] = mapped_column(Text)
    status: Mapped[NotificationStatus] = mapped_column(
        enum_column(NotificationStatus), default=NotificationStatus.PENDING
    )
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = timestamp(nullable=False)
    claimed_until: Mapped[datetime | None] = timestamp()
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = timestamp(nullable=False)
    sent_at: Mapped[datetime | None] = timestamp()
