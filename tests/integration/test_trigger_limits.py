"""A trigger's limits and its policy for a busy subject (issue #24, points 3 and 6), over real HTTP
on loopback against the session's Postgres: ``on_active = "queue"`` and ``"restart"``, runs per
hour and per day, and the tenant's total. A refused run is a failed project carrying
``trigger_refused``, never started.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from orchestrator.api.tenants import create_tenant
from orchestrator.scheduling import lifecycle
from orchestrator.triggers.clock import TriggerClock
from orchestrator.triggers.start import start_run
from shared.archive import pack_files
from shared.db import session_scope
from shared.events import NullBus
from shared.models import Event, Project, ProjectStatus, RunStatus, TriggerRun, new_id, utcnow
from tests.support.triggers import SECRET, World, labeled_issue, trigger_world

pytestmark = [pytest.mark.integration]


@pytest.fixture
def world(database_url: str, tmp_path: Path) -> Iterator[World]:
    with trigger_world(tmp_path) as world:
        yield world


def _run(run_id: str) -> TriggerRun:
    with session_scope() as session:
        run = session.get_one(TriggerRun, run_id)
        session.expunge(run)
    return run


def _status(project_id: str | None) -> ProjectStatus:
    with session_scope() as session:
        return session.get_one(Project, project_id).status


def _refusal(run_id: str) -> str:
    """The reason the refused run's project carries in its one event, ``trigger_refused``."""
    run = _run(run_id)
    assert run.status is RunStatus.REFUSED
    with session_scope() as session:
        project = session.get_one(Project, run.project_id)
        events = session.scalars(select(Event).where(Event.project_id == project.id)).all()
        assert (project.status, project.started_at) == (ProjectStatus.FAILED, None)
        assert [e.type for e in events] == ["trigger_refused"]
        assert SECRET not in str(events[0].data)
        return str(events[0].data["reason"])


def _hook_spec(**limits: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "hook", "source": "webhook", "secret": SECRET}
    return {**spec, "template": {"prompt": "Work.\n"}, "limits": {"max_concurrent": 10, **limits}}


def test_on_active_queue_starts_the_second_run_when_the_first_ends(world: World) -> None:
    trigger = world.add_trigger({**world.github_spec(), "on_active": "queue"})
    first = world.deliver(trigger["id"], labeled_issue(7, "raas"), "gh-1").json()["run"]
    assert world.start(first) is RunStatus.STARTED
    # Given a second label on issue 7 while its run is active
    second = world.deliver(trigger["id"], labeled_issue(7, "raas"), "gh-2").json()["run"]
    # Then it waits, and a retry while the first is active still waits
    assert world.start(second) is RunStatus.QUEUED
    assert world.start(second) is RunStatus.QUEUED
    assert _run(second).project_id is None
    # When the first run ends, the clock's next pass sends the queued run, which starts
    lifecycle.stop_project(_run(first).project_id or "", world.coordinator.dispatcher, NullBus())
    assert second in TriggerClock(world.launcher).tick()
    assert world.start(second) is RunStatus.STARTED
    assert _run(second).project_id not in (None, _run(first).project_id)


def test_on_active_restart_stops_the_active_run_and_starts_a_new_one(world: World) -> None:
    trigger = world.add_trigger({**world.github_spec(), "on_active": "restart"})
    first = world.deliver(trigger["id"], labeled_issue(7, "raas"), "gh-1").json()["run"]
    assert world.start(first) is RunStatus.STARTED
    old = _run(first).project_id
    # When a second label on issue 7 arrives while its run is active
    second = world.deliver(trigger["id"], labeled_issue(7, "raas"), "gh-2").json()["run"]
    assert world.start(second) is RunStatus.STARTED
    # Then the first run's project is stopped and the second has its own, running
    new = _run(second).project_id
    assert new not in (None, old)
    assert _status(old) is ProjectStatus.STOPPED
    assert _status(new) is ProjectStatus.RUNNING
    # and a copy of the second's launch restarts nothing more
    assert world.start(second) is RunStatus.STARTED
    assert _status(new) is ProjectStatus.RUNNING


def test_runs_per_hour_and_per_day_refuse_with_trigger_refused(world: World) -> None:
    trigger = world.add_trigger(_hook_spec(runs_per_hour=1, runs_per_day=2))
    runs = [world.deliver_hook(trigger["id"], {"n": n}, f"m-{n}").json()["run"] for n in range(4)]
    now = utcnow()

    def start(run_id: str, ago: timedelta) -> RunStatus:
        return start_run(run_id, world.settings, world.coordinator.dispatcher, NullBus(), now=now - ago)

    # Given one run started three hours ago and one 100 minutes ago (one per hour: allowed)
    assert start(runs[0], timedelta(hours=3)) is RunStatus.STARTED
    assert start(runs[1], timedelta(minutes=100)) is RunStatus.STARTED
    # When a third comes 70 minutes after the second: refused by the day's count
    assert start(runs[2], timedelta(minutes=30)) is RunStatus.REFUSED
    assert _refusal(runs[2]) == "2 runs started in the last day (runs_per_day = 2)"
    # and one within the hour of another is refused by the hour's count (checked first)
    with session_scope() as session:
        session.get_one(TriggerRun, runs[1]).started_at = now - timedelta(minutes=20)
    assert start(runs[3], timedelta(0)) is RunStatus.REFUSED
    assert _refusal(runs[3]) == "1 runs started in the last hour (runs_per_hour = 1)"
    # and a refused run stays refused when its launch comes again
    assert start(runs[3], timedelta(0)) is RunStatus.REFUSED


def test_the_tenants_projects_per_hour_limit_refuses_a_triggers_run(world: World) -> None:
    # Given a tenant that may create two projects an hour, with a trigger of its own
    _tenant, token = create_tenant(f"t-{new_id()}", submissions_per_hour=2)
    tenant = httpx.Client(base_url=str(world.http.base_url), headers={"Authorization": f"Bearer {token}"})
    with tenant:
        created = tenant.post("/v1/triggers", json=_hook_spec())
        assert created.status_code == 201, created.text
        trigger = created.json()
        # and one project it submitted itself
        body = tenant.post(
            "/v1/projects",
            content=pack_files({"PROMPT.md": "By hand.\n"}),
            headers={"Content-Type": "application/gzip"},
        )
        assert body.status_code == 201, body.text
        # When two deliveries come: the first run is its second project, the next is over the limit
        runs = [world.deliver_hook(trigger["id"], {"n": n}, f"m-{n}").json()["run"] for n in range(2)]
        assert world.start(runs[0]) is RunStatus.STARTED
        assert world.start(runs[1]) is RunStatus.REFUSED
        assert _refusal(runs[1]) == "the tenant created 2 projects in the last hour (limit 2)"
        # and the trigger's projects (raas ls --trigger) are its tenant's, the refused one too
        listed = tenant.get(f"/v1/triggers/{trigger['name']}/projects").json()
        assert {p["id"] for p in listed} == {_run(r).project_id for r in runs}


def test_refused_runs_do_not_use_up_the_tenants_projects_per_hour(world: World) -> None:
    # Given a tenant that may create two projects an hour, whose trigger allows one run an hour
    _tenant, token = create_tenant(f"t-{new_id()}", submissions_per_hour=2)
    tenant = httpx.Client(base_url=str(world.http.base_url), headers={"Authorization": f"Bearer {token}"})
    with tenant:
        trigger = tenant.post("/v1/triggers", json=_hook_spec(runs_per_hour=1)).json()
        runs = [world.deliver_hook(trigger["id"], {"n": n}, f"m-{n}").json()["run"] for n in range(4)]
        # When one run starts and three are refused (each a failed project, never started)
        assert [world.start(r) for r in runs] == [RunStatus.STARTED] + [RunStatus.REFUSED] * 3
        # Then the tenant has made one project this hour: it may still submit one by hand
        upload = {
            "content": pack_files({"PROMPT.md": "By hand.\n"}),
            "headers": {"Content-Type": "application/gzip"},
        }
        assert tenant.post("/v1/projects", **upload).status_code == 201
        assert tenant.post("/v1/projects", **upload).status_code == 429
