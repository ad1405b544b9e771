"""The notification sender: the outbox's sending side, a loop in every coordinator (and in the
embedded engine).

Each pass reads the pending notifications that are due, of active subscriptions, and for each:

1. **claims** it with one conditional UPDATE (pending, due, and no live claim: ``claimed_until``
   past), which also counts the attempt. Any number of coordinators may run the loop; one claim
   wins. A sender that dies mid-attempt leaves a claim that lapses after ``lease_s``, and the row
   is tried again: a crash never drops a notification. It may send it twice when the crash
   falls between the send and its record; the webhook's ``webhook-id`` (and the mail's
   Message-ID) is the same on both, so the receiver drops the repeat;
2. **renders** it once (orchestrator.notify.news, then the medium), keeping the body on the row:
   every attempt sends the same bytes. A project whose delivery is still pending (its pull
   request being opened after the end) has its notifications wait for it, up to
   DELIVERY_WAIT_S, so that they can link the pull request;
3. **sends** it outside any transaction, and records the outcome: sent; or tried again after a
   backoff that doubles from RAAS_NOTIFY_BACKOFF_S up to RAAS_NOTIFY_BACKOFF_MAX_S, until
   RAAS_NOTIFY_RETRY_FOR_S after its event, then failed. RAAS_NOTIFY_PAUSE_AFTER failed attempts
   in a row pause the subscription (``failing``, said in ``raas notify ls``) until it is resumed.

No secret is logged: a failure is recorded in the medium's words, which never hold it.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta

from sqlalchemy import Exists, or_, select, update

from orchestrator.notify import news
from orchestrator.notify.media import MEDIA, Endpoint
from orchestrator.remotes import credentials
from orchestrator.scheduling import approval_links
from orchestrator.workspaces import get_store
from shared.db import session_scope
from shared.errors import InvalidInput
from shared.models import (
    Delivery,
    DeliveryKind,
    DeliveryStatus,
    Notification,
    NotificationMedium,
    NotificationStatus,
    Subscription,
    SubscriptionStatus,
    utcnow,
)
from shared.settings import Settings

log = logging.getLogger(__name__)
# Longer than an attempt can take (the media's 10 s timeouts, a slow SMTP dialogue).
LEASE_S = 120.0
BATCH = 50
# How long a notification waits for its project's pending delivery (the pull request to link).
DELIVERY_WAIT_S = 300.0


class NotificationSender:
    """Sends the notification outbox of the database at ``url`` (default: the settings')."""

    def __init__(self, settings: Settings, url: str | None = None, lease_s: float = LEASE_S) -> None:
        self.settings = settings
        self.url = url
        self.lease = timedelta(seconds=lease_s)

    def loop(self, stop: threading.Event) -> None:
        """Run passes every RAAS_NOTIFY_INTERVAL_S until ``stop`` is set, then one last pass (a
        ``raas run`` that ends has just recorded how)."""
        while True:
            try:
                self.run_once()
            except Exception:  # the next pass tries again; a database restart is not fatal
                log.exception("the notification sender's pass failed")
            if stop.is_set():
                return
            stop.wait(self.settings.notify_interval_s)

    def run_once(self) -> int:
        """One pass: every due notification attempted once; how many were sent."""
        return sum(1 for notification_id in self._due() if self.attempt(notification_id))

    def _due(self) -> list[str]:
        now = utcnow()
        with session_scope(self.url) as session:
            return list(
                session.scalars(
                    select(Notification.id)
                    .join(Subscription, Subscription.id == Notification.subscription_id)
                    .where(
                        Notification.status == NotificationStatus.PENDING,
                        Notification.next_attempt_at <= now,
                        or_(Notification.claimed_until.is_(None), Notification.claimed_until < now),
                        Subscription.status == SubscriptionStatus.ACTIVE,
                        ~self._delivering(now),
                    )
                    .order_by(Notification.next_attempt_at)
                    .limit(BATCH)
                )
            )

    @staticmethod
    def _delivering(now: datetime) -> Exists:
        """A notification not yet rendered whose project's delivery is pending (its pull request
        is being opened) waits for it, DELIVERY_WAIT_S at most, so that it can link the PR."""
        return (
            select(Delivery.id)
            .where(
                Delivery.project_id == Notification.project_id,
                Delivery.kind == DeliveryKind.PROJECT,
                Delivery.status == DeliveryStatus.PENDING,
                Notification.body.is_(None),
                Notification.created_at > now - timedelta(seconds=DELIVERY_WAIT_S),
            )
            .exists()
        )

    def attempt(self, notification_id: str) -> bool:
        """Claim, render (once) and send one notification, and record how it went; whether it
        was sent. False too when another sender holds it, or it is no longer due."""
        attempt = self.claim(notification_id)
        if attempt is None:
            return False
        try:
            medium, body, endpoint = self._prepare(notification_id)
            error = MEDIA[medium].send(notification_id, body, endpoint)
        except InvalidInput as exc:  # the key cannot open the secret: said without it
            error = str(exc)
        except Exception as exc:  # a bug must not stop the loop, nor lose the row
            log.exception("notification %s: attempt %d failed", notification_id, attempt)
            error = f"internal error ({type(exc).__name__})"
        self._record(notification_id, attempt, error)
        return error is None

    def claim(self, notification_id: str) -> int | None:
        """Claim the row for one attempt; the attempt's number, or None when it is not ours."""
        now = utcnow()
        with session_scope(self.url) as session:
            claimed = session.execute(
                update(Notification)
                .where(
                    Notification.id == notification_id,
                    Notification.status == NotificationStatus.PENDING,
                    Notification.next_attempt_at <= now,
                    or_(Notification.claimed_until.is_(None), Notification.claimed_until < now),
                )
                .values(claimed_until=now + self.lease, attempts=Notification.attempts + 1)
                .execution_options(synchronize_session=False)
            )
            if claimed.rowcount != 1:  # type: ignore[attr-defined]
                return None
            return session.scalar(select(Notification.attempts).where(Notification.id == notification_id))

    def _prepare(self, notification_id: str) -> tuple[NotificationMedium, str, Endpoint]:
        with session_scope(self.url) as session:
            row = session.get_one(Notification, notification_id)
            subscription = session.get_one(Subscription, row.subscription_id)
            endpoint = Endpoint(
                target=subscription.target,
                secret=credentials.unseal(
                    self.settings, subscription.secret_encrypted, f"notification {subscription.id}"
                ),
                options=dict(subscription.options),
            )
            medium = MEDIA[subscription.medium]
            if row.body is None:
                settings = self.settings
                links = approval_links.LinkSigner.of(settings)
                said = news.gather(session, row, get_store(settings), settings.coordinator_url, links)
                row.body = medium.render(said, endpoint)
            return subscription.medium, row.body, endpoint

    def _record(self, notification_id: str, attempt: int, error: str | None) -> None:
        now = utcnow()
        with session_scope(self.url) as session:
            row = session.get(Notification, notification_id, with_for_update=True)
            # Another sender took it over after our claim lapsed: its outcome is the one to keep.
            if row is None or row.status is not NotificationStatus.PENDING or row.attempts != attempt:
                return
            row.claimed_until = None
            row.last_error = error
            if error is None:
                row.status, row.sent_at = NotificationStatus.SENT, now
            elif now - _aware(row.created_at) >= timedelta(seconds=self.settings.notify_retry_for_s):
                row.status = NotificationStatus.FAILED
            else:
                row.next_attempt_at = now + timedelta(seconds=self.backoff_s(attempt))
            subscription = session.get(Subscription, row.subscription_id, with_for_update=True)
            if subscription is not None:
                self._count(subscription, error)

    def _count(self, subscription: Subscription, error: str | None) -> None:
        if error is None:
            subscription.consecutive_failures, subscription.last_error = 0, None
            return
        subscription.consecutive_failures += 1
        subscription.last_error = error
        if (
            subscription.status is SubscriptionStatus.ACTIVE
            and subscription.consecutive_failures >= self.settings.notify_pause_after
        ):
            subscription.status = SubscriptionStatus.FAILING
            log.warning(
                "notification %s (%s) paused after %d failed attempts in a row: %s",
                subscription.id,
                subscription.medium.value,
                subscription.consecutive_failures,
                error,
            )

    def backoff_s(self, attempt: int) -> float:
        """The wait after failed attempt number ``attempt`` (1, 2, ...)."""
        wait = self.settings.notify_backoff_s * 2 ** min(attempt - 1, 40)
        return float(min(wait, self.settings.notify_backoff_max_s))


def _aware(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment  # SQLite drops the zone
