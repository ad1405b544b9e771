"""Notifications (issue #24): each event a subscription takes reaches its medium once, after the
commit of the transaction that recorded it — one spec, on SQLite (embedded) and on Postgres.

Everything is real on loopback: the senders' HTTP and SMTP, a webhook receiver that verifies the
Standard Webhooks signature with its own few lines of HMAC, a Slack-shaped receiver, an aiosmtpd
server that requires the SMTP login. Retries are driven by a short backoff setting; nothing here
asserts how long anything took.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr
from sqlalchemy import delete, func, select

from orchestrator.notify import subscriptions
from orchestrator.notify.sender import NotificationSender
from orchestrator.notify.subscriptions import SubscriptionIn
from orchestrator.scheduling import transitions
from orchestrator.scheduling.outbox import Outbox
from shared import events
from shared.db import session_scope
from shared.event_payloads import BudgetWarning, ProjectCompleted, ProjectFailed, ProjectResumed
from shared.migrate import upgrade
from shared.models import (
    Delivery,
    DeliveryKind,
    DeliveryStatus,
    Event,
    Notification,
    NotificationStatus,
    PauseReason,
    Project,
    ProjectStatus,
    Subscription,
    SubscriptionStatus,
    new_id,
    utcnow,
)
from shared.settings import Settings
from tests.support.receivers import HookReceiver, serve_receiver

pytestmark = pytest.mark.integration

HMAC_SECRET = "a-receiver's-key-7f3c"
SLACK_PATH = "/services/T000/B000/XXXXSECRETXXXX"


@pytest.fixture(params=["sqlite", "postgres"], scope="module")
def url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "postgres":
        yield request.getfixturevalue("database_url")
        return
    sqlite_url = f"sqlite:///{tmp_path_factory.mktemp('notify') / 'raas.db'}"
    upgrade(sqlite_url)
    yield sqlite_url


@pytest.fixture(autouse=True)
def no_subscriptions_left(url: str) -> Iterator[None]:
    """Each test's subscriptions go with it: a tenant-wide one would take the next test's events."""
    yield
    with session_scope(url) as session:
        session.execute(delete(Subscription))


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        secret_key=SecretStr(Fernet.generate_key().decode()),
        data_dir=tmp_path,
        notify_backoff_s=0.01,
        notify_backoff_max_s=0.05,
        notify_pause_after=50,
    )


@pytest.fixture
def receiver() -> Iterator[tuple[HookReceiver, str]]:
    with serve_receiver() as served:
        yield served


def make_project(url: str, name: str = "demo") -> str:
    project_id = new_id()
    with session_scope(url) as session:
        session.add(
            Project(
                id=project_id,
                name=name,
                prompt="x",
                config={},
                status=ProjectStatus.RUNNING,
                budget_limit_usd=Decimal("5"),
                spent_usd=Decimal("1.25"),
                created_at=utcnow(),
            )
        )
    return project_id


# The subscriptions this module made: on Postgres the database is shared with the other tests of
# this pytest worker, whose notifications (sealed with their own coordinator's key, to endpoints
# long gone) may still be pending, and are not this module's to wait for.
_MINE: set[str] = set()


def subscribe(url: str, settings: Settings, **fields: object) -> str:
    with session_scope(url) as session:
        made = subscriptions.add(session, settings, None, SubscriptionIn.model_validate(fields)).id
    _MINE.add(made)
    return made


def send_until(sender: NotificationSender, done: Callable[[], bool], timeout_s: float = 120.0) -> None:
    """Run the sender's passes until ``done``; the timeout only keeps a broken build from hanging."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "the notifications were not sent"
        sender.run_once()
        time.sleep(0.01)


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The Standard Webhooks check, written from the spec: v1 and base64 HMAC-SHA256 of id.ts.body."""
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(secret.encode(), signed, hashlib.sha256).digest()).decode()
    given = [s.removeprefix("v1,") for s in headers["webhook-signature"].split() if s.startswith("v1,")]
    fresh = abs(time.time() - int(headers["webhook-timestamp"])) < 300
    return fresh and any(hmac.compare_digest(expected, g) for g in given)


def pending(url: str) -> int:
    """This module's notifications still pending."""
    mine = (Notification.status == NotificationStatus.PENDING, Notification.subscription_id.in_(_MINE))
    with session_scope(url) as session:
        return session.scalar(select(func.count()).where(*mine)) or 0


def test_each_event_reaches_a_signed_webhook_once_after_its_commit(
    url: str, settings: Settings, receiver: tuple[HookReceiver, str]
) -> None:
    hooks, base = receiver
    project_id = make_project(url)
    subscription_id = subscribe(url, settings, medium="webhook", target=f"{base}/hook", secret=HMAC_SECRET)
    # Given a pause, a resume (not a notifiable type), a worker's budget warning and the end
    with session_scope(url) as session:
        out = Outbox(session)
        project = session.get_one(Project, project_id)
        transitions.pause(out, project, PauseReason.USER, "paused by <@U123>")
        out.event(project_id, ProjectResumed(by="me"))
    with session_scope(url) as session:
        events.record(session, project_id, BudgetWarning(spent_usd=Decimal(4), limit_usd=Decimal(5)))
    with session_scope(url) as session:
        transitions.end(Outbox(session), session.get_one(Project, project_id), ProjectCompleted(tasks=1))
    # When two senders run at once, over and over
    senders = [NotificationSender(settings, url) for _ in range(2)]
    threads = [threading.Thread(target=send_until, args=(s, lambda: pending(url) == 0)) for s in senders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for sender in senders:
        sender.run_once()
    # Then each of the three notifiable events arrived once, signed, and the resume not at all
    types = [json.loads(r.body)["type"] for r in hooks.received]
    assert sorted(types) == ["budget_warning", "project_completed", "project_paused"]
    assert len(set(hooks.ids())) == 3
    assert all(verify(HMAC_SECRET, r.headers, r.body) for r in hooks.received)
    assert not any(verify("another key", r.headers, r.body) for r in hooks.received)
    paused = next(json.loads(r.body)["data"] for r in hooks.received if b"project_paused" in r.body)
    assert paused["event"] == {"reason": "user", "message": "paused by <@U123>"}
    assert paused["dashboard_url"].endswith(f"/projects/{project_id}")
    # And the secret is stored sealed, and in no event
    with session_scope(url) as session:
        sealed = session.get_one(Subscription, subscription_id).secret_encrypted
        stored = [json.dumps(d) for d in session.scalars(select(Event.data))]
    assert HMAC_SECRET not in sealed
    assert not any(HMAC_SECRET in data for data in stored)


def test_a_receiver_that_answers_500_three_times_gets_it_on_the_fourth_attempt(
    url: str, settings: Settings, receiver: tuple[HookReceiver, str]
) -> None:
    hooks, base = receiver
    hooks.fail(500, 500, 500)
    project_id = make_project(url)
    subscription_id = subscribe(url, settings, medium="webhook", target=f"{base}/hook", secret=HMAC_SECRET)
    with session_scope(url) as session:
        reason = ProjectFailed(reason="boom", task="t1")
        transitions.end(Outbox(session), session.get_one(Project, project_id), reason)
    send_until(NotificationSender(settings, url), lambda: pending(url) == 0)
    # Four attempts of the same notification: the same id, the same body, each signed
    assert len(hooks.received) == 4
    assert len(set(hooks.ids())) == 1
    assert len({r.body for r in hooks.received}) == 1
    assert all(verify(HMAC_SECRET, r.headers, r.body) for r in hooks.received)
    with session_scope(url) as session:
        row = session.scalars(
            select(Notification).where(Notification.subscription_id == subscription_id)
        ).one()
        subscription = session.get_one(Subscription, subscription_id)
    assert (row.status, row.attempts) == (NotificationStatus.SENT, 4)
    assert (subscription.status, subscription.consecutive_failures) == (SubscriptionStatus.ACTIVE, 0)


def test_nothing_is_sent_for_a_rolled_back_transition(
    url: str, settings: Settings, receiver: tuple[HookReceiver, str]
) -> None:
    hooks, base = receiver
    project_id = make_project(url)
    subscribe(url, settings, medium="webhook", target=f"{base}/hook", secret=HMAC_SECRET)

    # Given a transaction that ends the project, then fails before its commit
    def transition_that_fails() -> None:
        with session_scope(url) as session:
            transitions.end(Outbox(session), session.get_one(Project, project_id), ProjectCompleted(tasks=1))
            session.flush()
            msg = "the transition fails after its event was recorded"
            raise RuntimeError(msg)

    with pytest.raises(RuntimeError):
        transition_that_fails()
    # Then no notification was kept, and the senders send nothing
    with session_scope(url) as session:
        kept = session.scalar(select(func.count()).where(Notification.project_id == project_id))
        status = session.get_one(Project, project_id).status
    assert (kept, status) == (0, ProjectStatus.RUNNING)
    NotificationSender(settings, url).run_once()
    assert hooks.received == []


def test_a_dead_endpoint_is_paused_after_n_failures_and_the_listing_says_so(
    url: str, settings: Settings, receiver: tuple[HookReceiver, str]
) -> None:
    hooks, base = receiver
    hooks.fail(*[503] * 100)
    settings = settings.model_copy(update={"notify_pause_after": 3})
    project_id = make_project(url)
    subscription_id = subscribe(url, settings, medium="webhook", target=f"{base}/hook", secret=HMAC_SECRET)
    with session_scope(url) as session:
        transitions.end(Outbox(session), session.get_one(Project, project_id), ProjectCompleted(tasks=1))
    sender = NotificationSender(settings, url)

    def paused() -> bool:
        with session_scope(url) as session:
            return session.get_one(Subscription, subscription_id).status is SubscriptionStatus.FAILING

    send_until(sender, paused)
    for _ in range(5):  # a paused endpoint is not tried again, however often the sender passes
        sender.run_once()
    assert len(hooks.received) == 3
    with session_scope(url) as session:
        (listed,) = [s for s in subscriptions.listing(session, None) if s.id == subscription_id]
    assert listed.state == "paused: 3 failed attempts in a row (last: HTTP 503 Service Unavailable)"
    assert listed.pending == 1
    # When it is resumed (the endpoint is back), the pending notification goes out
    hooks.answers.clear()
    with session_scope(url) as session:
        subscriptions.set_paused(session, None, subscription_id, paused=False)
    send_until(sender, lambda: pending(url) == 0)
    assert len(hooks.received) == 4
    assert len(set(hooks.ids())) == 1


def test_a_sender_that_dies_mid_attempt_drops_nothing(
    url: str, settings: Settings, receiver: tuple[HookReceiver, str]
) -> None:
    hooks, base = receiver
    project_id = make_project(url)
    subscribe(url, settings, medium="webhook", target=f"{base}/hook", secret=HMAC_SECRET)
    with session_scope(url) as session:
        transitions.end(Outbox(session), session.get_one(Project, project_id), ProjectCompleted(tasks=1))
        notification_id = session.scalars(
            select(Notification.id).where(Notification.project_id == project_id)
        ).one()
    # Given a sender that claimed the notification and died before sending it
    assert NotificationSender(settings, url, lease_s=0.2).claim(notification_id) == 1
    # Then another sender leaves it while the claim holds, and sends it once the claim lapsed
    survivor = NotificationSender(settings, url)
    assert survivor.attempt(notification_id) is False
    send_until(survivor, lambda: pending(url) == 0)
    assert hooks.ids() == [notification_id]


def test_a_notification_waits_for_its_projects_pull_request_and_links_it(
    url: str, settings: Settings, receiver: tuple[HookReceiver, str]
) -> None:
    hooks, base = receiver
    project_id = make_project(url)
    subscribe(
        url, settings, medium="webhook", target=f"{base}/hook", secret=HMAC_SECRET, project_id=project_id
    )
    # Given a project that ends while its delivery (the pull request) is still pending
    with session_scope(url) as session:
        delivery = Delivery(
            project_id=project_id, key="project", kind=DeliveryKind.PROJECT, remote="https://x", branch="b",
            status=DeliveryStatus.PENDING, round=1, noted_round=0, attempts=0, created_at=utcnow(),
        )  # fmt: skip
        session.add(delivery)
        transitions.end(Outbox(session), session.get_one(Project, project_id), ProjectCompleted(tasks=1))
    sender = NotificationSender(settings, url)
    # Then nothing is sent while it is pending
    assert sender.run_once() == 0
    assert hooks.received == []
    # When the pull request is open, the notification goes out and links it
    with session_scope(url) as session:
        row = session.get_one(Delivery, delivery.id)
        row.status, row.pull_request_url = DeliveryStatus.DELIVERED, "https://git.example.org/o/r/pull/3"
    send_until(sender, lambda: pending(url) == 0)
    (received,) = hooks.received
    assert json.loads(received.body)["data"]["pull_request_url"] == "https://git.example.org/o/r/pull/3"
