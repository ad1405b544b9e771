"""Receiving a delivery: cheap and safe (issue #24, point 3).

The receiver reads the trigger, checks the signature over the raw bytes, parses, filters and
writes one row — ``INSERT .. ON CONFLICT (trigger_id, key) DO NOTHING`` — and answers. A
redelivery (the same delivery id) inserts nothing and answers the run the first one made. The
run itself starts after the commit, from that row (:mod:`orchestrator.triggers.start`): cloning a
repository takes longer than a forge waits (GitHub: 10 s).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from orchestrator.remotes.credentials import unseal
from orchestrator.triggers import signatures, sources
from shared.db import session_scope
from shared.errors import NotFound, Unauthorized
from shared.models import RunStatus, Trigger, TriggerRun, TriggerStatus, new_id, utcnow
from shared.settings import Settings
from shared.triggers import HookAnswer, load_spec

log = logging.getLogger(__name__)
#: A delivery larger than this is refused before it is read whole (GitHub's issues are far smaller).
MAX_BODY_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Received:
    answer: HookAnswer
    launch: str | None = None  # the new run to start once committed


def insert_run(
    session: Session,
    trigger_id: str,
    key: str,
    subject: str | None,
    fields: dict[str, Any],
    now: datetime | None = None,
) -> str | None:
    """The row for a delivery, unless one with its key is there: its id, or None for a duplicate.

    One statement, so two receivers of the same delivery at once cannot both insert.
    """
    now = now or utcnow()
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = (
        insert(TriggerRun)
        .values(
            id=new_id(),
            trigger_id=trigger_id,
            key=key,
            subject=subject,
            status=RunStatus.RECEIVED,
            fields=fields,
            result_noted=False,
            created_at=now,
            enqueued_at=now,
        )
        .on_conflict_do_nothing(index_elements=["trigger_id", "key"])
        .returning(TriggerRun.id)
    )
    return session.execute(statement).scalar_one_or_none()


def _duplicate(session: Session, trigger_id: str, key: str) -> HookAnswer:
    row = session.execute(
        select(TriggerRun.id, TriggerRun.status, TriggerRun.reason).where(
            TriggerRun.trigger_id == trigger_id, TriggerRun.key == key
        )
    ).one()
    return HookAnswer(run=row.id, status=row.status.value, duplicate=True, reason=row.reason)


def receive(
    trigger_id: str, headers: Mapping[str, str], body: bytes, settings: Settings, now: datetime | None = None
) -> Received:
    """Take one delivery for ``trigger_id`` (``headers`` with lower-case names).

    Raises:
        NotFound: no such trigger (nothing is written).
        Unauthorized: the signature or token does not hold (nothing is parsed or written).
        InvalidInput: the body is not JSON, or the delivery id is missing.
    """
    with session_scope() as session:
        trigger = session.get(Trigger, trigger_id)
        if trigger is None or trigger.secret_encrypted is None:
            msg = f"no trigger {trigger_id} takes deliveries"
            raise NotFound(msg)
        secret = unseal(settings, trigger.secret_encrypted, f"trigger {trigger.name}")
        try:
            signatures.verify(trigger.source, secret, headers, body, now or utcnow())
        except Unauthorized as exc:
            log.warning("trigger %s: %s", trigger_id, exc)
            raise
        if trigger.status is TriggerStatus.PAUSED:
            log.info("trigger %s is paused: delivery ignored", trigger_id)
            return Received(HookAnswer(run=None, status="ignored", reason="the trigger is paused"))
        spec = load_spec(trigger.spec)
        outcome = sources.parse(spec, headers, body)
        if isinstance(outcome, sources.Ignored):
            log.info("trigger %s: delivery ignored: %s", trigger_id, outcome.reason)
            return Received(HookAnswer(run=None, status="ignored", reason=outcome.reason))
        subject: str | None
        if isinstance(outcome, sources.Review):
            subject = f"{outcome.repository}!{outcome.number}"
            fields = {
                **outcome.fields,
                "pull_request.number": outcome.number,
                "pull_request.branch": outcome.branch,
            }
        else:
            subject, fields = outcome.subject, outcome.fields
        run_id = insert_run(session, trigger_id, outcome.key, subject, fields)
        if run_id is None:
            return Received(_duplicate(session, trigger_id, outcome.key))
    return Received(HookAnswer(run=run_id, status=RunStatus.RECEIVED.value), launch=run_id)
