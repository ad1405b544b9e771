"""Schedule triggers (issue #24, point 2): exactly one run per due slot, across a coordinator
restart and with two coordinators against one database. Time is injected: each clock's pass is
given its ``now``, so minutes pass without waiting for them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from orchestrator.triggers.clock import TriggerClock
from orchestrator.triggers.start import start_run
from shared.db import session_scope
from shared.events import NullBus
from shared.models import RunStatus, Trigger, TriggerRun
from tests.support.triggers import RecordingLauncher, World, trigger_world

pytestmark = [pytest.mark.integration]
T0 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)


@pytest.fixture
def world(database_url: str, tmp_path: Path) -> Iterator[World]:
    with trigger_world(tmp_path) as world:
        yield world


def _every_minute(world: World, catch_up: str = "one", cron: str = "* * * * *") -> str:
    spec = {
        "name": f"minutely-{catch_up}",
        "source": "schedule",
        "template": {"prompt": "Tidy up the notes ({{ slot }}).\n"},
        "limits": {"budget_per_run_usd": "1", "max_concurrent": 50},
        "schedule": {"cron": cron, "timezone": "UTC", "catch_up": catch_up},
    }
    trigger_id: str = world.add_trigger(spec)["id"]
    with session_scope() as session:
        session.execute(update(Trigger).where(Trigger.id == trigger_id).values(next_slot_at=T0))
    return trigger_id


def _slots(trigger_id: str) -> list[str]:
    with session_scope() as session:
        return list(
            session.scalars(
                select(TriggerRun.key).where(TriggerRun.trigger_id == trigger_id).order_by(TriggerRun.key)
            )
        )


def test_a_schedule_every_minute_across_a_restart_fires_each_slot_once(world: World) -> None:
    trigger_id = _every_minute(world)
    # Given a coordinator whose clock passes 09:00 and 09:01, several times each
    first = TriggerClock(world.launcher)
    for seconds in (1, 20, 40, 61, 62, 90):
        first.tick(T0 + timedelta(seconds=seconds))
    # When it restarts (a new clock, nothing in memory) and passes 09:02 twice
    second = TriggerClock(world.launcher)
    for seconds in (121, 125):
        second.tick(T0 + timedelta(seconds=seconds))
    # Then each slot has one run
    assert _slots(trigger_id) == ["slot:2030-01-07T09:00", "slot:2030-01-07T09:01", "slot:2030-01-07T09:02"]
    # When it is down from 09:03 to 09:05 and comes back at 09:05:30 (catch_up = "one")
    TriggerClock(world.launcher).tick(T0 + timedelta(seconds=330))
    # Then the missed slots fire once, as one run: never a burst
    assert _slots(trigger_id)[3:] == ["slot:2030-01-07T09:05"]
    # and every run launched is one of those rows (a resend after the restart is the same run)
    assert set(world.launcher.launched) == {r for r in _run_ids(trigger_id)}


def test_catch_up_none_skips_the_missed_slots(world: World) -> None:
    trigger_id = _every_minute(world, catch_up="none", cron="0 * * * *")
    TriggerClock(world.launcher).tick(T0 + timedelta(seconds=5))  # 09:00 on time
    TriggerClock(world.launcher).tick(T0 + timedelta(hours=2, minutes=30))  # 10:00, 11:00 missed
    TriggerClock(world.launcher).tick(T0 + timedelta(hours=3, seconds=5))  # 12:00 on time
    assert _slots(trigger_id) == ["slot:2030-01-07T09:00", "slot:2030-01-07T12:00"]


def _run_ids(trigger_id: str) -> list[str]:
    with session_scope() as session:
        return list(session.scalars(select(TriggerRun.id).where(TriggerRun.trigger_id == trigger_id)))


def test_two_coordinators_against_one_database_fire_each_slot_once(world: World) -> None:
    trigger_id = _every_minute(world)
    launcher = RecordingLauncher()
    clocks = [TriggerClock(launcher), TriggerClock(launcher)]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(clock: TriggerClock) -> None:
        try:
            for step in range(60):  # ten minutes, a pass every ten seconds, both at the same moments
                barrier.wait(timeout=30)
                clock.tick(T0 + timedelta(seconds=10 * step + 1))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(clock,)) for clock in clocks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    expected = [f"slot:2030-01-07T09:{m:02d}" for m in range(10)]
    assert _slots(trigger_id) == expected
    # When every launch (a resend included) reaches a consumer, twice over, from two threads
    results: list[RunStatus] = []
    starters = [
        threading.Thread(
            target=lambda ids=list(launcher.launched): results.extend(
                start_run(i, world.settings, world.coordinator.dispatcher, NullBus()) for i in ids
            )
        )
        for _ in range(2)
    ]
    for thread in starters:
        thread.start()
    for thread in starters:
        thread.join(120)
    # Then each slot's run made one project
    with session_scope() as session:
        rows = session.scalars(select(TriggerRun).where(TriggerRun.trigger_id == trigger_id)).all()
        assert {r.status for r in rows} == {RunStatus.STARTED}
        assert len({r.project_id for r in rows}) == len(expected)
