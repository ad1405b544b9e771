"""Dashboard sessions end (issue #28 point 5): signing out ends the session on the server, so a
copied cookie signs no one in; a session unused for longer than RAAS_DASHBOARD_IDLE_S, or older
than SESSION_S, is refused; a deleted API token ends its sessions. Real Postgres; the app served
by uvicorn; the session rows read and aged in the database itself."""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import delete, update

from orchestrator.api import create_app
from orchestrator.api.tenants import authenticate, create_tenant, token_hash
from orchestrator.dashboard import DashboardOptions, mount_dashboard
from orchestrator.dashboard.sessions import COOKIE, SESSION_S, _row_id, read_session
from shared.db import session_scope
from shared.errors import SignInRequired
from shared.events import RedisBus
from shared.models import ApiToken, Project, utcnow
from shared.models.tenancy import DashboardSession
from shared.settings import get_settings
from tests.support.dashboard import Server
from tests.support.engine import RecordingDispatcher

pytestmark = [pytest.mark.integration]


@pytest.fixture
def server(services: dict[str, str], tmp_path: Path) -> Iterator[Server]:
    settings = get_settings().model_copy(update={"data_dir": tmp_path / "data"})
    app = create_app(settings, RecordingDispatcher(), RedisBus(settings.redis_url))
    running = Server(mount_dashboard(app, DashboardOptions(heartbeat_s=0.3)))
    running.start()
    yield running
    running.stop()


@pytest.fixture
def token() -> str:
    _, made = create_tenant(f"dash-sessions-{secrets.token_hex(4)}")
    return made


@contextmanager
def _signed_in(url: str, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=10) as client:
        answer = client.post("/login", data={"token": token, "next": "/"})
        assert answer.status_code == 303, answer.text
        yield client


def _csrf(client: httpx.Client) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', client.get("/").text)
    assert found is not None
    return found.group(1)


def _age(cookie: str, **ago: timedelta) -> None:
    """Move the session's times back, as if it had been made or used that long ago."""
    with session_scope() as db:
        values = {name: utcnow() - delta for name, delta in ago.items()}
        db.execute(update(DashboardSession).where(DashboardSession.id == _row_id(cookie)).values(**values))


def test_signing_out_ends_the_session_on_the_server_so_a_copied_cookie_gets_401(
    server: Server, token: str
) -> None:
    # Given a signed-in browser whose cookie was copied elsewhere
    with _signed_in(server.url, token) as browser:
        cookie = browser.cookies[COOKIE]
        with httpx.Client(base_url=server.url, timeout=10, cookies={COOKIE: cookie}) as copy:
            assert copy.get("/").status_code == 200
            # When the browser signs out
            out = browser.post("/logout", data={"csrf": _csrf(browser)})
            assert out.status_code == 303
            assert out.headers["location"] == "/login"
            # Then the copy is refused: a fragment with 401, a page with the sign-in page
            refused = copy.get("/ui/projects/rows")
            assert refused.status_code == 401
            assert refused.text == "sign in with your API token"
            page = copy.get("/triggers")
            assert page.status_code == 303
            assert page.headers["location"].startswith("/login")
    with session_scope() as db:
        assert db.get(DashboardSession, _row_id(cookie)) is None


def test_signing_out_needs_the_sessions_csrf_token(server: Server, token: str) -> None:
    with _signed_in(server.url, token) as browser:
        assert browser.post("/logout", data={"csrf": "forged"}).status_code == 403
        assert browser.get("/").status_code == 200  # still signed in


def test_a_session_idle_longer_than_the_setting_is_refused_and_one_in_use_is_kept(
    server: Server, token: str
) -> None:
    idle = timedelta(seconds=get_settings().dashboard_idle_s)
    with _signed_in(server.url, token) as used, _signed_in(server.url, token) as idle_one:
        # Given one session last used just inside the idle time, the other just past it
        _age(used.cookies[COOKIE], last_seen_at=idle - timedelta(seconds=30))
        _age(idle_one.cookies[COOKIE], last_seen_at=idle + timedelta(seconds=1))
        # Then the first still answers, and its use is noted (it is not idle any more)
        assert used.get("/ui/projects/rows").status_code == 200
        with session_scope() as db:
            row = db.get_one(DashboardSession, _row_id(used.cookies[COOKIE]))
            assert utcnow() - row.last_seen_at < timedelta(seconds=30)
        # And the idle one asks to sign in again, its row gone
        assert idle_one.get("/ui/projects/rows").status_code == 401
        assert idle_one.get("/").headers["location"] == "/login?next=/"
        with session_scope() as db:
            assert db.get(DashboardSession, _row_id(idle_one.cookies[COOKIE])) is None


def test_a_session_older_than_its_lifetime_is_refused_however_busy(server: Server, token: str) -> None:
    with _signed_in(server.url, token) as client:
        _age(client.cookies[COOKIE], created_at=timedelta(seconds=SESSION_S + 1))
        assert client.get("/ui/projects/rows").status_code == 401


def test_the_idle_time_is_the_one_given(services: dict[str, str], token: str) -> None:
    # Given a session signed in now, with RAAS_DASHBOARD_IDLE_S's role played by idle_s
    from orchestrator.dashboard.sessions import sign_in

    cluster = get_settings().api_token.get_secret_value()
    cookie = sign_in(token, cluster)
    later = utcnow() + timedelta(seconds=100)
    # Then 100 s later it holds with 101 s of idle time, and is refused (and gone) with 99 s
    assert read_session(cookie, cluster, now=later, idle_s=101).principal.tenant_id is not None
    with pytest.raises(SignInRequired):
        read_session(cookie, cluster, now=later + timedelta(seconds=100), idle_s=99)
    with pytest.raises(SignInRequired):
        read_session(cookie, cluster, idle_s=10_000)


def test_deleting_the_api_token_ends_its_sessions(server: Server, token: str) -> None:
    with _signed_in(server.url, token) as client:
        assert client.get("/ui/projects/rows").status_code == 200
        with session_scope() as db:
            db.execute(delete(ApiToken).where(ApiToken.token_sha256 == token_hash(token)))
        assert client.get("/ui/projects/rows").status_code == 401


def test_the_database_holds_no_usable_cookie(server: Server, token: str) -> None:
    with _signed_in(server.url, token) as client:
        cookie = client.cookies[COOKIE]
        with session_scope() as db:
            rows = db.query(DashboardSession).filter(DashboardSession.id == _row_id(cookie)).all()
            assert len(rows) == 1
            assert cookie not in (rows[0].id, rows[0].token_sha256)


def test_signing_out_ends_the_sessions_open_stream_and_its_reconnection_gets_401(
    server: Server, token: str
) -> None:
    # Given a signed-in page following one of its tenant's projects
    tenant_id = authenticate(token, "-").tenant_id
    with session_scope() as db:
        project = Project(name="p", prompt="x", config={}, tenant_id=tenant_id, created_at=utcnow())
        db.add(project)
        db.flush()
        project_id = project.id
    with _signed_in(server.url, token) as browser:
        path = f"/ui/projects/{project_id}/events"
        opened, ended, lines = threading.Event(), threading.Event(), []

        def read() -> None:
            with browser.stream("GET", path, timeout=httpx.Timeout(10, read=None)) as answer:
                for line in answer.iter_lines():
                    lines.append(line)
                    opened.set()
            ended.set()

        threading.Thread(target=read, daemon=True).start()
        assert opened.wait(10)
        cookie = browser.cookies[COOKIE]
        # When the session is signed out (from the same browser, as the page's button does)
        assert browser.post("/logout", data={"csrf": _csrf(browser)}).status_code == 303
        # Then the server ends the stream, and the browser's reconnection is refused
        assert ended.wait(30)
        assert lines[0] == "retry: 1000"
        with httpx.Client(base_url=server.url, timeout=10, cookies={COOKIE: cookie}) as again:
            assert again.get(path).status_code == 401
