"""Doing one delivery, step by step, each step looked up before it is repeated (DESIGN.md rule 10).

1. Push: the commit goes to the branch without force (:mod:`push`); ``pushed_sha`` remembers it,
   so a retry does not push again, and a branch someone else moved is refused and reported —
   their commits stay.
2. Pull request (the project's delivery, when ``[delivery] pull_request`` is on): the open one
   from the branch is looked up first; none → opened (a draft when the run ended early); one →
   its body rewritten and, for a later round, one comment saying why the run ended, marked with
   the round so it is never posted twice.
3. Done, or ``delivery_failed`` with the step and the reason (a forge's own message); the branch
   stays pushed and ``raas deliver ID`` tries again.

Each step's result is committed with its event before the next step starts, so a coordinator
killed anywhere resumes after the last step it finished.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

import httpx
from sqlalchemy import select

from orchestrator.delivery import body as text
from orchestrator.delivery import follow, issues
from orchestrator.delivery.forges import Forge, PullRequest, forge_for, repo_path
from orchestrator.delivery.lease import held
from orchestrator.delivery.push import Pushed, push_branch
from orchestrator.delivery.receipt import TaskReceipt, task_receipts
from orchestrator.remotes.clone import parse_remote
from orchestrator.remotes.credentials import Credential, get_credential, scrub
from orchestrator.scheduling import rounds
from orchestrator.workspaces import get_store
from shared import events
from shared.db import session_scope
from shared.errors import ForgeError, InvalidInput, PushError
from shared.event_payloads import DeliveryFailed, DeliveryPushed, PullRequestOpened, PullRequestUpdated
from shared.events import EventBus, EventData
from shared.git import git
from shared.models import CredentialKind, Delivery, DeliveryKind, DeliveryStatus, Project, utcnow
from shared.project_config import ProjectConfig
from shared.settings import Settings

log = logging.getLogger(__name__)
Step = Literal["push", "pull_request"]
PUSH: Step = "push"
PULL_REQUEST: Step = "pull_request"


@dataclass(frozen=True)
class _Job:
    """What one run of a delivery works from, read at its start."""

    id: str
    project_id: str
    project_name: str
    kind: DeliveryKind
    task_key: str | None
    remote: str
    branch: str
    base: str | None
    round: int
    sha: str | None
    pushed_sha: str | None
    ending: text.Ending
    pull_request_number: int | None
    noted_round: int
    config: ProjectConfig
    credential: Credential | None


class _Failed(Exception):
    """A step of the delivery failed: ``deliver`` records it as ``delivery_failed`` and stops.

    A local control-flow signal (shared/errors.py holds the errors callers see).
    """

    def __init__(self, step: Step, reason: str) -> None:
        super().__init__(reason)
        self.step = step
        self.reason = reason


def deliver(
    delivery_id: str, settings: Settings, bus: EventBus, transport: httpx.BaseTransport | None = None
) -> None:
    """Run a pending delivery (idempotent: a delivery already done, or being done, is left alone).

    ``transport`` reaches the forge (tests); the default is the network.
    """
    with held(delivery_id) as mine:
        if not mine:
            log.info("delivery %s: another run holds it", delivery_id)
            return
        # A round decided while this one ran sent a message that found the lease taken: run it too.
        while (job := _start(delivery_id, settings)) is not None:
            try:
                _push(job, settings, bus)
                if job.kind is DeliveryKind.PROJECT and job.config.delivery.pull_request != "off":
                    _pull_request(job, settings, bus, transport)
            except _Failed as failed:
                _fail(job, failed, bus)
                return
            if not _finish(job):
                continue
            if job.kind is DeliveryKind.PROJECT:  # a run a trigger started from an issue: its result
                issues.note_result(settings, job.project_id, _pull_request_url(job.id), transport)
            return


def _start(delivery_id: str, settings: Settings) -> _Job | None:
    with session_scope() as session:
        row = session.get(Delivery, delivery_id)
        if row is None or row.status != DeliveryStatus.PENDING:
            return None
        project = session.get_one(Project, row.project_id)
        row.attempts += 1
        try:
            credential = get_credential(session, settings, project.tenant_id, parse_remote(row.remote).host)
        except InvalidInput as exc:
            credential = None
            log.warning("delivery %s: %s", delivery_id, exc)
        return _Job(
            id=row.id,
            project_id=row.project_id,
            project_name=project.name,
            kind=row.kind,
            task_key=row.task_key,
            remote=row.remote,
            branch=row.branch,
            base=row.base,
            round=row.round,
            sha=row.sha,
            pushed_sha=row.pushed_sha,
            ending=text.Ending(row.ending or project.status.value, row.reason),
            pull_request_number=row.pull_request_number,
            noted_round=row.noted_round,
            config=ProjectConfig.model_validate(project.config),
            credential=credential,
        )


def _record(
    job: _Job, bus: EventBus, payload: EventData | None, follow: PullRequest | None = None, **fields: object
) -> None:
    """Commit a step's result (``fields`` of the row) with its event, then publish the event.
    ``follow``: the pull request just opened, followed in the same transaction (scheduling.rounds)."""
    with session_scope() as session:
        row = session.get_one(Delivery, job.id)
        for name, value in fields.items():
            setattr(row, name, value)
        event = events.record(session, job.project_id, payload) if payload is not None else None
        followed = None
        if follow is not None:
            followed = rounds.follow_pull_request(
                session,
                job.project_id,
                job.id,
                repo=repo_path(job.remote),
                number=follow.number,
                url=follow.url,
            )
    for published in (event, followed):
        if published is not None:
            bus.publish(published)


def _push(job: _Job, settings: Settings, bus: EventBus) -> None:
    bare = get_store(settings).read(job.project_id)
    # The project's branch takes the workspace as it is now: the last iteration of a stopped run
    # may have committed after the stop was decided.
    sha = git(bare, "rev-parse", "main") if job.kind is DeliveryKind.PROJECT or not job.sha else job.sha
    if sha == job.pushed_sha:
        return
    try:
        result = push_branch(bare, job.remote, sha, job.branch, job.credential)
    except (PushError, InvalidInput) as exc:
        raise _Failed(PUSH, f"pushing {job.branch}: {scrub(str(exc), job.credential)}") from exc
    if result.outcome is Pushed.REFUSED:
        reason = (
            f"{job.branch} on the remote has commits that are not the project's ({result.detail}); it was "
            f"not forced and those commits are kept: merge them into the project or delete the branch, then "
            f"`raas deliver {job.project_id}`"
        )
        raise _Failed(PUSH, reason)
    _record(job, bus, DeliveryPushed(branch=job.branch, sha=sha, task=job.task_key), pushed_sha=sha)


def _forge(job: _Job, transport: httpx.BaseTransport | None) -> Forge:
    credential = job.credential
    host = parse_remote(job.remote).host
    if credential is None or credential.kind is not CredentialKind.TOKEN:
        msg = (
            f"opening the pull request needs a token for {host}; set one with "
            f"`raas credentials set {host} --username USER --token-file FILE`"
        )
        raise _Failed(PULL_REQUEST, msg)
    try:
        return forge_for(job.config.delivery, job.remote, credential.secret, transport)
    except InvalidInput as exc:
        raise _Failed(PULL_REQUEST, str(exc)) from exc


def _pull_request(
    job: _Job, settings: Settings, bus: EventBus, transport: httpx.BaseTransport | None
) -> None:
    if job.noted_round >= job.round:
        return
    if not job.base:
        msg = "the pull request needs a base branch: set [delivery] base (or submit from a repository's ref)"
        raise _Failed(PULL_REQUEST, msg)
    forge = _forge(job, transport)
    with session_scope() as session:
        receipts = task_receipts(session, job.project_id)
        issue = issues.issue_of(session, job.project_id)
    link = text.link_back(job.project_id, settings.coordinator_url)
    title = text.title(job.project_name, receipts, job.ending)
    description = text.body(job.project_id, job.project_name, receipts, job.ending, link)
    description += issues.fixes_line(issue, job.remote)
    # A run that ended early is a draft; one that completed is ready unless drafts were asked for
    # (a draft of an earlier round is marked ready where the forge's API can).
    draft = job.config.delivery.pull_request == "draft" or job.ending.early
    try:
        found = forge.find_pull_request(job.branch, job.base)
        if found is None or job.pull_request_number is None:
            pull_request = found or forge.open_pull_request(
                job.branch, job.base, title, description, draft=draft
            )
            if found is not None:  # opened by a run that died before it could say so
                pull_request = forge.update_pull_request(found, title, description, draft=draft)
            opened = PullRequestOpened(
                branch=job.branch, number=pull_request.number, url=pull_request.url, draft=pull_request.draft
            )
            _record(
                job,
                bus,
                opened,
                pull_request_number=pull_request.number,
                pull_request_url=pull_request.url,
                noted_round=job.round,
                follow=pull_request,
            )
            return
        found = forge.update_pull_request(found, title, description, draft=draft)
        _comment_once(forge, found, job, receipts, link, still_draft=found.draft and not draft)
        follow.reply_to_comments(forge, job.project_id, found.number)  # a finished PR round's review
    except ForgeError as exc:
        reason = f"the forge answered {exc.status or 'nothing'}: {scrub(exc.message, job.credential)}"
        raise _Failed(PULL_REQUEST, reason) from exc
    finally:
        forge.close()
    updated = PullRequestUpdated(branch=job.branch, number=found.number, url=found.url, draft=found.draft)
    _record(
        job, bus, updated, pull_request_url=found.url, pull_request_number=found.number, noted_round=job.round
    )


def _comment_once(
    forge: Forge, found: PullRequest, job: _Job, receipts: list[TaskReceipt], link: str, *, still_draft: bool
) -> None:
    marker = text.round_marker(job.id, job.round)
    if any(marker in existing for existing in forge.comment_bodies(found)):
        return
    comment = text.round_comment(job.id, job.round, job.ending, receipts, link, still_draft=still_draft)
    forge.comment(found, comment)


def _pull_request_url(delivery_id: str) -> str | None:
    with session_scope() as session:
        return session.get_one(Delivery, delivery_id).pull_request_url


def _fail(job: _Job, failed: _Failed, bus: EventBus) -> None:
    log.warning("delivery %s (%s) failed at %s: %s", job.id, job.branch, failed.step, failed.reason)
    with session_scope() as session:
        row = session.get_one(Delivery, job.id)
        if row.round != job.round:
            return  # a newer round is pending; it runs on its own message
        row.status = DeliveryStatus.FAILED
        row.error = failed.reason
        payload = DeliveryFailed(branch=job.branch, task=job.task_key, step=failed.step, reason=failed.reason)
        event = events.record(session, job.project_id, payload)
    bus.publish(event)


def _finish(job: _Job) -> bool:
    """Mark the round delivered; False when a newer round came in meanwhile (it runs next)."""
    with session_scope() as session:
        row = session.scalars(select(Delivery).where(Delivery.id == job.id).with_for_update()).one()
        if row.round != job.round:
            return False
        row.status = DeliveryStatus.DELIVERED
        row.error = None
        row.delivered_at = utcnow()
        return True
