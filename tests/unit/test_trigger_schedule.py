"""When a schedule's slots fall (issue #24): a local wall-clock time in the schedule's zone, once
each, across the two DST days (the decision is in orchestrator/triggers/schedule.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestrator.triggers.schedule import latest_due, local_key, next_slot
from shared.triggers import ScheduleSpec

pytestmark = pytest.mark.unit
BERLIN = ScheduleSpec(cron="30 2 * * *", timezone="Europe/Berlin")


def _slots(schedule: ScheduleSpec, start: datetime, count: int) -> list[str]:
    slots, moment = [], start
    for _ in range(count):
        moment = next_slot(schedule, moment)
        slots.append(local_key(moment, schedule.timezone))
    return slots


def test_a_0230_slot_fires_at_0300_on_the_day_clocks_skip_it() -> None:
    start = datetime(2026, 3, 28, 12, tzinfo=UTC)
    assert _slots(BERLIN, start, 2) == ["2026-03-29T03:00", "2026-03-30T02:30"]


def test_a_0230_slot_fires_once_on_the_day_the_hour_repeats() -> None:
    start = datetime(2026, 10, 24, 12, tzinfo=UTC)
    assert _slots(BERLIN, start, 2) == ["2026-10-25T02:30", "2026-10-26T02:30"]


def test_a_half_hourly_schedule_fires_each_local_time_once_through_the_repeated_hour() -> None:
    schedule = ScheduleSpec(cron="*/30 * * * *", timezone="Europe/Berlin")
    start = datetime(2026, 10, 24, 23, 50, tzinfo=UTC)  # 01:50 local, summer time
    assert _slots(schedule, start, 4) == [
        "2026-10-25T02:00",
        "2026-10-25T02:30",
        "2026-10-25T03:00",
        "2026-10-25T03:30",
    ]


def test_the_latest_due_slot_is_the_last_one_at_or_before_now() -> None:
    schedule = ScheduleSpec(cron="* * * * *")
    due = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
    assert latest_due(schedule, due, datetime(2030, 1, 1, 9, 5, 30, tzinfo=UTC)) == datetime(
        2030, 1, 1, 9, 5, tzinfo=UTC
    )
    assert latest_due(schedule, due, datetime(2030, 1, 1, 9, 0, 1, tzinfo=UTC)) == due
