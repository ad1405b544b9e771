"""The dashboard's triggers and notifications pages over HTTP: each lists only the signed-in
tenant's own, shows what a sender wrote as text, never shows a secret, and pauses and resumes
through the same core functions as the API, with the session's CSRF token. Real Postgres; the
app served by uvicorn."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet
from fastapi.routing import APIRoute
from pydantic import SecretStr

from orchestrator.api import create_app
from orchestrator.api.tenants import authenticate, create_tenant
from orchestrator.dashboard import mount_dashboard, notifications, triggers
from orchestrator.notify import subscriptions
from orchestrator.notify.subscriptions import SubscriptionIn
from orchestrator.triggers import store
from shared.db import session_scope
from shared.events import RedisBus
from shared.models import (
    Project,
    ProjectStatus,
    Subscription,
    SubscriptionStatus,
    TriggerRun,
    TriggerStatus,
    utcnow,
)
from shared.settings import Settings, get_settings
from shared.triggers import TriggerSpec
from tests.support.dashboard import Server
from tests.support.engine import RecordingDispatcher

pytestmark = [pytest.mark.integration]

HOSTILE = "<script>alert(1)</script>"
HOOK_SECRET = "hook-secret-5b0c9e7d1a2f"
SLACK_SECRET = "https://hooks.slack.example/services/T0/B0/SLACKSECRET77"


@dataclass
class Site:
    server: Server
    settings: Settings
    tenants: list[tuple[str, str]]
    """(token, tenant id): the first is signed in, the second is the other tenant."""
    clients: list[httpx.Client] = field(default_factory=list)

    def client(self, token: str) -> httpx.Client:
        client = httpx.Client(base_url=self.server.url, timeout=10)
        self.clients.append(client)
        assert client.post("/login", data={"token": token, "next": "/"}).status_code == 303
        return client


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
    tokens = [create_tenant(f"dash-trig-{who}-{suffix}")[1] for who in "ab"]
    made = Site(server, settings, [(t, str(authenticate(t, "-").tenant_id)) for t in tokens])
    yield made
    for client in made.clients:
        client.close()
    server.stop()


def _trigger(site: Site, tenant_id: str, name: str) -> str:
    """A webhook trigger (it has a secret) with one run that made a project."""
    spec = TriggerSpec.model_validate(
        {"name": name, "source": "webhook", "secret": HOOK_SECRET, "template": {"prompt": "do it"}}
    )
    trigger_id = store.add_trigger(spec, tenant_id, site.settings).id
    with session_scope() as session:
        project = Project(
            name="p",
            prompt="x",
            config={},
            status=ProjectStatus.RUNNING,
            tenant_id=tenant_id,
            created_at=utcnow(),
        )
        session.add(project)
        session.flush()
        session.add(
            TriggerRun(
                trigger_id=trigger_id,
                key=f"d-{name}",
                subject=HOSTILE,
                fields={},
                project_id=project.id,
                created_at=utcnow(),
            )
        )
    return trigger_id


def _schedule(site: Site, tenant_id: str, name: str) -> str:
    spec = TriggerSpec.model_validate(
        {"name": name, "source": "schedule", "schedule": {"cron": "0 3 * * *"}, "template": {"prompt": "x"}}
    )
    return store.add_trigger(spec, tenant_id, site.settings).id


def _slack(site: Site, tenant_id: str, *, failing: bool = False) -> str:
    with session_scope() as session:
        made = subscriptions.add(
            session,
            site.settings,
            tenant_id,
            SubscriptionIn(medium="slack", secret=SecretStr(SLACK_SECRET), events=["project_failed"]),
        )
        if failing:
            row = session.get_one(Subscription, made.id)
            row.status, row.consecutive_failures, row.last_error = SubscriptionStatus.FAILING, 5, HOSTILE
        return made.id


def _csrf(client: httpx.Client, page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', client.get(page).text)
    assert found is not None
    return found.group(1)


def _trigger_status(trigger_id: str) -> TriggerStatus:
    return store.show_trigger(None, trigger_id).status


def test_the_pages_and_actions_need_a_session(site: Site) -> None:
    client = httpx.Client(base_url=site.server.url, timeout=10)
    site.clients.append(client)
    for route in (*triggers.router.routes, *notifications.router.routes):
        assert isinstance(route, APIRoute)
        path = route.path.replace("{trigger_id}", "t1").replace("{subscription_id}", "s1")
        answer = client.request(next(iter(route.methods)), path.replace("{verb}", "pause"))
        assert answer.status_code == (401 if path.startswith("/ui/") else 303), path
        if not path.startswith("/ui/"):
            assert answer.headers["location"] == f"/login?next={path}"


def test_the_triggers_page_lists_the_tenants_own_as_text_with_links_and_no_secret(site: Site) -> None:
    (token, mine), (_, theirs) = site.tenants
    hook = _trigger(site, mine, "mine-hook")
    _schedule(site, mine, "mine-nightly")
    _trigger(site, theirs, "theirs-hook")
    page = site.client(token).get("/triggers")
    assert page.status_code == 200
    assert 'href="/triggers"' in page.text
    assert 'href="/notifications"' in page.text
    assert f'data-trigger="{hook}"' in page.text
    assert "mine-nightly" in page.text
    assert "03:00 UTC" in page.text
    assert "theirs-hook" not in page.text
    assert re.search(r'<a href="/projects/\w+">&lt;script&gt;', page.text)
    assert HOSTILE not in page.text
    assert HOOK_SECRET not in page.text


def test_a_trigger_pauses_and_resumes_with_the_csrf_token_only(site: Site) -> None:
    (token, mine), _ = site.tenants
    trigger_id = _schedule(site, mine, "nightly")
    client = site.client(token)
    # Given no token, or another origin: refused, nothing changed
    assert client.post(f"/ui/triggers/{trigger_id}/pause").status_code == 403
    csrf = _csrf(client, "/triggers")
    foreign = client.post(
        f"/ui/triggers/{trigger_id}/pause",
        data={"csrf": csrf},
        headers={"origin": "http://elsewhere.example"},
    )
    assert foreign.status_code == 403
    assert _trigger_status(trigger_id) is TriggerStatus.ACTIVE
    # When the token comes in the header (as htmx sends it): paused, and the list told to reload
    paused = client.post(f"/ui/triggers/{trigger_id}/pause", headers={"x-csrf-token": csrf})
    assert paused.status_code == 200
    assert "trigger nightly is paused" in paused.text
    assert paused.headers["hx-trigger"] == "triggers-changed"
    assert _trigger_status(trigger_id) is TriggerStatus.PAUSED
    assert f'hx-post="/ui/triggers/{trigger_id}/resume"' in client.get("/triggers").text
    # Then resumed from the form field
    assert client.post(f"/ui/triggers/{trigger_id}/resume", data={"csrf": csrf}).status_code == 200
    assert _trigger_status(trigger_id) is TriggerStatus.ACTIVE


def test_another_tenants_trigger_and_subscription_are_not_found_and_stay_as_they_are(site: Site) -> None:
    (token, _), (_, theirs) = site.tenants
    trigger_id, subscription_id = _schedule(site, theirs, "theirs"), _slack(site, theirs)
    client = site.client(token)
    csrf = _csrf(client, "/triggers")
    refused = client.post(f"/ui/triggers/{trigger_id}/pause", data={"csrf": csrf})
    assert refused.status_code == 404
    assert "no trigger" in refused.text
    assert _trigger_status(trigger_id) is TriggerStatus.ACTIVE
    refused = client.post(f"/ui/notifications/{subscription_id}/pause", data={"csrf": csrf})
    assert refused.status_code == 404
    with session_scope() as session:
        assert session.get_one(Subscription, subscription_id).status is SubscriptionStatus.ACTIVE


def test_the_notifications_page_shows_the_tenants_own_state_and_last_error_never_a_secret(site: Site) -> None:
    (token, mine), (_, theirs) = site.tenants
    failing, other = _slack(site, mine, failing=True), _slack(site, theirs)
    page = site.client(token).get("/notifications")
    assert page.status_code == 200
    assert f'data-subscription="{failing}"' in page.text
    assert other not in page.text
    assert "paused: 5 failed attempts in a row (last: &lt;script&gt;" in page.text
    assert "project_failed" in page.text
    assert HOSTILE not in page.text
    assert "SLACKSECRET77" not in page.text


def test_a_subscription_paused_after_failures_resumes_with_the_csrf_token_only(site: Site) -> None:
    (token, mine), _ = site.tenants
    subscription_id = _slack(site, mine, failing=True)
    client = site.client(token)
    assert client.post(f"/ui/notifications/{subscription_id}/resume").status_code == 403
    csrf = _csrf(client, "/notifications")
    resumed = client.post(f"/ui/notifications/{subscription_id}/resume", data={"csrf": csrf})
    assert resumed.status_code == 200
    assert resumed.headers["hx-trigger"] == "notifications-changed"
    with session_scope() as session:
        row = session.get_one(Subscription, subscription_id)
        assert (row.status, row.consecutive_failures) == (SubscriptionStatus.ACTIVE, 0)
    paused = client.post(f"/ui/notifications/{subscription_id}/pause", headers={"x-csrf-token": csrf})
    assert "is paused" in paused.text
    assert f'hx-post="/ui/notifications/{subscription_id}/resume"' in client.get("/notifications").text
