"""A worker process beats on the row of every iteration it runs, all of them in one statement per
interval: each running attempt's ``heartbeat_at`` moves; a finished one, or an attempt that no
longer owns its row, is left alone."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from shared.db import get_engine, session_scope
from shared.models import Iteration, utcnow
from tests.support.engine import Engine, engine
from workers.claim import Claim, beat, claim_iteration
from workers.iteration import Heartbeats

pytestmark = [pytest.mark.integration]

NEVER_DONE = {
    "responses": [{"content": [{"type": "text", "text": "working"}]}],
    "when_exhausted": "repeat_last",
}
LONG_AGO = utcnow() - timedelta(hours=1)


@pytest.fixture
def eng(services: dict[str, str], tmp_path: Path) -> Iterator[Engine]:
    with engine(NEVER_DONE, tmp_path) as running:
        yield running


def _claimed(eng: Engine) -> Claim:
    project_id = eng.submit()
    iteration_id = eng.dispatcher.take(project_id)
    assert iteration_id is not None
    claim = claim_iteration(iteration_id, "test-worker", stale_after_s=300)
    assert claim is not None
    with session_scope() as session:  # as if it had last beaten an hour ago
        session.execute(update(Iteration).where(Iteration.id == iteration_id).values(heartbeat_at=LONG_AGO))
    return claim


def _beaten_at(claim: Claim) -> datetime:
    with session_scope() as session:
        beaten = session.get_one(Iteration, claim.iteration_id).heartbeat_at
    assert beaten is not None
    return beaten


def _until(condition: Callable[[], bool], within_s: float = 20.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, "the heartbeat never came"
        time.sleep(0.05)


def test_every_running_iteration_is_beaten_and_none_after_it_ends(eng: Engine) -> None:
    heartbeats = Heartbeats(interval_s=0.1)
    first, second, ended = _claimed(eng), _claimed(eng), _claimed(eng)
    try:
        with heartbeats.beating(ended):
            pass
        with heartbeats.beating(first), heartbeats.beating(second):
            _until(lambda: _beaten_at(first) > LONG_AGO and _beaten_at(second) > LONG_AGO)
            one_beat = _beaten_at(first)
            _until(lambda: _beaten_at(first) > one_beat)  # and again, while it runs
        after = _beaten_at(first)
        time.sleep(0.5)  # five intervals
        assert _beaten_at(first) == after
        assert _beaten_at(ended) == LONG_AGO
    finally:
        heartbeats.close()


def test_an_attempt_that_no_longer_owns_its_iteration_does_not_beat_it(eng: Engine) -> None:
    heartbeats = Heartbeats(interval_s=0.1)
    stale, running = _claimed(eng), _claimed(eng)
    with session_scope() as session:  # another worker took the iteration over
        session.execute(
            update(Iteration).where(Iteration.id == stale.iteration_id).values(attempt=stale.attempt + 1)
        )
    try:
        with heartbeats.beating(stale), heartbeats.beating(running):
            _until(lambda: _beaten_at(running) > LONG_AGO)
            time.sleep(0.3)
        assert _beaten_at(stale) == LONG_AGO
    finally:
        heartbeats.close()


def test_the_beat_is_one_cached_statement_whatever_the_number_of_iterations(services: dict[str, str]) -> None:
    # An OR of one clause per iteration compiled anew for every count: a threads worker of
    # concurrency C kept up to C statements in the engine's cache, its memory growing load after load.
    cache = get_engine()._compiled_cache
    assert cache is not None
    for count in (1, 2, 3, 7, 20):
        beat([(f"no-such-iteration-{i}", 1) for i in range(count)])
    beats = [c for c in list(cache.values()) if str(c).startswith("UPDATE iterations SET heartbeat_at")]
    assert len([c for c in beats if "iterations.attempt" in str(c)]) == 1  # the test's own UPDATEs have none
