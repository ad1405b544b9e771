"""The dashboard over HTTP, without a browser: who may see and do what (sessions, tenants,
CSRF, Origin), the headers every answer carries, the projects list's pages, and the event
stream's resumption from Last-Event-ID. Real Postgres and Redis; the app served by uvicorn."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from fastapi.routing import APIRoute

from orchestrator.api import create_app
from orchestrator.api.tenants import authenticate, create_tenant
from orchestrator.dashboard import DashboardOptions, actions, mount_dashboard, pages, stream
from orchestrator.dashboard.sessions import COOKIE
from orchestrator.queries.workers import WorkerInfo
from orchestrator.scheduling.advance import advance
from shared import events
from shared.db import session_scope
from shared.event_payloads import AgentOutputChunk, ProjectStarted
from shared.events import RedisBus
from shared.models import Agent, Iteration, IterationStatus, Project, ProjectStatus, utcnow
from shared.settings import get_settings
from tests.support.dashboard import Server
from tests.support.engine import RecordingDispatcher

pytestmark = [pytest.mark.integration]


@dataclass
class Site:
    server: Server
    bus: RedisBus
    token: str
    tenant_id: str
    other_token: str
    other_tenant_id: str
    clients: list[httpx.Client] = field(default_factory=list)

    def client(self, token: str | None = None, cookies: dict[str, str] | None = None) -> httpx.Client:
        """A client of the site, signed in with ``token`` (none: not signed in); closed at the end."""
        client = httpx.Client(base_url=self.server.url, timeout=10, cookies=cookies)
        self.clients.append(client)
        if token is not None:
            answer = client.post("/login", data={"token": token, "next": "/"})
            assert answer.status_code == 303, answer.text
        return client


@pytest.fixture
def site(services: dict[str, str], tmp_path: Path) -> Iterator[Site]:
    settings = get_settings().model_copy(update={"data_dir": tmp_path / "data"})
    bus = RedisBus(settings.redis_url)
    workers = [WorkerInfo(name="w0@host", queues=["iterations"], concurrency=2, active=[])]
    options = DashboardOptions(workers=lambda: workers, flower_url="javascript:alert(1)", heartbeat_s=0.3)
    server = Server(mount_dashboard(create_app(settings, RecordingDispatcher(), bus), options))
    server.start()
    suffix = secrets.token_hex(4)
    _, token = create_tenant(f"dash-int-a-{suffix}")
    _, other = create_tenant(f"dash-int-b-{suffix}")
    made = Site(
        server,
        bus,
        token,
        str(authenticate(token, "-").tenant_id),
        other,
        str(authenticate(other, "-").tenant_id),
    )
    yield made
    for client in made.clients:
        client.close()
    server.stop()


def _project(tenant_id: str | None, status: ProjectStatus = ProjectStatus.RUNNING, name: str = "p") -> str:
    with session_scope() as session:
        project = Project(
            name=name, prompt="x", config={}, status=status, tenant_id=tenant_id, created_at=utcnow()
        )
        session.add(project)
        session.flush()
        return project.id


def _status(project_id: str) -> ProjectStatus:
    with session_scope() as session:
        return session.get_one(Project, project_id).status


def _csrf(client: httpx.Client, project_id: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', client.get(f"/projects/{project_id}").text)
    assert found is not None
    return found.group(1)


def test_every_dashboard_route_but_sign_in_needs_a_session(site: Site) -> None:
    client = site.client()
    routes = [r for router in (pages.router, actions.router, stream.router) for r in router.routes]
    checked = 0
    for route in routes:
        assert isinstance(route, APIRoute)
        if route.path == "/login":
            continue
        path = route.path.replace("{project_id}", "p1").replace("{agent_id}", "a1").replace("{verb}", "pause")
        for method in route.methods or set():
            answer = client.request(method, path, follow_redirects=False)
            if method == "GET" and not path.startswith("/ui/"):
                assert answer.status_code == 303, path
                assert answer.headers["location"].startswith("/login")
            else:
                assert answer.status_code == 401, (method, path)
            checked += 1
    assert checked >= 12


def test_signing_in_sets_an_httponly_same_site_strict_cookie_and_a_wrong_token_is_refused(site: Site) -> None:
    client = site.client()
    refused = client.post("/login", data={"token": "raas_wrong", "next": "/"})
    assert refused.status_code == 401
    assert "missing or wrong API token" in refused.text
    answer = client.post("/login", data={"token": site.token, "next": "//elsewhere.example/x"})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/"  # never another site
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "samesite=strict" in cookie.lower()
    forged = site.client(cookies={COOKIE: client.cookies[COOKIE][:-2] + "xx"})
    assert forged.get("/", follow_redirects=False).status_code == 303


def test_a_tenant_sees_its_own_projects_only_and_another_tenants_answers_the_404_page(site: Site) -> None:
    mine, theirs = _project(site.tenant_id, name="mine-1"), _project(site.other_tenant_id, name="theirs-1")
    client = site.client(site.token)
    listed = client.get("/").text
    assert f'data-project="{mine}"' in listed
    assert theirs not in listed
    for path in (f"/projects/{theirs}", f"/projects/{secrets.token_hex(8)}"):
        page = client.get(path)
        assert page.status_code == 404
        assert "no project" in page.text
        assert "<h1>404" in page.text
    assert client.get(f"/ui/projects/{theirs}/graph.json").status_code == 404
    assert client.get(f"/ui/projects/{theirs}/costs").status_code == 404
    csrf = _csrf(client, mine)
    answer = client.post(f"/ui/projects/{theirs}/actions/pause", data={"csrf": csrf})
    assert answer.status_code == 404
    assert _status(theirs) == ProjectStatus.RUNNING


def test_an_action_needs_the_sessions_csrf_token_and_this_origin_and_says_why_it_is_refused(
    site: Site,
) -> None:
    project_id = _project(site.tenant_id)
    client = site.client(site.token)
    # Given no token, another session's token, or another origin: refused, nothing changed
    assert client.post(f"/ui/projects/{project_id}/actions/pause").status_code == 403
    other = site.client(site.token)
    stale = _csrf(other, project_id)
    csrf = _csrf(client, project_id)
    assert stale != csrf
    assert client.post(f"/ui/projects/{project_id}/actions/pause", data={"csrf": stale}).status_code == 403
    foreign = client.post(
        f"/ui/projects/{project_id}/actions/pause",
        data={"csrf": csrf},
        headers={"origin": "http://elsewhere.example"},
    )
    assert foreign.status_code == 403
    assert _status(project_id) == ProjectStatus.RUNNING
    # When the token comes in the header (as htmx sends it), the action is done
    paused = client.post(f"/ui/projects/{project_id}/actions/pause", headers={"x-csrf-token": csrf})
    assert paused.status_code == 200
    assert "paused" in paused.text
    assert _status(project_id) == ProjectStatus.PAUSED
    # And one not allowed now answers the core's one-line message, changing nothing
    again = client.post(f"/ui/projects/{project_id}/actions/pause", data={"csrf": csrf})
    assert again.status_code == 409
    assert "only a running project can be paused" in again.text
    negative = client.post(
        f"/ui/projects/{project_id}/actions/budget", data={"csrf": csrf, "limit_usd": "-1"}
    )
    assert negative.status_code == 422
    assert "is not a positive amount of USD" in negative.text
    with session_scope() as session:
        assert [e.type for e in events.history(session, project_id)] == [events.PROJECT_PAUSED]


def test_every_answer_carries_the_csp_and_static_files_are_cached_for_a_year(site: Site) -> None:
    client = site.client(site.token)
    page = client.get("/")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self';" in csp
    assert "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    assert page.headers["x-frame-options"] == "DENY"
    scripts = re.findall(r'<script src="([^"]+)"', page.text)
    assert scripts
    assert "<script>" not in page.text  # no inline script anywhere
    for src in scripts:
        asset = client.get(src)
        assert asset.status_code == 200
        assert asset.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert client.get("/healthz").json() == {"status": "ok"}  # the API keeps its paths
    assert client.get("/v1/projects").status_code == 401  # and its bearer token


def test_the_projects_list_pages_through_every_project_once_and_filters_by_status(site: Site) -> None:
    made = {_project(site.tenant_id, name=f"page-{i}") for i in range(30)}
    paused = _project(site.tenant_id, ProjectStatus.PAUSED, name="paused-one")
    client = site.client(site.token)
    seen: list[str] = []
    url = "/"
    while url:
        text = client.get(url).text
        seen += re.findall(r'<tr class="project-row[^"]*" data-project="(\w+)"', text)
        found = re.search(r'id="next-page" href="([^"]+)"', text)
        url = found.group(1).replace("&amp;", "&") if found else ""
    assert len(seen) == len(set(seen))
    assert made | {paused} <= set(seen)
    filtered = client.get("/?status=paused").text
    assert re.findall(r'data-project="(\w+)"', filtered) == [paused]


def test_the_workers_page_is_the_operators_and_links_flower_only_over_http(site: Site) -> None:
    cluster = site.client(get_settings().api_token.get_secret_value())
    page = cluster.get("/workers").text
    assert "w0@host" in page
    assert "javascript:" not in page  # the configured URL is not http(s): no link
    tenants = site.client(site.token).get("/workers").text
    assert "w0@host" not in tenants
    assert "needs the operators&#39; token" in tenants  # (escaped, as all text)


def _read_events(lines: Iterator[str], until_seq: int) -> tuple[list[int], int]:
    """The seqs of the events in an SSE stream's messages up to ``until_seq``, and how many
    messages carried them."""
    seqs: list[int] = []
    ids: list[int] = []
    for line in lines:
        if line.startswith("id: "):
            ids.append(int(line[4:]))
        if line.startswith("data: "):
            seqs += [e["seq"] for e in json.loads(line[6:])]
            assert ids[-1] == seqs[-1]  # a message's id is its last event's seq
            if seqs[-1] >= until_seq:
                break
    return seqs, len(ids)


def test_the_event_stream_resumes_after_last_event_id_then_goes_live_with_no_gap_or_repeat(
    site: Site,
) -> None:
    project_id = _project(site.tenant_id)
    for _ in range(5):
        events.emit(site.bus, project_id, ProjectStarted(workflow="ralph"))
    client = site.client(site.token)
    url = f"/ui/projects/{project_id}/events"
    with client.stream("GET", url, headers={"Last-Event-ID": "2"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()
        history, _ = _read_events(lines, 5)
        # When a burst of 40 output chunks is committed at once, then published
        with session_scope() as session:
            burst = [events.record(session, project_id, AgentOutputChunk(text="x")) for _ in range(40)]
        for event in burst:
            site.bus.publish(event)
        live, messages = _read_events(lines, 45)
    # Then every event came, once, in order, and the output was coalesced into a few messages
    assert history == [3, 4, 5]
    assert live == list(range(6, 46))
    assert messages <= 10


def test_the_state_says_it_is_settling_while_an_ended_iteration_waits_for_the_coordinator(site: Site) -> None:
    # An advance changes rows (an agent done, its parent scheduled) and publishes no event of its
    # own: the page reads the state again while it says so, or it shows the agent still working.
    project_id = _project(site.tenant_id, status=ProjectStatus.PAUSED)
    with session_scope() as session:
        agent = Agent(project_id=project_id, category="searcher", created_at=utcnow())
        session.add(agent)
        session.flush()
        ended = Iteration(
            project_id=project_id,
            agent_id=agent.id,
            number=1,
            status=IterationStatus.SUCCEEDED,
            created_at=utcnow(),
            finished_at=utcnow(),
        )
        session.add(ended)
        session.flush()
        iteration_id = ended.id
    client = site.client(site.token)
    url = f"/ui/projects/{project_id}/state.json"
    assert client.get(url).json()["project"]["settling"] is True
    advance(project_id, iteration_id, RecordingDispatcher(), site.bus)
    assert client.get(url).json()["project"]["settling"] is False


def test_an_idle_stream_gets_heartbeats(site: Site) -> None:
    project_id = _project(site.tenant_id)
    client = site.client(site.token)
    with client.stream("GET", f"/ui/projects/{project_id}/events") as response:
        comments = 0
        for line in response.iter_lines():
            if line.startswith(":"):
                comments += 1
            if comments == 2:
                break
    assert comments == 2


def test_an_iterations_files_are_marked_new_deleted_renamed_or_modified(tmp_path: Path) -> None:
    from orchestrator.queries.agents import changed_files
    from shared.git import git

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "old.txt").write_text("a fairly long line that git can follow when it moves\n" * 5)
    (repo / "gone.txt").write_text("bye\n")
    (repo / "kept.txt").write_text("1\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "old.txt").rename(repo / "moved.txt")
    (repo / "gone.txt").unlink()
    (repo / "kept.txt").write_text("2\n")
    (repo / "<img src=x onerror=alert(1)>.txt").write_text("new\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "work")
    files = {(f.change, f.path, f.old_path) for f in changed_files(repo, base, "HEAD")}
    assert files == {
        ("renamed", "moved.txt", "old.txt"),
        ("deleted", "gone.txt", None),
        ("modified", "kept.txt", None),
        ("new", "<img src=x onerror=alert(1)>.txt", None),
    }
