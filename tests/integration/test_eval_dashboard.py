"""The evals API and dashboard pages (issue #27) over HTTP: a tenant sees its own runs and their
matrix, never another tenant's; what an attempt's project wrote (an infra cause) is shown as text;
an upload with a config that does not parse is refused in one line and writes nothing. Real
Postgres; the app served by uvicorn."""

from __future__ import annotations

import io
import secrets
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select, update

from orchestrator.api import create_app
from orchestrator.api.tenants import authenticate, create_tenant
from orchestrator.dashboard import mount_dashboard
from orchestrator.evals.store import REQUEST_FILE, SUITE_DIR, ConfigIn, RunRequest
from shared.db import session_scope
from shared.events import RedisBus
from shared.models.evals import AttemptOutcome, AttemptState, EvalAttempt, EvalRun, EvalRunStatus
from shared.settings import get_settings
from tests.support.dashboard import Server
from tests.support.engine import RecordingDispatcher

pytestmark = [pytest.mark.integration]

SUITE = Path(__file__).resolve().parents[1] / "fixtures" / "evals" / "four"
HOSTILE = "<script>alert(1)</script>"


def _upload(configs: dict[str, str], k: int = 1) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(SUITE, arcname=SUITE_DIR)
        request = RunRequest(configs=[ConfigIn(name=n, toml=t) for n, t in configs.items()], k=k)
        data = request.model_dump_json().encode()
        info = tarfile.TarInfo(REQUEST_FILE)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def site(services: dict[str, str], tmp_path: Path) -> Iterator[tuple[Server, list[str]]]:
    settings = get_settings().model_copy(update={"data_dir": tmp_path / "data"})
    server = Server(
        mount_dashboard(create_app(settings, RecordingDispatcher(), RedisBus(settings.redis_url)))
    )
    server.start()
    suffix = secrets.token_hex(4)
    tokens = [create_tenant(f"dash-eval-{who}-{suffix}")[1] for who in "ab"]
    yield server, tokens
    server.stop()


def _post(server: Server, token: str, body: bytes) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/evals",
        content=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/gzip"},
        timeout=30,
    )


def test_a_tenant_sees_its_runs_matrix_and_not_another_tenants(site: tuple[Server, list[str]]) -> None:
    server, (token_a, token_b) = site
    # Given: tenant A's run, two of its attempts done (one resolved, one an infra failure).
    answer = _post(server, token_a, _upload({"one": "max_iterations = 1\n", "two": "max_iterations = 2\n"}))
    assert answer.status_code == 201, answer.text
    run_id = answer.json()["id"]
    with session_scope() as session:
        assert session.get_one(EvalRun, run_id).tenant_id == authenticate(token_a, "-").tenant_id
        for task, outcome, cause in (
            ("fix-bug", AttemptOutcome.RESOLVED, None),
            ("never", AttemptOutcome.INFRA, HOSTILE),
        ):
            session.execute(
                update(EvalAttempt)
                .where(
                    EvalAttempt.run_id == run_id, EvalAttempt.task_key == task, EvalAttempt.config == "two"
                )
                .values(state=AttemptState.DONE, outcome=outcome, infra_cause=cause)
            )
    # When: A looks at the evals pages; B at the same.
    with (
        httpx.Client(base_url=server.url, timeout=10) as a,
        httpx.Client(base_url=server.url, timeout=10) as b,
    ):
        assert a.post("/login", data={"token": token_a, "next": "/"}).status_code == 303
        assert b.post("/login", data={"token": token_b, "next": "/"}).status_code == 303
        listing = a.get("/evals")
        page = a.get(f"/evals/{run_id}")
        theirs = b.get("/evals")
        hidden = b.get(f"/evals/{run_id}")
    # Then: A's list and matrix show the run; the agent-side text is escaped; B sees nothing of it.
    assert listing.status_code == 200
    assert f'href="/evals/{run_id}"' in listing.text
    assert page.status_code == 200
    assert '<tr data-task="fix-bug"><td>fix-bug</td><td>easy</td><td>0/0</td><td>1/1</td></tr>' in page.text
    assert '<tr data-config="two"><td>two</td><td>1/2</td><td>50.0%</td>' in page.text
    assert HOSTILE not in page.text
    assert "two: 1× &lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "Did not run" not in page.text  # pending attempts are not "did not run": only paused ones
    assert run_id not in theirs.text
    assert hidden.status_code == 404
    api_b = httpx.get(f"{server.url}/v1/evals/{run_id}", headers={"Authorization": f"Bearer {token_b}"})
    assert api_b.status_code == 404
    for path in (f"/v1/evals/{run_id}/attempts", f"/v1/evals/compare?a={run_id}&b={run_id}"):
        assert (
            httpx.get(f"{server.url}{path}", headers={"Authorization": f"Bearer {token_b}"}).status_code
            == 404
        )
    # A's attempts listing has every attempt, the cause as data.
    listed = httpx.get(
        f"{server.url}/v1/evals/{run_id}/attempts", headers={"Authorization": f"Bearer {token_a}"}
    ).json()
    assert len(listed) == 8
    assert [(a["task"], a["outcome"], a["infra_cause"]) for a in listed if a["state"] == "done"] == [
        ("fix-bug", "resolved", None),
        ("never", "infra", HOSTILE),
    ]
    # No driver runs here; a later test's driver must not start this run's attempts.
    with session_scope() as session:
        session.execute(update(EvalRun).where(EvalRun.id == run_id).values(status=EvalRunStatus.PAUSED))


def test_an_upload_with_a_config_that_does_not_parse_is_refused_and_writes_nothing(
    site: tuple[Server, list[str]],
) -> None:
    server, (token_a, _) = site
    with session_scope() as session:
        before = session.scalar(select(func.count()).select_from(EvalRun))
    answer = _post(server, token_a, _upload({"good": "max_iterations = 1\n", "bad": "max_iterations = [\n"}))
    assert answer.status_code == 422
    assert answer.json()["detail"].startswith("config bad: not valid TOML")
    with session_scope() as session:
        assert session.scalar(select(func.count()).select_from(EvalRun)) == before
