"""The PR poller: asks the forge about each followed pull request, a loop in every coordinator.

A followed pull request (``pr_follows``, watching: no round running) is polled every
``[delivery] poll_s`` (default 60 s). Any number of coordinators run the loop; each follow is
claimed per pass with one conditional UPDATE of its ``polled_at`` (the value read must still be
there), so one coordinator polls it, and a coordinator that dies mid-poll only delays the next.

A poll is conditional requests with the ETags of the last answers (``pr_follows.poll_state``): an
unchanged pull request costs a 304 per path (GitHub does not count those against the rate limit).
What changed becomes typed events (orchestrator.delivery.forges: merged or closed, the head's
failed checks with their log's tail, reviews), taken by ``note_pr_event`` in one transaction with
the new poll state: a round decided there leaves through the outbox after the commit, and a
repeated answer starts nothing (a round is keyed by the failed run or the review).

When a webhook trigger of the repository takes ``review_comment`` deliveries, reviews come that
way and the poller reads only the checks and the state. A follow whose ``[delivery] follow_hours``
have passed is ended here (``rounds.expire``: one comment saying why). A follow in a round is not
polled: what happens meanwhile is read, changed, once the round's push is done.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

import httpx
from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from orchestrator.delivery.forges import forge_for, repo_path
from orchestrator.delivery.forges.base import PollState
from orchestrator.remotes.clone import parse_remote
from orchestrator.remotes.credentials import get_credential
from orchestrator.scheduling import rounds
from orchestrator.scheduling.dispatch import Dispatcher
from orchestrator.scheduling.feedback import note_pr_event
from orchestrator.scheduling.outbox import transaction
from shared.db import session_scope
from shared.errors import ForgeError, InvalidInput
from shared.events import EventBus
from shared.models import (
    CredentialKind,
    Delivery,
    FollowStatus,
    PrFollow,
    Project,
    Trigger,
    TriggerSource,
    TriggerStatus,
    utcnow,
)
from shared.project_config import ProjectConfig
from shared.settings import Settings
from shared.triggers import load_spec

log = logging.getLogger(__name__)
TICK_S = 5.0
BATCH = 200


class PrPoller:
    """Polls the followed pull requests of the database the settings name."""

    def __init__(
        self,
        settings: Settings,
        dispatcher: Dispatcher,
        bus: EventBus,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.settings, self.dispatcher, self.bus = settings, dispatcher, bus
        self.transport = transport  # reaches the forge (tests); the default is the network
        self.clock = clock

    def loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.run_once()
            except Exception:  # a database restart: the next pass tries again
                log.warning("pull request poll pass failed", exc_info=True)
            stop.wait(TICK_S)

    def run_once(self, now: datetime | None = None) -> int:
        """One pass: every due follow, claimed and polled. How many were polled."""
        now = now or self.clock()
        polled = 0
        for follow_id, seen, expired in self._due(now):
            if expired:
                with transaction(self.dispatcher, self.bus) as out:
                    if rounds.expire(out, follow_id, now):
                        continue
            if self._claim(follow_id, seen, now):
                try:
                    self.poll(follow_id)
                except Exception:  # one pull request's odd answer must not stop the others' polls
                    log.warning("follow %s: poll failed", follow_id, exc_info=True)
                polled += 1
        return polled

    def _due(self, now: datetime) -> list[tuple[str, datetime | None, bool]]:
        """The follows to poll now: (id, when last polled, whether its follow_hours have passed)."""
        with session_scope() as session:
            rows = session.execute(
                select(PrFollow.id, PrFollow.polled_at, PrFollow.created_at, Project.config)
                .join(Project, Project.id == PrFollow.project_id)
                .where(PrFollow.status == FollowStatus.WATCHING)
                .order_by(PrFollow.polled_at.asc().nulls_first())
                .limit(BATCH)
            ).all()
        due = []
        for follow_id, polled_at, created_at, config in rows:
            delivery = ProjectConfig.model_validate(config).delivery
            if polled_at is None or _aware(polled_at) + timedelta(seconds=delivery.poll_s) <= now:
                expired = _aware(created_at) + timedelta(hours=delivery.follow_hours) <= now
                due.append((follow_id, polled_at, expired))
        return due

    def _claim(self, follow_id: str, seen: datetime | None, now: datetime) -> bool:
        """Take this pass's poll of the follow: one coordinator wins it."""
        with session_scope() as session:
            unchanged = PrFollow.polled_at.is_(None) if seen is None else PrFollow.polled_at == seen
            claimed = session.execute(
                update(PrFollow)
                .where(PrFollow.id == follow_id, PrFollow.status == FollowStatus.WATCHING, unchanged)
                .values(polled_at=now)
                .execution_options(synchronize_session=False)
            )
            return bool(getattr(claimed, "rowcount", 0))

    def poll(self, follow_id: str) -> int:
        """Ask the forge about one follow and take what it says. How many events it said."""
        with session_scope() as session:
            follow = session.get_one(PrFollow, follow_id)
            project = session.get_one(Project, follow.project_id)
            remote = session.get_one(Delivery, follow.delivery_id).remote
            config = ProjectConfig.model_validate(project.config)
            state = PollState.model_validate(follow.poll_state or {})
            repo, number = follow.repo, follow.pr_number
            reviews = repo not in webhook_repos(session)
            try:
                credential = get_credential(
                    session, self.settings, project.tenant_id, parse_remote(remote).host
                )
            except InvalidInput as exc:
                credential = None
                log.warning("follow %s: %s", follow_id, exc)
        if credential is None or credential.kind is not CredentialKind.TOKEN:
            log.warning("follow %s: no token for %s's forge; not polled", follow_id, repo)
            return 0
        try:
            forge = forge_for(config.delivery, remote, credential.secret, self.transport)
        except InvalidInput as exc:
            log.warning("follow %s: %s", follow_id, exc)
            return 0
        try:
            found = forge.poll(number, state, reviews=reviews)
        except ForgeError as exc:
            log.warning(
                "follow %s: the forge answered %s: %s", follow_id, exc.status or "nothing", exc.message
            )
            return 0
        finally:
            forge.close()
        with transaction(self.dispatcher, self.bus) as out:
            for event in found:
                note_pr_event(out, repo=repo, pr_number=number, event=event)
            row = out.session.get_one(PrFollow, follow_id)
            row.poll_state = state.model_dump(mode="json")
        return len(found)


def webhook_repos(session: Session) -> set[str]:
    """The repositories (``owner/name``, lower case) a forge trigger takes review comments of."""
    found: set[str] = set()
    triggers = session.scalars(
        select(Trigger).where(
            Trigger.status == TriggerStatus.ACTIVE,
            or_(Trigger.source == TriggerSource.GITHUB, Trigger.source == TriggerSource.GITLAB),
        )
    )
    for trigger in triggers:
        spec = load_spec(trigger.spec)
        if "review_comment" not in spec.filter.events:
            continue
        named = spec.filter.repositories or ([repo_path(spec.template.repo)] if spec.template.repo else [])
        found.update(name.lower() for name in named)
    return found


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=utcnow().tzinfo)
