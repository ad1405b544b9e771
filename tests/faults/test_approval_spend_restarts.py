"""The spend-threshold approval survives restarts (issue #25 point 2: "durable, exactly once"). A
project whose spend passed ``[approvals] spend_usd`` holds its next iteration for a person across a
SIGKILLed coordinator and a Redis restarted empty: nothing runs meanwhile, no second approval is
written; a person's ``raas approve`` lets the loop run to completion, once. The distributed stack:
a coordinator process, a worker process, Postgres, Redis, the scripted model.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable

import pytest
from sqlalchemy import select

from shared import events
from shared.db import session_scope
from shared.models import Approval, Event, Iteration, Project, ProjectStatus
from tests.support.faults import PrivateRedis, Rig, ralph_script, wait_until, write_project

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]


def _rows(rig: Rig, project_id: str) -> tuple[ProjectStatus, int, list[str], int]:
    """Its status, its iterations, its approvals' keys and its approval_decided events."""
    with session_scope(rig.database_url) as session:
        status = session.get_one(Project, project_id).status
        ran = len(session.scalars(select(Iteration.id).where(Iteration.project_id == project_id)).all())
        keys = list(session.scalars(select(Approval.key).where(Approval.project_id == project_id)))
        decided = session.scalars(
            select(Event.id).where(Event.project_id == project_id, Event.type == events.APPROVAL_DECIDED)
        ).all()
    return status, ran, keys, len(decided)


@pytest.mark.timeout(300)
def test_a_spend_approval_survives_a_coordinator_and_a_redis_restart(
    make_rig: Callable[..., Rig], private_redis: PrivateRedis, database_url: str
) -> None:
    # Given a project whose first iteration's calls pass a tiny spend threshold
    rig = make_rig(ralph_script(3), database_url=database_url, workers=1)
    directory = write_project(rig.work_dir / "project-spend")
    with (directory / "raas.toml").open("a") as toml:
        toml.write('\n[approvals]\nspend_usd = 0.0001\ndeadline_s = 3600\ndefault = "reject"\n')
    submitted = rig.stack.cli("submit", str(directory), "--json")
    assert submitted.returncode == 0, submitted.stderr + rig.explain()
    project_id: str = json.loads(submitted.stdout)["id"]
    rig.projects.append(project_id)
    wait_until(
        lambda: _rows(rig, project_id)[0] == ProjectStatus.WAITING_FOR_APPROVAL, 120, "the spend approval"
    )
    status, ran, keys, _ = _rows(rig, project_id)
    assert keys == ["spend#1"]

    # When the coordinator is SIGKILLed and started again, then Redis is killed and started empty
    rig.kill("coordinator", signal.SIGKILL)
    rig.start_coordinator()
    private_redis.kill(signal.SIGKILL)
    private_redis.start()
    time.sleep(3)  # a few reconcile passes (1 s here) of the restarted coordinator

    # Then it still waits, one approval, nothing run meanwhile
    assert _rows(rig, project_id) == (ProjectStatus.WAITING_FOR_APPROVAL, ran, ["spend#1"], 0), rig.explain()
    # And a person's approval lets it run to completion, without asking again
    approved = rig.stack.cli("approve", project_id, "-m", "go on")
    assert approved.returncode == 0, approved.stderr + rig.explain()
    assert rig.wait_settled(project_id) == ProjectStatus.COMPLETED
    status, after, keys, decided = _rows(rig, project_id)
    assert (keys, decided) == (["spend#1"], 1)
    assert after > ran
