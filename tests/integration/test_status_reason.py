"""A project's reason, its code and its words, each said once (issue #22): the API and ``--json``
give them as two fields (``pause_reason``, ``status_reason``), and every view — ``raas status``,
the dashboard's project header, the MCP status tool — shows each once. Real Postgres and Redis;
the coordinator's app (API and dashboard) served by uvicorn."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from orchestrator.api import create_app
from orchestrator.api.tenants import authenticate, create_tenant
from orchestrator.cli import app
from orchestrator.cli.client import ApiClient
from orchestrator.dashboard import DashboardOptions, mount_dashboard
from orchestrator.mcp.backends import HttpBackend
from orchestrator.mcp.tools import call, tools_for
from shared.db import session_scope
from shared.events import RedisBus
from shared.models import PauseReason, Project, ProjectStatus, utcnow
from shared.settings import get_settings
from tests.support.dashboard import Server
from tests.support.engine import RecordingDispatcher

pytestmark = [pytest.mark.integration]
CODE = "budget_exceeded"
WORDS = "spent $0.1012 of $0.10"


@dataclass
class Coordinator:
    url: str
    token: str
    project_id: str
    client: ApiClient


@pytest.fixture
def paused(services: dict[str, str], tmp_path: Path) -> Iterator[Coordinator]:
    """A coordinator and a tenant's project paused for its budget."""
    settings = get_settings().model_copy(update={"data_dir": tmp_path / "data"})
    options = DashboardOptions(workers=lambda: [], flower_url=None)
    server = Server(
        mount_dashboard(create_app(settings, RecordingDispatcher(), RedisBus(settings.redis_url)), options)
    )
    server.start()
    _, token = create_tenant(f"reason-{secrets.token_hex(4)}")
    with session_scope() as session:
        project = Project(
            name="p",
            prompt="x",
            config={},
            status=ProjectStatus.PAUSED,
            pause_reason=PauseReason.BUDGET_EXCEEDED,
            status_reason=WORDS,
            tenant_id=authenticate(token, "-").tenant_id,
            created_at=utcnow(),
        )
        session.add(project)
        session.flush()
        project_id = project.id
    client = ApiClient(server.url, token)
    try:
        yield Coordinator(server.url, token, project_id, client)
    finally:
        client.close()
        server.stop()


def test_the_api_and_json_give_the_code_and_the_words_as_two_fields(
    paused: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = paused.client.project(paused.project_id)
    assert (shown["pause_reason"], shown["status_reason"]) == (CODE, WORDS)

    monkeypatch.setattr("orchestrator.cli.projects.api", lambda: paused.client)
    result = CliRunner().invoke(app, ["status", paused.project_id, "--json"])
    assert result.exit_code == 0, result.output
    said = json.loads(result.output)
    assert (said["pause_reason"], said["status_reason"]) == (CODE, WORDS)


def test_every_view_shows_the_code_once_and_the_words_once(
    paused: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # raas status: one line, "paused (budget_exceeded: spent …)"
    monkeypatch.setattr("orchestrator.cli.projects.api", lambda: paused.client)
    result = CliRunner().invoke(app, ["status", paused.project_id])
    assert result.exit_code == 0, result.output
    assert f"status: paused ({CODE}: {WORDS})" in " ".join(result.output.split())
    assert result.output.count(CODE) == 1

    # The dashboard's project header: the code's badge, then the words
    with httpx.Client(base_url=paused.url, timeout=10) as browser:
        assert browser.post("/login", data={"token": paused.token, "next": "/"}).status_code == 303
        header = browser.get(f"/ui/projects/{paused.project_id}/header")
    assert header.status_code == 200, header.text
    assert header.text.count(CODE) == 1, header.text
    assert f'<span class="badge">{CODE}</span> {WORDS}</p>' in header.text

    # The MCP status tool: the two fields, each once
    answer, is_error = call(
        tools_for(True), HttpBackend(paused.client), "project_status", {"project_id": paused.project_id}
    )
    assert not is_error, answer
    assert answer.count(CODE) == 1, answer
    assert answer.count(WORDS) == 1, answer
