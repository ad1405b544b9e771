"""Signed approval links (issue #25 point 2: "a signed link in the notification").

The notification of ``approval_waiting`` carries an approve and a reject URL, signed with the
server's key and an expiry. Opened with no session, a link shows what it decides and a button;
its POST decides the approval once. A forged, altered, expired or reused link answers a page
saying so and changes nothing. Real Postgres, the coordinator's state machine, the real
notification sender posting to a webhook receiver on loopback, the app served by uvicorn.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr
from sqlalchemy import delete, select

from orchestrator.api import create_app
from orchestrator.dashboard import mount_dashboard
from orchestrator.notify import subscriptions
from orchestrator.notify.sender import NotificationSender
from orchestrator.notify.subscriptions import SubscriptionIn
from orchestrator.scheduling.approval_links import LinkSigner
from shared import events
from shared.db import session_scope
from shared.events import RedisBus
from shared.models import Approval, ApprovalStatus, Project, ProjectStatus, Subscription, utcnow
from shared.settings import Settings, get_settings
from tests.support.coordinator import Coordinator
from tests.support.dashboard import Server
from tests.support.engine import RecordingDispatcher
from tests.support.receivers import HookReceiver, serve_receiver
from tests.support.records import event_log

pytestmark = pytest.mark.integration


@dataclass
class Site:
    server: Server
    settings: Settings
    hooks: HookReceiver
    hook_url: str


@pytest.fixture
def site(services: dict[str, str], tmp_path: Path) -> Iterator[Site]:
    settings = get_settings().model_copy(
        update={
            "data_dir": tmp_path / "data",
            "secret_key": SecretStr(Fernet.generate_key().decode()),
            "approval_link_secret": SecretStr(secrets.token_hex(16)),
        }
    )
    server = Server(
        mount_dashboard(create_app(settings, RecordingDispatcher(), RedisBus(settings.redis_url)))
    )
    server.start()
    with serve_receiver() as (hooks, base):
        yield Site(server, settings.model_copy(update={"coordinator_url": server.url}), hooks, f"{base}/hook")
    server.stop()


def waiting_diff(site: Site, **approvals: object) -> tuple[str, str]:
    """A project whose finished work waits for approval, notified to the site's webhook; its id
    and the notification's ``data``."""
    with session_scope() as session:
        subscription = subscriptions.add(
            session,
            site.settings,
            None,
            SubscriptionIn(medium="webhook", target=site.hook_url, secret="k", events=["approval_waiting"]),
        )
    try:
        coordinator = Coordinator()
        project_id = coordinator.start(approvals={"diff": True, **approvals})
        coordinator.run_next(completed=True)
        sender = NotificationSender(site.settings)
        deadline = time.monotonic() + 30
        while not (mine := [r for r in site.hooks.received if project_id.encode() in r.body]):
            assert time.monotonic() < deadline, "the approval_waiting notification was not sent"
            sender.run_once()
            time.sleep(0.02)
    finally:
        with session_scope() as session:
            session.execute(delete(Subscription).where(Subscription.id == subscription.id))
    return project_id, json.loads(mine[0].body)["data"]


def approval_of(project_id: str) -> Approval:
    with session_scope() as session:
        return session.scalars(select(Approval).where(Approval.project_id == project_id)).one()


def status(project_id: str) -> ProjectStatus:
    with session_scope() as session:
        return session.get_one(Project, project_id).status


@pytest.fixture
def browser() -> Iterator[httpx.Client]:
    """An HTTP client with no session cookie, ever."""
    with httpx.Client(timeout=10) as client:
        yield client


def test_a_signed_link_decides_once_without_a_session_and_bad_links_change_nothing(
    site: Site, browser: httpx.Client
) -> None:
    # Given a project waiting for its diff's approval, and the notification that says so
    project_id, data = waiting_diff(site)
    approve_url, reject_url = data["approve_url"], data["reject_url"]
    assert approve_url.startswith(f"{site.server.url}/approvals/link/")
    assert reject_url.startswith(f"{site.server.url}/approvals/link/")
    approval = approval_of(project_id)
    # When the link is opened (a GET: what a mail scanner does too)
    page = browser.get(approve_url)
    # Then it shows what it decides and a button, and decides nothing
    assert page.status_code == 200
    assert "approve the work before delivery" in page.text
    assert ">Approve</button>" in page.text
    assert approval_of(project_id).status == ApprovalStatus.WAITING
    # When links are forged, altered, signed by another key, or expired
    token = approve_url.rsplit("/", 1)[1]
    approval_id, _action, expires, signature = token.split(".")
    other = LinkSigner.of(site.settings.model_copy(update={"approval_link_secret": SecretStr("not ours")}))
    expired = LinkSigner.of(site.settings).sign(approval_id, "approve", utcnow() - timedelta(seconds=1))
    bad = {
        "altered signature": f"{approval_id}.approve.{expires}.{signature[:-2]}AA",
        "reject turned approve": f"{approval_id}.approve.{expires}.{reject_url.rsplit('.', 1)[1]}",
        "later expiry": f"{approval_id}.approve.{int(expires) + 3600}.{signature}",
        "another key": other.sign(approval_id, "approve", utcnow() + timedelta(hours=1)),
        "garbage": "not-a-token",
    }
    for why, forged in bad.items():
        for answer in (
            browser.get(f"{site.server.url}/approvals/link/{forged}"),
            browser.post(f"{site.server.url}/approvals/link/{forged}", data={"comment": "x"}),
        ):
            assert answer.status_code == 401, why
            assert "this approval link is not valid" in answer.text, why
    for answer in (
        browser.get(f"{site.server.url}/approvals/link/{expired}"),
        browser.post(f"{site.server.url}/approvals/link/{expired}"),
    ):
        assert answer.status_code == 401
        assert "this approval link has expired" in answer.text
    # Then nothing changed
    assert approval_of(project_id).status == ApprovalStatus.WAITING
    assert status(project_id) == ProjectStatus.WAITING_FOR_APPROVAL
    # When the real link's button is pressed, with a comment
    done = browser.post(approve_url, data={"comment": "ship it"})
    # Then it is approved, once, by the link, and the project completes
    assert done.status_code == 200, done.text
    assert "approved" in done.text
    decided = approval_of(project_id)
    assert (decided.id, decided.status, decided.decided_by, decided.comment) == (
        approval.id,
        ApprovalStatus.APPROVED,
        "signed link",
        "ship it",
    )
    assert status(project_id) == ProjectStatus.COMPLETED
    # And the link, or its reject twin, used again is refused saying what happened
    for answer in (browser.post(approve_url), browser.post(reject_url), browser.get(reject_url)):
        assert answer.status_code == 409
        assert "diff#1" in answer.text
        assert "approved by signed link" in answer.text
    assert len(event_log(project_id, events.APPROVAL_DECIDED)) == 1
    assert approval_of(project_id).status == ApprovalStatus.APPROVED


def test_a_rejecting_link_sends_the_work_back(site: Site, browser: httpx.Client) -> None:
    project_id, data = waiting_diff(site)
    answer = browser.post(data["reject_url"], data={"comment": "add a test"})
    assert answer.status_code == 200, answer.text
    decided = approval_of(project_id)
    assert (decided.status, decided.comment) == (ApprovalStatus.REJECTED, "add a test")
    assert status(project_id) == ProjectStatus.RUNNING


def test_an_approval_with_named_approvers_gets_no_link(site: Site) -> None:
    # A link names no one, so it cannot stand for one of the named approvers
    _project_id, data = waiting_diff(site, approvers=["token:bob"])
    assert (data["approve_url"], data["reject_url"]) == (None, None)
