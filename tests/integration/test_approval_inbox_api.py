"""What waits for me, from the API and the CLI (``GET /v1/approvals``, ``raas approvals``): the
caller's waiting approvals (project, what, deadline, default), the soonest deadline first, never
another tenant's; the cluster's token sees all. Postgres, the API on uvicorn, the real CLI.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from orchestrator.api import create_app
from orchestrator.api.tenants import authenticate, create_tenant
from shared.db import session_scope
from shared.events import RedisBus
from shared.models import Project
from shared.settings import Settings, get_settings
from tests.support.coordinator import Coordinator
from tests.support.dashboard import Server
from tests.support.engine import RecordingDispatcher
from tests.support.stack import RAAS

pytestmark = pytest.mark.integration


@pytest.fixture
def served(services: dict[str, str], tmp_path: Path) -> Iterator[tuple[Server, Settings]]:
    settings = get_settings().model_copy(update={"data_dir": tmp_path / "data"})
    server = Server(create_app(settings, RecordingDispatcher(), RedisBus(settings.redis_url)))
    server.start()
    yield server, settings
    server.stop()


def waiting(coordinator: Coordinator, tenant_id: str, deadline_s: int) -> str:
    project_id = coordinator.start(approvals={"diff": True, "deadline_s": deadline_s, "default": "approve"})
    with session_scope() as session:
        session.get_one(Project, project_id).tenant_id = tenant_id
    coordinator.run_next(completed=True)
    return project_id


def listing(server: Server, token: str) -> list[dict[str, object]]:
    answer = httpx.get(f"{server.url}/v1/approvals", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert answer.status_code == 200, answer.text
    listed: list[dict[str, object]] = answer.json()
    return listed


def test_what_waits_for_me_is_mine_soonest_deadline_first(served: tuple[Server, Settings]) -> None:
    server, settings = served
    suffix = secrets.token_hex(4)
    mine, theirs, idle = (create_tenant(f"waits-{who}-{suffix}")[1] for who in ("me", "them", "idle"))
    me, them = (str(authenticate(t, "-").tenant_id) for t in (mine, theirs))
    coordinator = Coordinator()
    later = waiting(coordinator, me, 7200)
    sooner = waiting(coordinator, me, 600)
    other = waiting(coordinator, them, 60)
    # Then each tenant sees its own, the soonest deadline first; the cluster sees all three
    assert [(i["project_id"], i["key"], i["default_action"]) for i in listing(server, mine)] == [
        (sooner, "diff#1", "approve"),
        (later, "diff#1", "approve"),
    ]
    assert [i["project_id"] for i in listing(server, theirs)] == [other]
    assert listing(server, idle) == []
    everyone = [i["project_id"] for i in listing(server, settings.api_token.get_secret_value())]
    assert {sooner, later, other} <= set(everyone)
    # And the CLI prints them one a line
    env = {**os.environ, "RAAS_COORDINATOR_URL": server.url, "RAAS_API_TOKEN": mine}
    shown = subprocess.run(
        [*RAAS, "approvals"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [sooner, later]
    assert all("approve the work before delivery" in line and "then approve)" in line for line in lines)
    env["RAAS_API_TOKEN"] = idle
    nothing = subprocess.run(
        [*RAAS, "approvals"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert (nothing.returncode, nothing.stdout) == (0, "nothing waits for you\n")
