"""Delivery (issue #14 points 2-6): a project's task branches and its one pull request reach the
user's remote exactly once, over real git (the tests' smart-HTTP server, with the tenant's stored
credential) and the forge's REST API (the fake forge); whatever ends the run, its work is pushed
and a draft says why; a branch someone else moved is never forced; a forge's refusal is reported
with its own words and the branch stays pushed.

The state machine runs for real (``tests.support.coordinator.Coordinator``: real claims, reports
and ``advance``) on the session's Postgres; iterations do not run a model: the agents' commits
are made straight into the project's bare repository, as an accepted iteration's would be.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import select, update

from orchestrator.api import create_app
from orchestrator.cli.projects import delivery_lines
from orchestrator.delivery import deliver
from orchestrator.remotes.credentials import set_credential
from orchestrator.scheduling import advance, lifecycle
from orchestrator.scheduling.lookup import get_project_row
from orchestrator.scheduling.outbox import transaction
from orchestrator.scheduling.reconcile import Reconciler
from orchestrator.scheduling.transitions import pause_for_budget
from orchestrator.workspaces import get_store
from shared import events
from shared.db import session_scope
from shared.events import NullBus
from shared.git import RESULT_REF
from shared.models import (
    Base,
    CredentialKind,
    Delivery,
    DeliveryStatus,
    Project,
    utcnow,
)
from shared.settings import Settings, get_settings
from tests.support.coordinator import Coordinator
from tests.support.delivery import deliveries, events_of
from tests.support.forge import FakeForge, serve_forge
from tests.support.git_server import GitServer, git, serve_git

pytestmark = [pytest.mark.integration]
REPO = "alice/app"  # owner/name, as the forge knows it
TWO_TASKS = [
    {"id": "api", "title": "Write the API"},
    {"id": "docs:1", "title": "Document it", "depends_on": ["api"]},
]


@dataclass
class World:
    settings: Settings
    server: GitServer
    forge: FakeForge
    coordinator: Coordinator
    url: str

    def start(self, pull_request: str = "ready", forge: str = "github", **config: Any) -> str:
        """A project started from the server's repository (its workspace is the repo's main)."""
        api_url = self.forge.url if forge == "github" else f"{self.forge.url}/api/v4"
        delivery = {"pull_request": pull_request, "forge": forge, "api_url": api_url}
        project_id = self.coordinator.start(tasks=TWO_TASKS, delivery=delivery, **config)
        bare = self.bare(project_id)
        git("init", "--quiet", "--bare", "--initial-branch=main", str(bare))
        git("fetch", "--quiet", str(self.server.path(REPO)), "main:main", cwd=bare)
        with session_scope() as session:
            project = session.get_one(Project, project_id)
            project.name = "Add an API"
            project.source_repo, project.source_ref = self.url, "main"
            project.workspace_sha = git("rev-parse", "main", cwd=bare)
        return project_id

    def bare(self, project_id: str) -> Path:
        return self.settings.workspaces_dir() / f"{project_id}.git"

    def agent_commits(self, project_id: str, name: str, content: str) -> str:
        """An iteration's commit, accepted into the workspace's main."""
        bare = self.bare(project_id)
        work = bare.parent / f"work-{project_id}"
        if not work.exists():
            git("clone", "--quiet", str(bare), str(work))
        git("pull", "--quiet", "--ff-only", cwd=work)
        (work / name).write_text(content)
        git("add", "-A", cwd=work)
        git("commit", "--quiet", "-m", f"iteration: {name}", cwd=work)
        git("push", "--quiet", "origin", "HEAD:main", cwd=work)
        sha = git("rev-parse", "HEAD", cwd=work)
        with session_scope() as session:
            session.get_one(Project, project_id).workspace_sha = sha
        return sha

    def finish_task(self, project_id: str, summary: str) -> None:
        """The task's builder commits and completes it (one iteration)."""
        self.agent_commits(project_id, f"{self.coordinator.in_flight()[0].id}.txt", summary)
        self.coordinator.run_next(completed=True, summary=summary)

    def deliver_all(self) -> None:
        """Run every delivery sent so far, as the coordinator's raas.deliver task would."""
        for delivery_id in self.coordinator.dispatcher.deliveries:
            deliver(delivery_id, self.settings, NullBus())

    def pushes(self) -> int:
        return sum(1 for r in self.server.requests if r.path.endswith("git-receive-pack"))


@pytest.fixture
def world(database_url: str, tmp_path: Path) -> Iterator[World]:
    settings = get_settings().model_copy(
        update={"data_dir": tmp_path / "data", "secret_key": SecretStr(Fernet.generate_key().decode())}
    )
    settings.workspaces_dir().mkdir(parents=True)
    with serve_git(tmp_path / "served") as server, serve_forge(token=server.password) as forge:
        url = server.create_repo(REPO, {"README.md": "hello\n"})
        with session_scope() as session:
            host = server.base_url.removeprefix("http://")
            session.query(Base.metadata.tables["git_credentials"]).filter_by(host=host).delete()
            set_credential(
                session, settings, None, host, CredentialKind.TOKEN, server.username, server.password
            )
        yield World(settings, server, forge, Coordinator(), url)


@pytest.mark.parametrize("forge_kind", ["github", "gitlab"])
def test_a_finished_project_delivers_its_task_branches_and_one_pull_request_with_the_receipt(
    world: World, forge_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # Given a project from the repository with two tasks, each completed by its builder
    project_id = world.start(pull_request="ready", forge=forge_kind)
    world.finish_task(project_id, "Added the API <script>alert(1)</script> @everyone")
    world.finish_task(project_id, "Documented it")

    # When its deliveries run (two tasks' branches, then the project's)
    world.deliver_all()

    # Then each task's branch holds the workspace as its task finished, the project's the end
    branches = world.server.branches(REPO)
    head = git("rev-parse", "main", cwd=world.bare(project_id))
    assert branches[f"raas/{project_id}/project"] == head
    assert branches[f"raas/{project_id}/docs-1"] == head
    assert branches[f"raas/{project_id}/api"] == git("rev-parse", "main~1", cwd=world.bare(project_id))
    assert branches["main"] == git("rev-parse", "main~2", cwd=world.bare(project_id))  # base untouched
    # And one pull request from the project's branch against the source ref, carrying the receipt
    [pull] = world.forge.pulls(REPO)
    text = pull["body"] if forge_kind == "github" else pull["description"]
    head_ref = pull["head"]["ref"] if forge_kind == "github" else pull["source_branch"]
    base_ref = pull["base"]["ref"] if forge_kind == "github" else pull["target_branch"]
    assert (head_ref, base_ref, pull["draft"]) == (f"raas/{project_id}/project", "main", False)
    assert pull["title"].startswith("Add an API: Added the API")
    assert "| task | status | iterations | input | output | cache write | cache read | cost |" in text
    assert "| api | completed | 1 |" in text
    assert "**Completed**" in text
    assert f"raas status {project_id}" in text
    # What the agent wrote is shown, never obeyed: no HTML, no mention
    assert "<script>" not in text
    assert "&lt;script&gt;" in text
    assert "@everyone" not in text
    assert "&#64;&#8203;everyone" in text  # renders as "@" and a zero-width space: no mention
    assert [e["type"] for e in events_of(project_id, events.DELIVERY_PUSHED, events.PULL_REQUEST_OPENED)] == [
        events.DELIVERY_PUSHED,
        events.DELIVERY_PUSHED,
        events.DELIVERY_PUSHED,
        events.PULL_REQUEST_OPENED,
    ]
    assert {row.status for row in deliveries(project_id).values()} == {DeliveryStatus.DELIVERED}

    # When every delivery message comes again (at-least-once)
    pushes, calls = world.pushes(), len(world.forge.calls)
    with session_scope() as session:
        session.execute(
            update(Delivery).where(Delivery.project_id == project_id).values(status=DeliveryStatus.PENDING)
        )
    world.deliver_all()

    # Then nothing is pushed or opened twice
    assert world.pushes() == pushes
    assert len(world.forge.pulls(REPO)) == 1
    assert not [c for c in world.forge.calls[calls:] if c.method == "POST"]
    # And the credential is nowhere but its encrypted row
    secret = world.server.password
    with session_scope() as session:
        for table in Base.metadata.sorted_tables:
            if table.name != "git_credentials":
                assert secret not in repr(session.execute(select(table)).all()), table.name
    assert secret not in caplog.text
    for path in world.bare(project_id).rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def _pause_for_budget(world: World, project_id: str) -> None:
    with transaction(world.coordinator.dispatcher, NullBus()) as out:
        pause_for_budget(out, get_project_row(out.session, project_id, lock=True))


@pytest.mark.parametrize("forge_kind", ["github", "gitlab"])
def test_a_run_stopped_by_its_budget_delivers_a_draft_saying_why_and_resuming_continues_it(
    world: World, forge_kind: str
) -> None:
    # Given a project whose first task is done and whose second is half done
    project_id = world.start(pull_request="ready", forge=forge_kind)
    world.finish_task(project_id, "Added the API")
    half = world.agent_commits(project_id, "half.txt", "half done")

    # When its budget runs out, and the delivery runs
    _pause_for_budget(world, project_id)
    world.deliver_all()

    # Then the half-done work is on the project's branch, in a draft that says why it stopped
    assert world.server.branches(REPO)[f"raas/{project_id}/project"] == half
    [pull] = world.forge.pulls(REPO)
    description = "body" if forge_kind == "github" else "description"
    assert pull["draft"] is True
    assert "**Stopped early** (paused): budget\\_exceeded: spent $0\\.0000 of $5\\.00" in pull[description]
    assert pull["title"].startswith("[paused] " if forge_kind == "github" else "Draft: [paused] ")
    number = pull["number"] if forge_kind == "github" else pull["iid"]
    assert world.forge.comments(REPO, number) == []

    # When the budget is raised and the project completes
    lifecycle.set_budget(project_id, Decimal(50), world.coordinator.dispatcher, NullBus())
    world.finish_task(project_id, "Documented it")
    world.deliver_all()

    # Then the same branch moves on and the same pull request says so, in one comment
    head = git("rev-parse", "main", cwd=world.bare(project_id))
    assert world.server.branches(REPO)[f"raas/{project_id}/project"] == head
    [pull] = world.forge.pulls(REPO)
    assert "**Completed**" in pull[description]
    [comment] = world.forge.comments(REPO, number)
    assert "**Completed**" in comment
    assert "| **total** |" in comment
    # And the draft is marked ready where the forge's REST API can (GitLab: the title loses its
    # Draft: prefix); GitHub's cannot, and the comment says so
    if forge_kind == "gitlab":
        assert (pull["draft"], pull["title"]) == (False, "Add an API: Added the API")
        assert "still a draft" not in comment
    else:
        assert pull["draft"] is True
        assert "It is still a draft: this forge's REST API cannot mark it ready" in comment
    assert [
        e["type"] for e in events_of(project_id, events.PULL_REQUEST_OPENED, events.PULL_REQUEST_UPDATED)
    ] == [
        events.PULL_REQUEST_OPENED,
        events.PULL_REQUEST_UPDATED,
    ]

    # When the record of that comment is lost and the delivery runs again
    with session_scope() as session:
        row = session.scalars(
            select(Delivery).where(Delivery.project_id == project_id, Delivery.key == "project")
        ).one()
        row.status, row.noted_round = DeliveryStatus.PENDING, row.noted_round - 1
    world.deliver_all()

    # Then the comment, found by its hidden key, is not posted twice
    assert len(world.forge.comments(REPO, number)) == 1
    assert len(world.forge.pulls(REPO)) == 1


def _late_bundle(world: World, project_id: str, tmp: Path) -> tuple[str, Path]:
    """A running iteration's commit, as its worker sends it: a bundle of ``base..raas-result``."""
    bare = world.bare(project_id)
    base = git("rev-parse", "main", cwd=bare)
    work = tmp / "late"
    git("clone", "--quiet", str(bare), str(work))
    (work / "late.txt").write_text("written after the stop\n")
    git("add", "-A", cwd=work)
    git("commit", "--quiet", "-m", "iteration: late", cwd=work)
    git("update-ref", f"refs/heads/{RESULT_REF}", "HEAD", cwd=work)
    bundle = tmp / "late.bundle"
    git("bundle", "create", "-q", str(bundle), f"{base}..{RESULT_REF}", cwd=work)
    return base, bundle


def test_work_an_iteration_commits_after_the_stop_is_delivered_in_a_new_round(
    world: World, tmp_path: Path
) -> None:
    # Given a project whose first iteration is running on a worker
    project_id = world.start(pull_request="ready")
    running = world.coordinator.in_flight()[0]
    claim = world.coordinator.given(running.id)

    # When the user stops it, and its delivery runs before the iteration ends
    lifecycle.stop_project(project_id, world.coordinator.dispatcher, NullBus())
    world.deliver_all()
    branch = f"raas/{project_id}/project"
    [pull] = world.forge.pulls(REPO)
    assert pull["draft"] is True
    assert "stopped by the user" in pull["body"]

    # And then the iteration's commits arrive
    base, bundle = _late_bundle(world, project_id, tmp_path)
    assert world.server.branches(REPO)[branch] == base
    accept = {"dispatcher": world.coordinator.dispatcher, "bus": NullBus()}
    sha, _ = advance.accept_workspace(
        get_store(world.settings), project_id, running.id, claim.attempt, base, bundle, **accept
    )
    world.deliver_all()

    # Then a new round pushes them to the same branch, and the same pull request says so once
    assert world.server.branches(REPO)[branch] == sha
    assert world.server.show(REPO, branch, "late.txt") == "written after the stop"
    [pull] = world.forge.pulls(REPO)
    [comment] = world.forge.comments(REPO, pull["number"])
    assert "**Stopped early** (stopped): stopped by the user" in comment
    assert deliveries(project_id)["project"].round == 2

    # And the same commits sent again (their answer lost) start no other round
    advance.accept_workspace(
        get_store(world.settings), project_id, running.id, claim.attempt, base, bundle, **accept
    )
    assert deliveries(project_id)["project"].round == 2


def _push_theirs(world: World, branch: str, tmp: Path) -> str:
    """Someone else's commit on ``branch`` of the remote (pushed with their own credential)."""
    work = tmp / "theirs"
    authed = world.url.replace("http://", f"http://{world.server.username}:{world.server.password}@")
    git("clone", "--quiet", authed, str(work))
    (work / "theirs.txt").write_text("mine, do not lose me\n")
    git("add", "-A", cwd=work)
    git("commit", "--quiet", "-m", "their commit", cwd=work)
    git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=work)
    return git("rev-parse", "HEAD", cwd=work)


def test_a_branch_someone_else_moved_is_refused_not_forced_and_their_commits_stay(
    world: World, tmp_path: Path
) -> None:
    # Given someone pushed their own commit to the project's branch
    project_id = world.start(pull_request="off")
    theirs = _push_theirs(world, f"raas/{project_id}/project", tmp_path)

    # When the project completes and delivers
    world.finish_task(project_id, "Added the API")
    world.finish_task(project_id, "Documented it")
    world.deliver_all()

    # Then the task branches are pushed, the project's is left as they made it, and it says so
    branches = world.server.branches(REPO)
    assert branches[f"raas/{project_id}/project"] == theirs
    assert branches[f"raas/{project_id}/docs-1"] == git("rev-parse", "main", cwd=world.bare(project_id))
    rows = deliveries(project_id)
    assert rows["project"].status == DeliveryStatus.FAILED
    [failed] = events_of(project_id, events.DELIVERY_FAILED)
    assert failed["step"] == "push"
    assert "not forced" in failed["reason"]
    assert f"raas deliver {project_id}" in failed["reason"]


@pytest.mark.parametrize(
    ("status", "answer", "says"),
    [
        (401, {"message": "Bad credentials"}, "401: Bad credentials"),
        (
            422,
            {"message": "Validation Failed", "errors": [{"message": "base: main is protected"}]},
            "422: Validation Failed; base: main is protected",
        ),
    ],
)
def test_a_forge_refusal_is_reported_in_its_words_the_branch_stays_pushed_and_raas_deliver_retries(
    world: World, status: int, answer: dict[str, Any], says: str
) -> None:
    # Given a forge that refuses the pull request once
    project_id = world.start(pull_request="draft")
    world.forge.fail("POST", r"/pulls$", status, answer)

    # When the project completes and delivers
    world.finish_task(project_id, "Added the API")
    world.finish_task(project_id, "Documented it")
    world.deliver_all()

    # Then delivery_failed carries the forge's message, and the branch is pushed all the same
    [failed] = events_of(project_id, events.DELIVERY_FAILED)
    assert failed["step"] == "pull_request"
    assert says in failed["reason"]
    assert deliveries(project_id)["project"].status == DeliveryStatus.FAILED
    head = git("rev-parse", "main", cwd=world.bare(project_id))
    assert world.server.branches(REPO)[f"raas/{project_id}/project"] == head
    assert world.forge.pulls(REPO) == []

    # When the user retries (raas deliver: POST /v1/projects/ID/deliver), through a rate limit
    world.forge.fail("POST", r"/pulls$", 429, {"message": "slow down"}, headers={"Retry-After": "0"})
    pushes = world.pushes()
    app = create_app(world.settings, world.coordinator.dispatcher, NullBus())
    auth = {"Authorization": f"Bearer {world.settings.api_token.get_secret_value()}"}
    with TestClient(app) as client:
        retried = client.post(f"/v1/projects/{project_id}/deliver", headers=auth)
        assert retried.status_code == 200, retried.text
        assert retried.json() == {"branches": [f"raas/{project_id}/project"]}
        world.deliver_all()

        # Then the pull request is opened once, a draft, and nothing was pushed again
        [pull] = world.forge.pulls(REPO)
        assert pull["draft"] is True
        assert world.pushes() == pushes
        # And the status shows each branch and the pull request's address
        shown = client.get(f"/v1/projects/{project_id}", headers=auth).json()["deliveries"]
        assert [(d["branch"], d["status"]) for d in shown][-1] == (f"raas/{project_id}/project", "delivered")
        assert shown[-1]["pull_request_url"] == pull["html_url"]
        assert (
            f"delivery: project -> raas/{project_id}/project  delivered  {pull['html_url']}"
            in delivery_lines(shown)
        )
        # And a retry with nothing failed is refused in one line
        again = client.post(f"/v1/projects/{project_id}/deliver", headers=auth)
        assert again.status_code == 409
        assert "no failed delivery" in again.json()["detail"]


RUN_ONE_DELIVERY = (
    "import sys\n"
    "from orchestrator.delivery import deliver\n"
    "from shared.events import NullBus\n"
    "from shared.settings import get_settings\n"
    "deliver(sys.argv[1], get_settings(), NullBus())\n"
)


@pytest.mark.parametrize(
    ("killed", "hold"),
    [("looking the pull request up", ("GET", r"/pulls$", False)), ("opening it", ("POST", r"/pulls$", True))],
)
def test_a_coordinator_killed_between_push_and_pull_request_opens_exactly_one_after_its_restart(
    world: World, killed: str, hold: tuple[str, str, bool]
) -> None:
    # Given a completed project whose task branches are delivered
    project_id = world.start(pull_request="ready")
    world.finish_task(project_id, "Added the API")
    world.finish_task(project_id, "Documented it")
    project_delivery = deliveries(project_id)["project"].id
    for delivery_id in world.coordinator.dispatcher.deliveries:
        if delivery_id != project_delivery:
            deliver(delivery_id, world.settings, NullBus())
    pushes = world.pushes()

    # When a coordinator process runs the project's delivery and is killed once it has pushed,
    # while it looks the pull request up, or once the forge opened it and before it heard so
    release = world.forge.hold(hold[0], hold[1], answered=hold[2])
    env = {
        **os.environ,
        "RAAS_DATA_DIR": str(world.settings.data_dir),
        "RAAS_SECRET_KEY": world.settings.secret_key.get_secret_value() if world.settings.secret_key else "",
    }
    process = subprocess.Popen([sys.executable, "-c", RUN_ONE_DELIVERY, project_delivery], env=env)
    try:
        assert world.forge.held.wait(60), "the delivery never reached the forge"
        # (a second message for it, meanwhile, finds it held and does nothing)
        deliver(project_delivery, world.settings, NullBus())
        assert world.pushes() == pushes + 1
        process.kill()
        process.wait(30)
    finally:
        release.set()
        if process.poll() is None:
            process.kill()
    row = deliveries(project_id)["project"]
    assert (row.status, row.pushed_sha) == (
        DeliveryStatus.PENDING,
        git("rev-parse", "main", cwd=world.bare(project_id)),
    )
    assert len(world.forge.pulls(REPO)) == (1 if killed == "opening it" else 0)

    # When the restarted coordinator's reconcile pass sends it again, and it runs
    later = utcnow() + timedelta(seconds=world.settings.requeue_after_s + 1)
    report = Reconciler(world.settings, world.coordinator.dispatcher, NullBus()).run_once(now=later)
    assert project_delivery in report.redelivered  # (with any other test's left pending)
    assert world.coordinator.dispatcher.deliveries[-len(report.redelivered) :] == report.redelivered
    deliver(project_delivery, world.settings, NullBus())

    # Then there is exactly one pull request and the branch was pushed once
    assert len(world.forge.pulls(REPO)) == 1
    assert world.pushes() == pushes + 1
    assert deliveries(project_id)["project"].status == DeliveryStatus.DELIVERED
    assert len(events_of(project_id, events.PULL_REQUEST_OPENED)) == 1
