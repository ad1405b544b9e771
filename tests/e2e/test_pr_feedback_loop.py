"""The PR feedback loop end to end (issue #25 point 1): a project submitted from a repository on
the tests' git server runs on the scripted model in a coordinator and a worker process (Docker
sandbox), opens its pull request on the fake forge and follows it (``follow`` left to its default).
The coordinator's own poller (``[delivery] poll_s = 1``; it passes every few seconds) finds a
failed check run: a round whose builder's model request carries the log's tail, quoted, pushes its
fix to the same pull request; a review comment gets a round, a commit and one reply; a merge ends
the follow. Every wait is bounded and names what it waited for.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared import events
from shared.models import ProjectStatus
from tests.support.delivery import (
    REPO,
    World,
    delivery_world,
    done_step,
    events_of,
    project_row,
    wait_delivered,
    write_step,
)
from tests.support.faults import wait_until
from tests.support.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.docker]
USAGE = {"input_tokens": 800, "output_tokens": 40}
SCRIPT = {
    "responses": [
        write_step("api.py", "def api(items):\n    return items[0]\n", USAGE),
        done_step("Added the API.", USAGE),
        write_step("api.py", "def api(items):\n    return items[0] if items else None\n", USAGE),
        done_step("Handled the empty list.", USAGE),
        write_step("api.py", "def handler(items):\n    return items[0] if items else None\n", USAGE),
        done_step("Renamed api to handler.", USAGE),
    ],
    "when_exhausted": "error",
}
TOML = 'name = "Add an API"\nmax_iterations = 10\nmax_tokens = 1000\n'
LOG = "===== FAILURES =====\nFAILED tests/test_api.py::test_empty - IndexError: list index out of range\n"
ROUND_WITHIN_S = 120.0


@pytest.fixture
def world(services: dict[str, str], tmp_path: Path) -> Iterator[World]:
    with delivery_world(tmp_path) as world:
        yield world


def _head(world: World, project_id: str) -> str:
    head = world.server.branches(REPO)[f"raas/{project_id}/project"]
    world.forge.set_head(REPO, 1, head)  # the forge learns the pull request's head from the push
    return head


def _rounds_done(project_id: str, count: int) -> bool:
    finished = len(events_of(project_id, events.ROUND_FINISHED)) >= count
    return finished and project_row(project_id).status == ProjectStatus.DELIVERED


def _asked_at_step(stack: Stack, step: int) -> str:
    """The scripted model's request answered by ``step``, as text."""
    return "\n".join(json.dumps(r["body"]) for r in stack.model_requests() if r.get("step") == step)


@pytest.mark.timeout(600)
def test_a_followed_pull_request_gets_rounds_for_a_failed_check_and_a_review_and_a_merge_ends_it(
    world: World,
) -> None:
    # Given a coordinator and a worker, and a project from the repository, delivered with its PR
    stack = world.stack(SCRIPT)
    project_id = world.submit(stack, TOML + world.delivery_toml("ready") + "poll_s = 1\n")
    wait_delivered(project_id, {"project"}, stack, timeout_s=120)
    wait_until(lambda: project_row(project_id).status == ProjectStatus.DELIVERED, 60, "delivered")
    [pull] = world.forge.pulls(REPO)
    first = _head(world, project_id)

    # When the pull request's check run fails
    world.forge.fail_check(REPO, first, "test", LOG)

    # Then the coordinator's poller starts a round: the builder's model is given the log's tail
    # quoted, its fix goes to the same branch and pull request, and the project is delivered again
    assert wait_until(lambda: _rounds_done(project_id, 1), ROUND_WITHIN_S, "round 1"), stack.logs()
    wait_delivered(project_id, {"project"}, stack, round_=2)
    asked = _asked_at_step(stack, 2)
    assert "> FAILED tests/test_api.py::test_empty - IndexError: list index out of range" in asked
    second = _head(world, project_id)
    assert second != first
    assert world.server.show(REPO, f"raas/{project_id}/project", "api.py").endswith("if items else None")
    assert [p["number"] for p in world.forge.pulls(REPO)] == [pull["number"]]

    # When a reviewer asks for a change on a line
    _, [comment] = world.forge.review(REPO, 1, "CHANGES_REQUESTED", "", [("api.py", 1, "Call it handler.")])

    # Then a second round is given the comment with its file and line, pushes, and replies once
    assert wait_until(lambda: _rounds_done(project_id, 2), ROUND_WITHIN_S, "round 2"), stack.logs()
    wait_delivered(project_id, {"project"}, stack, round_=3)
    assert "On api.py:1:\\n> Call it handler." in _asked_at_step(stack, 4)
    third = _head(world, project_id)
    replies = wait_until(lambda: world.forge.replies(REPO, 1).get(str(comment)), 30, "the reply")
    assert len(replies) == 1
    assert f"round 2 in commit {third[:12]}" in replies[0]
    assert [e["round"] for e in events_of(project_id, events.ROUND_STARTED)] == [1, 2]

    # When the pull request is merged
    world.forge.merge(REPO, 1)

    # Then the follow ends, the project stays delivered
    ended = wait_until(lambda: events_of(project_id, events.FOLLOW_ENDED), 60, "the follow to end")
    assert [e["reason"] for e in ended] == ["merged"]
    assert project_row(project_id).status == ProjectStatus.DELIVERED
