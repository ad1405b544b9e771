"""Following a delivered pull request (issue #25 point 1): the coordinator's poller asks the forge
with ETags, a failed check or a review starts a round whose builder is given the log tail or the
comments with file and line, the round's push gets a reply on each comment, caps end the follow
with one comment, a merge ends it.

Over real git (the tests' smart-HTTP server), the fake forge's REST API on loopback (GitHub and
GitLab) and the state machine running for real on the session's Postgres
(tests.integration.test_delivery's world); the agents' commits are made straight into the
workspace. The poller runs its passes with an injected clock, so no test waits for an interval.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from typer.testing import CliRunner

from orchestrator.api import create_app
from orchestrator.cli import app
from orchestrator.cli.client import ApiClient
from orchestrator.cli.projects import format_event
from orchestrator.delivery.follow import reply_to_comments
from orchestrator.delivery.forges import forge_for
from orchestrator.delivery.poll import PrPoller
from orchestrator.queries.follow import follow
from orchestrator.scheduling.feedback import CheckFailed, note_pr_event
from orchestrator.scheduling.lookup import get_project_row
from orchestrator.scheduling.outbox import transaction
from orchestrator.scheduling.transitions import pause_for_budget
from orchestrator.triggers.store import add_trigger, remove_trigger
from shared import events, rounds
from shared.db import session_scope
from shared.events import NullBus
from shared.models import Event, FollowStatus, PrFollow, Project, ProjectStatus, PrRound, utcnow
from shared.project_config import ProjectConfig
from shared.schemas import EventOut
from shared.triggers import TriggerSpec
from tests.integration import test_delivery
from tests.integration.test_delivery import REPO, World
from tests.support.delivery import events_of

pytestmark = [pytest.mark.integration]
world = test_delivery.world  # a git server, the fake forge, a coordinator's state machine

LOG = "collected 3 items\n" + "x" * 20_000 + "\nFAILED test_api.py::test_empty - assert [] == {}\n"


def _start(world: World, forge: str = "github", **delivery: Any) -> str:
    """A project from the repository, delivered with its pull request open (``follow`` left to its
    default), the forge's head of the pull request set to the pushed branch."""
    with session_scope() as session:  # every spec's forge numbers its first pull request 1
        session.execute(update(PrFollow).values(status=FollowStatus.ENDED))
    api_url = world.forge.url if forge == "github" else f"{world.forge.url}/api/v4"
    settings = {"pull_request": "ready", "forge": forge, "api_url": api_url, **delivery}
    original = world.coordinator.start

    def start(**config: object) -> str:
        config["delivery"] = settings
        return original(**config)

    world.coordinator.start = start  # type: ignore[method-assign]
    project_id = world.start()
    world.finish_task(project_id, "Added the API")
    world.finish_task(project_id, "Documented it")
    world.deliver_all()
    _sync_head(world, project_id)
    return project_id


def _sync_head(world: World, project_id: str) -> str:
    head = world.server.branches(REPO)[f"raas/{project_id}/project"]
    world.forge.set_head(REPO, 1, head)
    return head


def _status(project_id: str) -> ProjectStatus:
    with session_scope() as session:
        return session.get_one(Project, project_id).status


def _follow(project_id: str) -> PrFollow:
    with session_scope() as session:
        row = session.scalars(select(PrFollow).where(PrFollow.project_id == project_id)).one()
        session.expunge(row)
        return row


def _rounds(project_id: str) -> list[PrRound]:
    with session_scope() as session:
        query = select(PrRound).where(PrRound.project_id == project_id).order_by(PrRound.number)
        rows = list(session.scalars(query))
        session.expunge_all()
        return rows


class Clock:
    """The poller's passes, each a poll interval (60 s by default) after the last."""

    def __init__(self, world: World) -> None:
        self.poller = PrPoller(world.settings, world.coordinator.dispatcher, NullBus())
        self.now = utcnow()

    def tick(self, seconds: float = 61) -> int:
        self.now += timedelta(seconds=seconds)
        return self.poller.run_once(self.now)


def _follow_lines(project_id: str) -> str:
    """The project's events as ``raas follow`` prints them."""
    with session_scope() as session:
        rows = session.scalars(select(Event).where(Event.project_id == project_id).order_by(Event.seq)).all()
        return "\n".join(format_event(EventOut.model_validate(row)) for row in rows)


def _builder_reads(world: World, project_id: str) -> str:
    """What the round's builder iteration is given (its claim's round feedback)."""
    [iteration] = [i for i in world.coordinator.in_flight() if i.project_id == project_id]
    assert world.coordinator.category_of(iteration) == "builder"
    with session_scope() as session:
        text = rounds.feedback_for(session, project_id)
    assert text is not None
    return text


def test_the_poller_turns_a_failed_check_run_into_a_round_and_an_unchanged_pull_request_costs_304s(
    world: World,
) -> None:
    # Given a delivered project whose pull request is followed by default
    project_id = _start(world)
    assert _status(project_id) == ProjectStatus.DELIVERED
    first_head = _sync_head(world, project_id)
    clock = Clock(world)

    # When the poller passes twice with nothing new on the pull request
    assert clock.tick() == 1
    assert clock.tick(seconds=5) == 0  # not due yet: [delivery] poll_s = 60
    mark = len(world.forge.calls)
    assert clock.tick() == 1

    # Then the second poll's requests were all conditional and answered 304 Not Modified
    polled = world.forge.calls[mark:]
    assert polled, "the second pass asked nothing"
    assert {c.status for c in polled} == {304}
    assert {c.path for c in polled} == {
        f"/repos/{REPO}/pulls/1",
        f"/repos/{REPO}/commits/{first_head}/check-runs",
        f"/repos/{REPO}/commits/{first_head}/statuses",
        f"/repos/{REPO}/pulls/1/reviews",
    }
    assert _rounds(project_id) == []

    # When the head's check run fails, and the poller passes (twice: the same run again)
    world.forge.fail_check(REPO, first_head, "test", LOG)
    assert clock.tick() == 1
    world.forge.set_status(REPO, first_head, "ci/lint", "failure", "lint failed")
    assert clock.tick() == 0  # in a round: not polled

    # Then one round runs the builder, given the log's tail quoted, cut to size
    assert _status(project_id) == ProjectStatus.RUNNING
    assert len(_rounds(project_id)) == 1
    feedback = _builder_reads(world, project_id)
    assert "> FAILED test_api.py::test_empty - assert [] == {}" in feedback
    assert "collected 3 items" not in feedback  # the head of the log is cut off
    assert [e["trigger"] for e in events_of(project_id, events.ROUND_STARTED)] == ["check_failed"]

    # When the builder fixes it, completes, and the delivery pushes to the same pull request
    world.finish_task(project_id, "Fixed the empty case")
    world.deliver_all()
    head = _sync_head(world, project_id)

    # Then the project is delivered again, the round finished with its cost
    assert head != first_head
    assert len(world.forge.pulls(REPO)) == 1
    assert _status(project_id) == ProjectStatus.DELIVERED
    [finished] = events_of(project_id, events.ROUND_FINISHED)
    assert (finished["round"], Decimal(finished["cost_usd"])) == (1, Decimal(0))
    # And raas status and raas follow say which round of how many
    with session_scope() as session:
        line = session.get_one(Project, project_id).status_line
    assert line == "Following pull request #1: 1 of 3 rounds had, the last cost $0.0000"
    # And the pull request's comment on the round (its receipt) says so
    assert "1 of 3 rounds had, the last cost $0\\.0000" in world.forge.comments(REPO, 1)[-1]
    # (raas follow goes on past the first delivery to the round, and ends with the round's
    # delivery: the branch pushed and the pull request updated after the round finished)
    followed = [e.type for e in follow(world.settings.redis_url, project_id, idle_timeout_s=30)]
    assert followed.count(events.PROJECT_DELIVERED) == 1
    after_round = followed[len(followed) - followed[::-1].index(events.ROUND_FINISHED) :]
    assert set(after_round) == {events.DELIVERY_PUSHED, events.PULL_REQUEST_UPDATED}, followed
    assert after_round[-1] == events.PULL_REQUEST_UPDATED
    lines = _follow_lines(project_id)
    assert "round 1 of 3 (check failed): check test failed" in lines
    assert f"round 1 done, cost $0.0000, pushed {head[:12]}" in lines

    # When the pull request is merged and the poller passes
    world.forge.merge(REPO, 1)
    assert clock.tick() == 1

    # Then the follow ends; later passes poll nothing
    assert _follow(project_id).status == FollowStatus.ENDED
    assert [e["reason"] for e in events_of(project_id, events.FOLLOW_ENDED)] == ["merged"]
    assert clock.tick() == 0
    assert _status(project_id) == ProjectStatus.DELIVERED
    assert len(_rounds(project_id)) == 1


def test_a_github_review_comment_gets_a_round_a_commit_and_one_reply(world: World) -> None:
    # Given a followed pull request and a review asking for a change on a line
    project_id = _start(world)
    clock = Clock(world)
    assert clock.tick() == 1
    _, [comment_id] = world.forge.review(
        REPO, 1, "CHANGES_REQUESTED", "Close, but:", [("api.py", 12, "Handle the empty list. @admin")]
    )

    # When the poller passes
    assert clock.tick() == 1

    # Then the round's builder reads the comment with its file and line, quoted
    feedback = _builder_reads(world, project_id)
    assert "On api.py:12:\n> Handle the empty list. @admin" in feedback
    assert "> Close, but:" in feedback

    # When the builder addresses it and the delivery pushes (and runs again, at least once)
    world.finish_task(project_id, "Handled the empty list")
    world.deliver_all()
    world.deliver_all()

    # Then a commit is on the branch and the comment has one reply naming the round and commit
    head = _sync_head(world, project_id)
    [reply] = world.forge.replies(REPO, 1)[str(comment_id)]
    assert f"round 1 in commit {head[:12]}" in reply
    assert _status(project_id) == ProjectStatus.DELIVERED

    # When a delivery died between the reply and its record, and replies again
    with session_scope() as session:
        session.execute(update(PrRound).where(PrRound.project_id == project_id).values(replied=None))
        config = ProjectConfig.model_validate(session.get_one(Project, project_id).config).delivery
    forge = forge_for(config, world.url, world.server.password)
    try:
        # Then the reply is found on the forge by its marker and not posted again
        assert reply_to_comments(forge, project_id, 1) == 0
    finally:
        forge.close()
    assert len(world.forge.replies(REPO, 1)[str(comment_id)]) == 1

    # When the poller passes again (the reviews unchanged, our reply among the comments)
    assert clock.tick() == 1

    # Then no round starts from it
    assert len(_rounds(project_id)) == 1
    assert _status(project_id) == ProjectStatus.DELIVERED


def test_gitlab_a_failed_pipeline_and_a_discussion_each_get_a_round_and_each_round_replies_once(
    world: World,
) -> None:
    # Given a followed merge request
    project_id = _start(world, forge="gitlab")
    head = _sync_head(world, project_id)
    clock = Clock(world)
    assert clock.tick() == 1

    # When its pipeline fails on the head, and the poller passes
    world.forge.fail_pipeline(REPO, 1, head, "pytest", "E   assert 1 == 2\nERROR: Job failed: exit code 1")
    assert clock.tick() == 1

    # Then a round gives the builder the failed job's trace
    assert "> ERROR: Job failed: exit code 1" in _builder_reads(world, project_id)
    world.finish_task(project_id, "Fixed the test")
    world.deliver_all()
    _sync_head(world, project_id)

    # When a reviewer opens a discussion on a line, and the poller passes
    discussion = world.forge.discuss(REPO, 1, "Rename this.", path="api.py", line=4)
    assert clock.tick() == 1

    # Then a second round gives it with its file and line; its push replies in the discussion once
    assert "On api.py:4:\n> Rename this." in _builder_reads(world, project_id)
    world.finish_task(project_id, "Renamed it")
    world.deliver_all()
    world.deliver_all()
    [reply] = world.forge.replies(REPO, 1)[discussion]
    assert "round 2" in reply
    assert [r.number for r in _rounds(project_id)] == [1, 2]

    # And the poller does not read our reply (or the round comments) as feedback
    assert clock.tick() == 1
    assert len(_rounds(project_id)) == 2
    assert _status(project_id) == ProjectStatus.DELIVERED
    # and the next poll of the unchanged merge request costs only 304s
    mark = len(world.forge.calls)
    assert clock.tick() == 1
    assert {c.status for c in world.forge.calls[mark:]} == {304}

    # When the reviewer answers in the same discussion, a third round replies there once more
    _sync_head(world, project_id)
    world.forge.answer_in(REPO, 1, discussion, "Still not quite: rename the test too.")
    assert clock.tick() == 1
    assert "> Still not quite: rename the test too." in _builder_reads(world, project_id)
    assert "Rename this." not in _builder_reads(world, project_id)  # only what is new
    world.finish_task(project_id, "Renamed the test")
    world.deliver_all()
    assert ["round 2" in r for r in world.forge.replies(REPO, 1)[discussion]] == [True, False]
    assert "round 3" in world.forge.replies(REPO, 1)[discussion][1]


def _new_comments(world: World, before: int) -> list[str]:
    return world.forge.comments(REPO, 1)[before:]


def test_a_round_that_runs_out_of_its_budget_ends_delivered_with_one_comment_saying_why(world: World) -> None:
    # Given a followed pull request with a round budget, and a round started
    project_id = _start(world, round_budget_usd="0.50")
    before = len(world.forge.comments(REPO, 1))
    with session_scope() as session:
        limit = session.get_one(Project, project_id).budget_limit_usd
    with transaction(world.coordinator.dispatcher, NullBus()) as out:
        assert note_pr_event(out, repo=REPO, pr_number=1, event=CheckFailed(name="test", run_id="7"))

    # Then the round runs under a limit lowered to what it may spend
    with session_scope() as session:
        project = session.get_one(Project, project_id)
        assert project.budget_limit_usd == project.spent_usd + Decimal("0.50")

    # When the ledger finds the round's money spent (the project's budget pause)
    with transaction(world.coordinator.dispatcher, NullBus()) as out:
        project = get_project_row(out.session, project_id, lock=True)
        project.spent_usd = project.budget_limit_usd
        pause_for_budget(out, project)
    world.deliver_all()
    world.deliver_all()  # a redelivery (a restart) posts nothing more

    # Then the project is delivered, not paused, its own limit back, the follow ended
    with session_scope() as session:
        project = session.get_one(Project, project_id)
        assert (project.status, project.budget_limit_usd) == (ProjectStatus.DELIVERED, limit)
    assert _follow(project_id).status == FollowStatus.ENDED
    assert [e["reason"] for e in events_of(project_id, events.FOLLOW_ENDED)] == ["budget"]
    # And the pull request got exactly one comment saying why
    [comment] = _new_comments(world, before)
    assert "ran out of budget" in comment
    assert "round\\_budget\\_usd = 0\\.50" in comment or "round_budget_usd = 0.50" in comment
    # And a later failure starts nothing
    with transaction(world.coordinator.dispatcher, NullBus()) as out:
        assert not note_pr_event(out, repo=REPO, pr_number=1, event=CheckFailed(name="test", run_id="8"))
    assert len(_rounds(project_id)) == 1


def test_the_follow_ends_after_follow_hours_with_one_comment(world: World) -> None:
    # Given a followed pull request whose follow_hours are 2
    project_id = _start(world, follow_hours=2)
    before = len(world.forge.comments(REPO, 1))
    clock = Clock(world)
    assert clock.tick() == 1

    # When the poller passes after the two hours, and again (and the delivery runs twice)
    clock.now = utcnow() + timedelta(hours=2)
    assert clock.tick() == 0
    assert clock.tick() == 0
    world.deliver_all()
    world.deliver_all()

    # Then the follow ended with one comment saying why; the project stays delivered
    assert _follow(project_id).status == FollowStatus.ENDED
    assert [e["reason"] for e in events_of(project_id, events.FOLLOW_ENDED)] == ["timeout"]
    [comment] = _new_comments(world, before)
    assert "2 h ago" in comment
    assert _status(project_id) == ProjectStatus.DELIVERED


def test_the_per_pr_budget_spent_ends_the_follow_at_the_next_failure_with_one_comment(world: World) -> None:
    # Given a followed pull request whose rounds spent its pr_budget_usd
    project_id = _start(world, pr_budget_usd="1")
    before = len(world.forge.comments(REPO, 1))
    with session_scope() as session:
        session.get_one(Project, project_id).spent_usd += Decimal("1.25")

    # When a check fails (reported twice)
    for _ in range(2):
        with transaction(world.coordinator.dispatcher, NullBus()) as out:
            note_pr_event(out, repo=REPO, pr_number=1, event=CheckFailed(name="test", run_id="9"))
    world.deliver_all()

    # Then no round starts, and one comment says why
    assert _rounds(project_id) == []
    assert [e["reason"] for e in events_of(project_id, events.FOLLOW_ENDED)] == ["budget"]
    [comment] = _new_comments(world, before)
    assert "its rounds spent $1.25" in comment.replace("\\", "")


def _cli(world: World, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """``raas`` against the real API app (in-process transport), as the cluster's token."""
    token = world.settings.api_token.get_secret_value()
    client = ApiClient("http://testserver", token)
    api = create_app(world.settings, world.coordinator.dispatcher, NullBus())
    client._http = TestClient(api, headers={"Authorization": f"Bearer {token}"})
    monkeypatch.setattr("orchestrator.cli.pull_requests.api", lambda: client)
    return CliRunner()


def _event_count(project_id: str) -> int:
    with session_scope() as session:
        return len(session.scalars(select(Event.seq).where(Event.project_id == project_id)).all())


def test_a_feedback_round_on_a_pull_request_the_service_did_not_open_is_one_line_and_changes_nothing(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a followed pull request (alice/app#1), and raas talking to the coordinator's API
    project_id = _start(world)
    runner, seen = _cli(world, monkeypatch), _event_count(project_id)

    # When a round is asked for on pull requests the service did not open
    for target in ("bob/other#1", f"{REPO}#99"):
        result = runner.invoke(app, ["feedback", target, "--check", "test", "--run-id", "1"])

        # Then it is refused in one line naming it, exit non-zero, and nothing changed
        assert result.exit_code != 0
        said = str(result.exception)
        assert f"no project of yours follows {target}: this service did not open that pull request" in said
        assert "\n" not in said
    assert _event_count(project_id) == seen
    assert _rounds(project_id) == []
    assert _status(project_id) == ProjectStatus.DELIVERED
    # And a malformed one names the form to use
    result = runner.invoke(app, ["feedback", "alice/app", "--check", "test"])
    assert "is not OWNER/NAME#NUMBER" in str(result.exception)

    # When a review comment is reported on the one it opened
    result = runner.invoke(
        app, ["feedback", f"{REPO}#1", "--comment", "Rename it", "--path", "api.py", "--line", "3"]
    )

    # Then a round starts, its builder given the comment with file and line
    assert result.exit_code == 0, result.output
    assert f"taken by project {project_id}, running (pull request round 1 of 3)" in result.output
    assert "On api.py:3:\n> Rename it" in _builder_reads(world, project_id)


def test_a_failed_commit_status_starts_a_round_with_its_description(world: World) -> None:
    # Given a followed pull request whose head's ci/lint status went from pending to failure
    project_id = _start(world)
    head = _sync_head(world, project_id)
    world.forge.set_status(REPO, head, "ci/lint", "pending", "running")
    clock = Clock(world)
    assert clock.tick() == 1
    assert _rounds(project_id) == []  # pending is no failure
    world.forge.set_status(REPO, head, "ci/lint", "failure", "3 lint errors in api.py")

    # When the poller passes
    assert clock.tick() == 1

    # Then one round, given the status's description as the check's words
    [round_] = _rounds(project_id)
    assert round_.key.startswith("check:ci/lint:status:")
    assert "> 3 lint errors in api.py" in _builder_reads(world, project_id)


def test_with_a_webhook_trigger_taking_review_comments_the_poller_leaves_reviews_to_it(world: World) -> None:
    # Given a GitHub trigger on the repository that takes review comments
    spec = TriggerSpec.model_validate(
        {
            "name": f"reviews-{utcnow():%H%M%S%f}",
            "source": "github",
            "secret": "a-webhook-secret-of-32-characters",
            "filter": {"events": ["review_comment"]},
            "template": {"repo": world.url, "ref": "main", "prompt": "Fix it."},
        }
    )
    trigger = add_trigger(spec, None, world.settings)
    try:
        project_id = _start(world)
        clock = Clock(world)
        assert clock.tick() == 1
        world.forge.review(REPO, 1, "CHANGES_REQUESTED", "", [("api.py", 2, "No.")])
        mark = len(world.forge.calls)

        # When the poller passes
        assert clock.tick() == 1

        # Then it read the state and the checks, not the reviews: they come by the webhook
        paths = {c.path for c in world.forge.calls[mark:]}
        assert f"/repos/{REPO}/pulls/1" in paths
        assert not [p for p in paths if "reviews" in p or p.endswith("/comments")]
        assert _rounds(project_id) == []
    finally:
        remove_trigger(None, trigger.id, world.settings)


def test_a_forge_that_fails_a_poll_is_asked_again_at_the_next_interval(world: World) -> None:
    # Given a followed pull request whose forge answers the next poll with an error
    project_id = _start(world)
    head = _sync_head(world, project_id)
    world.forge.fail("GET", r"/pulls/1$", 502, {"message": "Server Error"})
    world.forge.fail_check(REPO, head, "test", "boom")
    clock = Clock(world)

    # When the poller passes: nothing is taken, the follow still watches
    assert clock.tick() == 1
    assert _rounds(project_id) == []
    assert _follow(project_id).status == FollowStatus.WATCHING

    # Then the next pass, an interval later, takes the failed check
    assert clock.tick(seconds=5) == 0
    assert clock.tick() == 1
    assert len(_rounds(project_id)) == 1
