"""Tenancy and auth: every route but the public ones needs a token; a tenant sees only its projects
(another tenant's id answers 404, like an unknown one); submissions are rate-limited per tenant;
tokens are stored hashed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from fastapi.routing import APIRoute, iter_route_contexts
from sqlalchemy import select
from starlette.routing import BaseRoute, Mount, Route

from orchestrator.api import PUBLIC_PATHS, create_app
from orchestrator.api.tenants import create_tenant
from shared.db import session_scope
from shared.events import RedisBus
from shared.models import ApiToken
from shared.settings import get_settings
from tests.support.engine import Engine, RecordingDispatcher, engine, pack, serve_app

pytestmark = [pytest.mark.integration, pytest.mark.docker]

IDLE = {"responses": [{"content": [{"type": "text", "text": "idle"}]}], "when_exhausted": "repeat_last"}


_OPEN: list[httpx.Client] = []


@pytest.fixture
def eng(services: dict[str, str], tmp_path: Path) -> Iterator[Engine]:
    with engine(IDLE, tmp_path) as running:
        yield running
        while _OPEN:
            _OPEN.pop().close()


def _client(eng: Engine, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    client = httpx.Client(base_url=eng.settings.coordinator_url, headers=headers, timeout=20)
    _OPEN.append(client)
    return client


def _submit(client: httpx.Client) -> httpx.Response:
    body = pack({"PROMPT.md": "Do it.\n", "raas.toml": ""})
    return client.post("/v1/projects", content=body, params={"name": "t"})


def _served(routes: Sequence[BaseRoute], prefix: str = "") -> Iterator[tuple[str, str, str]]:
    """(method, path as declared, a concrete path to call) for every route the app serves.

    Walks the app's routes themselves (through included routers, as FastAPI's own schema
    generation does), not the schema: routes outside it (``/openapi.json``, ``/metrics``, a
    mounted app or static files) are served all the same.
    """
    for context in iter_route_contexts(routes):
        route, path = context.original_route, prefix + (context.path or "")
        if isinstance(route, Mount):
            if route.routes:
                yield from _served(route.routes, path)
            else:  # an app or static files: anything under it
                yield "GET", path, f"{path}/x"
        elif isinstance(route, Route | APIRoute):
            for method in sorted(context.methods or ()):
                yield method, path, re.sub(r"\{[^}]+\}", "x", path)
        else:
            pytest.fail(f"{route!r}: a kind of route this test cannot call; teach it")


def test_every_route_the_app_serves_needs_a_token_but_the_public_ones(
    services: dict[str, str], tmp_path: Path
) -> None:
    # Given the coordinator's app, served as create_app builds it
    settings = get_settings().model_copy(update={"data_dir": tmp_path / "data"})
    app = create_app(settings, RecordingDispatcher(), RedisBus(settings.redis_url))
    served = list(_served(app.routes))
    assert {path for _, path, _ in served} >= PUBLIC_PATHS  # the list names nothing stale
    with serve_app(app) as url, httpx.Client(base_url=url, timeout=20) as anonymous:
        # When every route is called without a token
        for method, path, concrete in served:
            response = anonymous.request(method, concrete)
            # Then only the public ones answer, and every other one is a 401 saying what to do
            if path in PUBLIC_PATHS:
                assert response.status_code != 401, (method, path)
                assert response.status_code < 500, (method, path, response.status_code)
            else:
                assert response.status_code == 401, (method, path, response.status_code)
                assert "API token" in response.json()["detail"]
        # And no catch-all answers a path no route declares
        for stray in ("/", "/docs", "/redoc", "/v1", "/v1/nothing", "/static/x"):
            assert anonymous.get(stray).status_code in (401, 404), stray
    assert {("GET", "/openapi.json"), ("POST", "/mcp")} <= {(method, path) for method, path, _ in served}
    assert len(served) >= 20


def test_the_schema_is_served_with_a_token_and_the_docs_pages_are_off(eng: Engine) -> None:
    cluster = _client(eng, eng.settings.api_token.get_secret_value())
    _, tenant_token = create_tenant(f"reader-{eng.tmp.name}")
    assert cluster.get("/openapi.json").json()["info"]["title"] == "Constellation coordinator"
    assert _client(eng, tenant_token).get("/openapi.json").status_code == 200
    for page in ("/docs", "/redoc"):
        assert cluster.get(page).status_code == 404


def test_a_tenant_sees_only_its_own_projects(eng: Engine) -> None:
    _, token_a = create_tenant(f"alpha-{eng.tmp.name}")
    _, token_b = create_tenant(f"beta-{eng.tmp.name}")
    alpha, beta = _client(eng, token_a), _client(eng, token_b)
    mine = _submit(alpha).json()["id"]

    assert alpha.get(f"/v1/projects/{mine}").status_code == 200
    theirs = beta.get(f"/v1/projects/{mine}")
    unknown = beta.get("/v1/projects/doesnotexist")
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.json()["detail"] == unknown.json()["detail"].replace("doesnotexist", mine)
    for verb in ("start", "pause", "stop"):
        assert beta.post(f"/v1/projects/{mine}/{verb}").status_code == 404
    assert beta.get(f"/v1/projects/{mine}/workspace.bundle").status_code == 404
    assert [p["id"] for p in beta.get("/v1/projects").json()] == []
    assert [p["id"] for p in alpha.get("/v1/projects").json()] == [mine]
    # the cluster's own token (operators, workers) sees it
    cluster = _client(eng, eng.settings.api_token.get_secret_value())
    assert cluster.get(f"/v1/projects/{mine}").status_code == 200


def test_submissions_are_rate_limited_per_tenant(eng: Engine) -> None:
    _, token = create_tenant(f"busy-{eng.tmp.name}", submissions_per_hour=2)
    _, other_token = create_tenant(f"calm-{eng.tmp.name}", submissions_per_hour=2)
    busy = _client(eng, token)
    assert [_submit(busy).status_code for _ in range(2)] == [201, 201]
    refused = _submit(busy)
    assert refused.status_code == 429
    assert "limit 2" in refused.json()["detail"]
    assert _submit(_client(eng, other_token)).status_code == 201  # another tenant is not affected


def test_tokens_are_stored_only_as_hashes(eng: Engine) -> None:
    tenant_id, token = create_tenant(f"hashed-{eng.tmp.name}")
    with session_scope() as session:
        stored = session.scalars(select(ApiToken.token_sha256).where(ApiToken.tenant_id == tenant_id)).all()
    assert len(stored) == 1
    assert token not in stored[0]
    assert len(stored[0]) == 64
    assert _client(eng, token).get("/v1/projects").status_code == 200
    assert _client(eng, stored[0]).get("/v1/projects").status_code == 401  # the hash is no token


def test_a_cluster_can_forbid_networked_sandboxes(services: dict[str, str], tmp_path: Path) -> None:
    with engine(IDLE, tmp_path, sandbox_network_allowed=False) as eng:
        client = _client(eng, eng.settings.api_token.get_secret_value())
        body = pack({"PROMPT.md": "Do it.\n", "raas.toml": "[sandbox]\nnetwork = true\n"})
        before = client.get("/v1/projects").json()
        refused = client.post("/v1/projects", content=body)
        assert refused.status_code == 422
        assert "network = true is not allowed on this cluster" in refused.json()["detail"]
        assert client.get("/v1/projects").json() == before
        client.close()
