"""Schedules: exactly one run per due slot, across restarts and any number of coordinators.

A schedule trigger's row holds its next due slot (``next_slot_at``, UTC). A coordinator whose
clock passes it claims the slot by moving it on with a conditional write — ``UPDATE triggers SET
next_slot_at = :next WHERE id = :id AND next_slot_at = :due`` — and, in the same transaction,
writes the slot's run row, unique on (trigger, ``slot:<local time>``). Whoever loses the UPDATE
writes nothing; the unique key stands behind it. Nothing is held in memory between passes, so a
restarted coordinator (or a second one) picks up where the database says.

Missed slots (no coordinator ran): ``catch_up = "one"`` fires the latest one once on return;
``"none"`` fires nothing later than ``GRACE_S`` after its time. Never a burst.

Time zones and DST: a slot is a *local wall-clock time* in the schedule's zone, and each fires
once. On the day clocks go back, the repeated hour's times fire once (their first pass: the
second has the same local time, so it is the same slot). On the day clocks go forward, a time in
the skipped hour fires at the first instant after the gap (croniter's choice, as cron's: a daily
02:30 fires at 03:00 that day).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter
from sqlalchemy import select, update

from orchestrator.triggers.intake import insert_run
from shared.db import session_scope
from shared.models import CatchUp, Trigger, TriggerSource, TriggerStatus
from shared.triggers import ScheduleSpec, TriggerSpec, load_spec

log = logging.getLogger(__name__)
GRACE_S = 60.0
# A schedule whose slots all fall in one repeated DST hour never loops for ever.
MAX_STEPS = 10_000


def local_key(moment: datetime, zone: str) -> str:
    """The slot's local wall-clock time, to the minute: what makes a slot one slot."""
    return moment.astimezone(ZoneInfo(zone)).replace(tzinfo=None).isoformat(timespec="minutes")


def next_slot(schedule: ScheduleSpec, after: datetime) -> datetime:
    """The first slot after ``after`` whose local time is later than ``after``'s (UTC): in a
    repeated DST hour, the local times already passed are not slots again."""
    zone = ZoneInfo(schedule.timezone)
    ticks = croniter(schedule.cron, after.astimezone(zone))
    passed = after.astimezone(zone).replace(tzinfo=None)
    for _ in range(MAX_STEPS):
        candidate: datetime = ticks.get_next(datetime)
        if candidate.astimezone(zone).replace(tzinfo=None) > passed:
            return candidate.astimezone(UTC)
    msg = f"cron {schedule.cron!r} has no next slot"
    raise RuntimeError(msg)


def latest_due(schedule: ScheduleSpec, due: datetime, now: datetime) -> datetime:
    """The last slot at or before ``now``, ``due`` (the first one not fired) at the earliest."""
    latest = due
    for _ in range(MAX_STEPS):
        following = next_slot(schedule, latest)
        if following > now:
            return latest
        latest = following
    return latest


def claim_due(now: datetime) -> list[str]:
    """Claim every schedule slot due at ``now``: the new runs to launch once committed."""
    with session_scope() as session:
        due = session.execute(
            select(Trigger.id, Trigger.next_slot_at, Trigger.spec, Trigger.status).where(
                Trigger.source == TriggerSource.SCHEDULE, Trigger.next_slot_at <= now
            )
        ).all()
    runs = []
    for trigger_id, due_at, spec, status in due:
        run_id = _claim(trigger_id, due_at, load_spec(spec), status, now)
        if run_id is not None:
            runs.append(run_id)
    return runs


def _claim(
    trigger_id: str, due_at: datetime, spec: TriggerSpec, status: TriggerStatus, now: datetime
) -> str | None:
    schedule = spec.schedule
    assert schedule is not None  # a schedule trigger's spec has one (TriggerSpec checks it)
    aware_due = due_at if due_at.tzinfo else due_at.replace(tzinfo=UTC)  # SQLite gives naive UTC
    slot = latest_due(schedule, aware_due, now)
    late_s = (now - slot).total_seconds()
    fire = status is TriggerStatus.ACTIVE and (schedule.catch_up is CatchUp.ONE or late_s <= GRACE_S)
    with session_scope() as session:
        moved = session.execute(
            update(Trigger)
            .where(Trigger.id == trigger_id, Trigger.next_slot_at == due_at)
            .values(next_slot_at=next_slot(schedule, slot))
            .returning(Trigger.id)
            .execution_options(synchronize_session=False)
        ).scalar_one_or_none()
        if moved is None:
            return None  # another coordinator claimed it
        if not fire:
            log.info("trigger %s: slot %s skipped (%s)", trigger_id, slot, status.value)
            return None
        key = local_key(slot, schedule.timezone)
        fields = {"slot": f"{key} {schedule.timezone}"}
        return insert_run(session, trigger_id, f"slot:{key}", None, fields, now)


def first_slot(spec: TriggerSpec, now: datetime) -> datetime | None:
    """A new (or resumed) schedule's first slot: the first one after ``now``."""
    if spec.schedule is None:
        return None
    return next_slot(spec.schedule, now - timedelta(microseconds=1))
