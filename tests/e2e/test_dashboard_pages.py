"""The dashboard's screens for what other issues added (issue #28 point 6), in a real browser
(Debian's Chromium): a trigger's page with its runs, a subscription's delivery log, a project's
pull request rounds (round, cause, state, cost) — each the signed-in tenant's only, what senders
wrote shown as text — and signing out, after which a copied cookie gets 401 (point 5).

The rows are written as the services write them (triggers through their store, subscriptions
through theirs; runs, notifications, follows and rounds as rows); real Postgres, uvicorn.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet
from playwright.sync_api import Browser, Page, expect
from pydantic import SecretStr

from orchestrator.api import create_app
from orchestrator.api.tenants import authenticate, create_tenant
from orchestrator.dashboard import mount_dashboard
from orchestrator.dashboard.sessions import COOKIE
from orchestrator.notify import subscriptions
from orchestrator.notify.subscriptions import SubscriptionIn
from orchestrator.triggers import store
from shared.db import session_scope
from shared.events import RedisBus
from shared.models import (
    Delivery,
    DeliveryKind,
    FollowStatus,
    Notification,
    NotificationStatus,
    PrFollow,
    Project,
    ProjectStatus,
    PrRound,
    RunStatus,
    TriggerRun,
    utcnow,
)
from shared.settings import Settings, get_settings
from shared.triggers import TriggerSpec
from tests.support.dashboard import Server
from tests.support.engine import RecordingDispatcher

pytestmark = [pytest.mark.e2e]

HOSTILE = '<img src=x onerror="window.__xss = 1">'


@dataclass
class Site:
    server: Server
    settings: Settings
    token: str
    tenant_id: str
    other_tenant_id: str


@pytest.fixture
def site(services: dict[str, str], tmp_path: Path) -> Iterator[Site]:
    settings = get_settings().model_copy(
        update={"data_dir": tmp_path / "data", "secret_key": SecretStr(Fernet.generate_key().decode())}
    )
    server = Server(
        mount_dashboard(create_app(settings, RecordingDispatcher(), RedisBus(settings.redis_url)))
    )
    server.start()
    suffix = secrets.token_hex(4)
    _, token = create_tenant(f"dash-pages-a-{suffix}")
    _, other = create_tenant(f"dash-pages-b-{suffix}")
    yield Site(
        server,
        settings,
        token,
        str(authenticate(token, "-").tenant_id),
        str(authenticate(other, "-").tenant_id),
    )
    server.stop()


@pytest.fixture
def page(site: Site, browser: Browser) -> Iterator[Page]:
    opened = browser.new_page()
    opened.goto(site.server.url + "/login")
    opened.fill("#token", site.token)
    opened.click("#sign-in")
    opened.wait_for_url(site.server.url + "/")
    yield opened
    assert opened.evaluate("window.__xss") is None  # nothing a sender wrote ran
    opened.close()


def _project(tenant_id: str, spent: str = "0") -> str:
    with session_scope() as db:
        project = Project(
            name="p",
            prompt="x",
            config={},
            status=ProjectStatus.DELIVERED,
            tenant_id=tenant_id,
            spent_usd=Decimal(spent),
            created_at=utcnow(),
        )
        db.add(project)
        db.flush()
        return project.id


def _webhook_trigger(site: Site, tenant_id: str, name: str) -> str:
    spec = TriggerSpec.model_validate(
        {
            "name": name,
            "source": "webhook",
            "secret": "hook-secret-5b0c9e7d1a2f",
            "template": {"prompt": "do it"},
        }
    )
    return store.add_trigger(spec, tenant_id, site.settings).id


def test_a_triggers_page_lists_its_runs_with_what_each_made(site: Site, page: Page) -> None:
    # Given a trigger with a run that made a project and one refused, and another tenant's trigger
    trigger_id = _webhook_trigger(site, site.tenant_id, "deploys")
    theirs = _webhook_trigger(site, site.other_tenant_id, "theirs")
    made = _project(site.tenant_id)
    with session_scope() as db:
        now = utcnow()
        db.add(
            TriggerRun(
                trigger_id=trigger_id,
                key="d-1",
                subject="push to main",
                fields={},
                project_id=made,
                created_at=now,
            )
        )
        db.add(
            TriggerRun(
                trigger_id=trigger_id,
                key="d-2",
                subject=HOSTILE,
                fields={},
                status=RunStatus.REFUSED,
                reason="over the tenant's projects per hour",
                created_at=now + timedelta(seconds=1),
            )
        )
    # When the user opens it from the triggers list
    page.goto(site.server.url + "/triggers")
    page.click(f'tr[data-trigger="{trigger_id}"] a[href="/triggers/{trigger_id}"]')
    page.wait_for_url(f"{site.server.url}/triggers/{trigger_id}")
    # Then its runs are there, newest first, each with its project or why it made none
    expect(page.locator("h1")).to_have_text("Trigger deploys")
    rows = page.locator("#runs tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text(HOSTILE)  # as text
    expect(rows.nth(0).locator(".status")).to_have_text("refused")
    expect(rows.nth(0)).to_contain_text("over the tenant's projects per hour")
    expect(rows.nth(1).locator(f'a[href="/projects/{made}"]')).to_be_visible()
    # And another tenant's trigger is not found
    answer = page.goto(f"{site.server.url}/triggers/{theirs}")
    assert answer is not None
    assert answer.status == 404


def test_a_subscriptions_delivery_log_shows_each_notification_its_attempts_and_error(
    site: Site, page: Page
) -> None:
    # Given a Slack subscription with one notification sent and one still failing
    project_id = _project(site.tenant_id)
    with session_scope() as db:
        made = subscriptions.add(
            db,
            site.settings,
            site.tenant_id,
            SubscriptionIn(
                medium="slack",
                secret=SecretStr("https://hooks.slack.example/services/T0/B0/SECRET"),
                events=["project_failed", "project_completed"],
            ),
        )
        theirs = subscriptions.add(
            db,
            site.settings,
            site.other_tenant_id,
            SubscriptionIn(medium="slack", secret=SecretStr("https://hooks.slack.example/services/T1/B1/S")),
        )
        now = utcnow()
        common = {"subscription_id": made.id, "project_id": project_id, "payload": {}}
        db.add(
            Notification(
                **common,
                event_type="project_completed",
                event_key="e-1",
                status=NotificationStatus.SENT,
                attempts=1,
                next_attempt_at=now,
                created_at=now - timedelta(minutes=5),
                sent_at=now - timedelta(minutes=5),
            )
        )
        db.add(
            Notification(
                **common,
                event_type="project_failed",
                event_key="e-2",
                status=NotificationStatus.PENDING,
                attempts=3,
                last_error=f"slack answered 500: {HOSTILE}",
                next_attempt_at=now + timedelta(minutes=1),
                created_at=now,
            )
        )
    # When the user opens its log from the notifications list
    page.goto(site.server.url + "/notifications")
    page.click(f'tr[data-subscription="{made.id}"] a[href="/notifications/{made.id}"]')
    page.wait_for_url(f"{site.server.url}/notifications/{made.id}")
    # Then each notification is a row: newest first, its status, attempts and last error (as text)
    rows = page.locator("#delivery-log tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("project_failed")
    expect(rows.nth(0).locator(".status")).to_have_text("pending")
    expect(rows.nth(0).locator(".attempts")).to_have_text("3")
    expect(rows.nth(0).locator(".error")).to_have_text(f"slack answered 500: {HOSTILE}")
    expect(rows.nth(1).locator(".status")).to_have_text("sent")
    expect(page.locator("#subscription-summary")).not_to_contain_text("SECRET")
    # And another tenant's subscription is not found
    answer = page.goto(f"{site.server.url}/notifications/{theirs.id}")
    assert answer is not None
    assert answer.status == 404
    expect(page.locator("#not-found-message")).to_contain_text("no notification subscription")


def test_a_projects_pull_request_rounds_show_number_cause_state_and_cost(site: Site, page: Page) -> None:
    # Given a delivered project following its pull request, after a finished round and in a second
    project_id = _project(site.tenant_id, spent="0.3500")
    with session_scope() as db:
        delivery = Delivery(
            project_id=project_id,
            key="project",
            kind=DeliveryKind.PROJECT,
            remote="https://forge.example/acme/app.git",
            branch="raas/p",
            created_at=utcnow(),
        )
        db.add(delivery)
        db.flush()
        follow = PrFollow(
            project_id=project_id,
            delivery_id=delivery.id,
            repo="acme/app",
            pr_number=12,
            status=FollowStatus.IN_ROUND,
            rounds=2,
            spent_at_start_usd=Decimal("0.1"),
            created_at=utcnow(),
        )
        db.add(follow)
        db.flush()
        started = utcnow() - timedelta(minutes=10)
        db.add(
            PrRound(
                follow_id=follow.id,
                project_id=project_id,
                number=1,
                key="check:test:7",
                feedback={
                    "event": {
                        "kind": "check_failed",
                        "name": "test",
                        "run_id": "7",
                        "url": "javascript:alert(1)",
                    }
                },
                spent_at_start_usd=Decimal("0.1"),
                created_at=started,
                finished_at=started + timedelta(seconds=90),
            )
        )
        db.add(
            PrRound(
                follow_id=follow.id,
                project_id=project_id,
                number=2,
                key="review:r1",
                feedback={
                    "event": {
                        "kind": "review",
                        "review_id": "r1",
                        "state": "changes_requested",
                        "author": "maria",
                        "body": f"Please rename it. {HOSTILE}",
                        "comments": [{"path": "a.py", "line": 3, "body": "here"}],
                    }
                },
                spent_at_start_usd=Decimal("0.2"),
                created_at=started + timedelta(minutes=5),
            )
        )
    other = _project(site.other_tenant_id)
    # When the user opens the project's rounds
    page.goto(f"{site.server.url}/projects/{project_id}/rounds")
    # Then the pull request and each round: number, cause, state and cost
    expect(page.locator("#follow")).to_contain_text("acme/app #12")
    expect(page.locator("#follow .status")).to_have_text("in round")
    rows = page.locator("#rounds tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("check test failed (run 7)")
    expect(rows.nth(0).locator("a")).to_have_count(0)  # a link only to http(s)
    expect(rows.nth(0).locator(".state")).to_have_text("finished")
    expect(rows.nth(0).locator(".cost")).to_have_text("$0.1000")
    expect(rows.nth(1)).to_contain_text(
        f"review by maria (changes requested, 1 comments): Please rename it. {HOSTILE}"
    )
    expect(rows.nth(1).locator(".state")).to_have_text("in progress")
    expect(rows.nth(1).locator(".cost")).to_have_text("$0.1500")
    # And the project's graph has the pull request, then round 1, then round 2 (still working)
    page.goto(f"{site.server.url}/projects/{project_id}")
    page.wait_for_function("() => window.raasLive.cy() && window.raasLive.cy().getElementById('r:2').length")
    graph = page.evaluate(
        """() => { const cy = window.raasLive.cy();
                   return ["pr", "r:1", "r:2"].map((id) => [cy.getElementById(id).data("status"),
                           cy.getElementById(id).incomers("node").map((n) => n.id())]); }"""
    )
    assert graph == [["working", []], ["completed", ["pr"]], ["working", ["r:1"]]]
    label = page.evaluate("() => window.raasLive.cy().getElementById('r:2').data('label')")
    assert label.startswith("round 2 · $0.1500\nreview by maria")
    # And a project following no pull request says how one would; another tenant's is not found
    page.goto(f"{site.server.url}/projects/{_project(site.tenant_id)}/rounds")
    expect(page.locator("#no-follow")).to_contain_text("[delivery] follow")
    answer = page.goto(f"{site.server.url}/projects/{other}/rounds")
    assert answer is not None
    assert answer.status == 404


def test_signing_out_in_the_browser_leaves_a_copied_cookie_answering_401(site: Site, page: Page) -> None:
    # Given the session's cookie copied out of the signed-in browser
    copied = next(c["value"] for c in page.context.cookies() if c["name"] == COOKIE)
    with httpx.Client(base_url=site.server.url, timeout=10, cookies={COOKIE: copied}) as copy:
        assert copy.get("/ui/projects/rows").status_code == 200
        # When the user signs out
        page.click("header form.signout button")
        page.wait_for_url(site.server.url + "/login")
        # Then the copy gets 401, and the browser the sign-in page
        assert copy.get("/ui/projects/rows").status_code == 401
        page.goto(site.server.url + "/triggers")
        expect(page.locator("#sign-in")).to_be_visible()


def test_pausing_a_trigger_from_its_list_says_so_and_the_list_shows_it_paused(site: Site, page: Page) -> None:
    # Given a trigger of the signed-in tenant, on the triggers list
    trigger_id = _webhook_trigger(site, site.tenant_id, "nightly")
    page.goto(site.server.url + "/triggers")
    row = page.locator(f'tr[data-trigger="{trigger_id}"]')
    # When the user pauses it
    row.get_by_role("button", name="Pause").click()
    # Then the answer is shown beside the list (the list's own hx-select is not inherited by the
    # action's form, which would select the answer away), and the list reloads with it paused
    expect(page.locator("#trigger-msg")).to_contain_text("nightly")
    expect(
        page.locator(f'tr[data-trigger="{trigger_id}"]').get_by_role("button", name="Resume")
    ).to_be_visible()
    assert store.show_trigger(site.tenant_id, trigger_id).status.value == "paused"
