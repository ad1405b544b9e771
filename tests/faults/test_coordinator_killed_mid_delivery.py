"""The coordinator killed in the middle of a delivery (issue #14: exactly once): a project from a
repository completes on real iterations, the coordinator's ``raas.deliver`` pushes the project's
branch, and the forge opens the pull request but the coordinator is SIGKILLed before it hears so.
Restarted, its reconcile loop sends the pending delivery again: the pull request is found by its
head branch, not opened twice, and the branch is not pushed again. Killed between the push and the
pull request, with the steady state's requeue period (300 s), the restarted coordinator opens the
pull request within seconds (issue #22): its first reconcile pass resumes what was pending.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shared import events
from shared.models import DeliveryStatus, ProjectStatus
from tests.support.delivery import (
    REPO,
    World,
    deliveries,
    delivery_world,
    done_step,
    ended,
    events_of,
    kill_coordinator,
    start_coordinator,
    wait_delivered,
    workspace,
    write_step,
)
from tests.support.faults import RECOVERY_ENV, wait_until
from tests.support.git_server import git

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

SCRIPT = {
    "responses": [
        write_step("work.txt", "done\n", {"input_tokens": 500, "output_tokens": 20}),
        done_step("Did the work.", {"input_tokens": 500, "output_tokens": 20}),
    ],
    "when_exhausted": "error",
}
TOML = 'name = "Do the work"\nmax_iterations = 2\nmax_tokens = 1000\n'
# Generous against a loaded machine, far below the requeue period the coordinator used to wait.
RESUMED_WITHIN_S = 30.0
FOLLOWED_END = (ProjectStatus.COMPLETED, ProjectStatus.DELIVERED)


@pytest.fixture
def world(services: dict[str, str], tmp_path: Path) -> Iterator[World]:
    with delivery_world(tmp_path) as world:
        yield world


@pytest.mark.timeout(240)
def test_a_coordinator_killed_after_the_forge_opened_the_pull_request_opens_none_again(
    world: World,
) -> None:
    # Given a coordinator whose delivery the forge will keep waiting once it has opened the PR
    release = world.forge.hold("POST", r"/pulls$", answered=True)
    stack = world.stack(SCRIPT, env=RECOVERY_ENV)
    try:
        project_id = world.submit(stack, TOML + world.delivery_toml("ready"))
        # completed, then delivered once its pull request is open and followed ([delivery] follow)
        assert wait_until(lambda: ended(project_id), 120, "the project to end") in FOLLOWED_END

        # When the coordinator is SIGKILLed once the branch is pushed and the forge opened the PR
        assert world.forge.held.wait(60), f"the delivery never reached the forge{stack.logs()}"
        pushes = world.pushes()
        kill_coordinator(stack)
    finally:
        release.set()
    [opened] = world.forge.pulls(REPO)
    row = deliveries(project_id)["project"]
    head = git("rev-parse", "main", cwd=workspace(stack, project_id))
    assert (row.status, row.pushed_sha, row.pull_request_number) == (DeliveryStatus.PENDING, head, None)

    # And started again (its reconcile loop resends what is pending)
    start_coordinator(stack)
    wait_delivered(project_id, {"project"}, stack)

    # Then there is one pull request, the one the forge opened, and the branch was pushed once
    assert world.forge.pulls(REPO) == [opened]
    assert world.pushes() == pushes
    assert world.server.branches(REPO)[f"raas/{project_id}/project"] == head
    assert [c.method for c in world.forge.requests("POST")] == ["POST"]
    row = deliveries(project_id)["project"]
    assert (row.pull_request_number, row.pull_request_url) == (opened["number"], opened["html_url"])
    [said] = events_of(project_id, events.PULL_REQUEST_OPENED)
    assert said["number"] == opened["number"]
    project_pushes = [e for e in events_of(project_id, events.DELIVERY_PUSHED) if e["task"] is None]
    assert [e["sha"] for e in project_pushes] == [head]


@pytest.mark.timeout(240)
def test_a_coordinator_killed_between_the_push_and_the_pull_request_opens_it_within_seconds_of_restarting(
    world: World,
) -> None:
    # Given a coordinator with the default requeue period, whose delivery the forge keeps waiting
    # after the push, when it looks for an open pull request (before it opens one)
    release = world.forge.hold("GET", r"/pulls$")
    stack = world.stack(SCRIPT, env={**RECOVERY_ENV, "RAAS_REQUEUE_AFTER_S": "300"})
    try:
        project_id = world.submit(stack, TOML + world.delivery_toml("ready"))
        # completed, then delivered once its pull request is open and followed ([delivery] follow)
        assert wait_until(lambda: ended(project_id), 120, "the project to end") in FOLLOWED_END

        # When the coordinator is SIGKILLed there
        assert world.forge.held.wait(60), f"the delivery never reached the forge{stack.logs()}"
        kill_coordinator(stack)
    finally:
        release.set()
    head = git("rev-parse", "main", cwd=workspace(stack, project_id))
    row = deliveries(project_id)["project"]
    assert (row.status, row.pushed_sha, world.forge.pulls(REPO)) == (DeliveryStatus.PENDING, head, [])

    # And started again
    start_coordinator(stack)

    # Then the pull request is opened within seconds, not after the 300 s requeue period
    wait_delivered(project_id, {"project"}, stack, timeout_s=RESUMED_WITHIN_S)
    [opened] = world.forge.pulls(REPO)
    assert opened["head"]["ref"] == f"raas/{project_id}/project"
    assert world.server.branches(REPO)[f"raas/{project_id}/project"] == head
