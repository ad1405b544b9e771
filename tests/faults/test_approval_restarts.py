"""An approval survives restarts (issue #25, point 2; DESIGN.md rule 12): it is a row, not a
process. A project waiting for its diff's approval is left waiting across a SIGKILLed coordinator
and a Redis restarted empty, holding no worker; a person's ``raas approve`` then completes it.
A deadline that passes while the coordinator is down is applied once by the restarted
coordinator's reconcile loop.
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
from shared.models import Approval, ApprovalStatus, Event, Iteration, Project, ProjectStatus
from tests.support.faults import PrivateRedis, Rig, ralph_script, wait_until, write_project

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]


def _submit(rig: Rig, approvals: str) -> str:
    directory = write_project(rig.work_dir / f"project-{len(rig.projects)}")
    with (directory / "raas.toml").open("a") as toml:
        toml.write(f"\n[approvals]\ndiff = true\n{approvals}")
    submitted = rig.stack.cli("submit", str(directory), "--json")
    assert submitted.returncode == 0, submitted.stderr + rig.explain()
    project_id: str = json.loads(submitted.stdout)["id"]
    rig.projects.append(project_id)
    return project_id


def _status(rig: Rig, project_id: str) -> ProjectStatus:
    with session_scope(rig.database_url) as session:
        return session.get_one(Project, project_id).status


def _waiting(rig: Rig, project_id: str) -> None:
    wait_until(
        lambda: _status(rig, project_id) == ProjectStatus.WAITING_FOR_APPROVAL, 120, "the approval to wait"
    )


def _decided(rig: Rig, project_id: str) -> list[Event]:
    with session_scope(rig.database_url) as session:
        query = select(Event).where(Event.project_id == project_id, Event.type == events.APPROVAL_DECIDED)
        return list(session.scalars(query))


def _iterations(rig: Rig, project_id: str) -> int:
    with session_scope(rig.database_url) as session:
        return len(session.scalars(select(Iteration.id).where(Iteration.project_id == project_id)).all())


@pytest.mark.timeout(240)
def test_an_approval_survives_a_coordinator_and_a_redis_restart(
    make_rig: Callable[..., Rig], private_redis: PrivateRedis, database_url: str
) -> None:
    # Given a project whose finished work waits for approval (a deadline far away)
    rig = make_rig(ralph_script(1), database_url=database_url, workers=1)
    project_id = _submit(rig, 'deadline_s = 3600\ndefault = "reject"\n')
    _waiting(rig, project_id)
    ran = _iterations(rig, project_id)

    # When the coordinator is SIGKILLed and started again, then Redis is killed and started empty
    rig.kill("coordinator", signal.SIGKILL)
    rig.start_coordinator()
    private_redis.kill(signal.SIGKILL)
    private_redis.start()
    time.sleep(3)  # a few reconcile passes (1 s here) of the restarted coordinator

    # Then it still waits, with nothing run meanwhile
    assert _status(rig, project_id) == ProjectStatus.WAITING_FOR_APPROVAL, rig.explain()
    assert _iterations(rig, project_id) == ran
    # And a person's approval completes it, once
    approved = rig.stack.cli("approve", project_id, "-m", "ship it")
    assert approved.returncode == 0, approved.stderr + rig.explain()
    assert rig.wait_settled(project_id) == ProjectStatus.COMPLETED
    again = rig.stack.cli("approve", project_id)
    assert again.returncode != 0
    assert "was approved by" in again.stderr
    assert len(_decided(rig, project_id)) == 1


@pytest.mark.timeout(240)
def test_a_deadline_passing_while_the_coordinator_is_down_is_applied_once_after(
    make_rig: Callable[..., Rig], database_url: str
) -> None:
    # Given a project waiting for approval with a 5 s deadline and default "approve"
    rig = make_rig(ralph_script(1), database_url=database_url, workers=1)
    project_id = _submit(rig, 'deadline_s = 5\ndefault = "approve"\n')
    _waiting(rig, project_id)
    # When the coordinator is down past the deadline, then started again
    rig.kill("coordinator", signal.SIGKILL)
    with session_scope(rig.database_url) as session:
        deadline = session.scalars(select(Approval.deadline).where(Approval.project_id == project_id)).one()
    assert deadline is not None
    time.sleep(6)
    assert _status(rig, project_id) == ProjectStatus.WAITING_FOR_APPROVAL
    rig.start_coordinator()
    # Then its reconcile loop approves it once, by the deadline, and the project completes
    assert rig.wait_settled(project_id, timeout_s=60) == ProjectStatus.COMPLETED
    time.sleep(2)  # more passes change nothing
    [decided] = _decided(rig, project_id)
    assert (decided.data["decision"], decided.data["by"]) == ("approved", "deadline")
    with session_scope(rig.database_url) as session:
        approval = session.scalars(select(Approval).where(Approval.project_id == project_id)).one()
        assert approval.status == ApprovalStatus.APPROVED
