"""A lease's ledger writes run after its answers, one at a time, in the order they were asked
for, however they are let go (the next call's answer, the hold-back timer, someone waiting) —
and waiting for them never needs a free pool thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from workers.gateway.recorder import Recorder

pytestmark = pytest.mark.unit

# Generous: a deadlock fails the test instead of hanging the run; no test asserts a duration.
NO_DEADLOCK_S = 30


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    yield running
    running.call_soon_threadsafe(running.stop)
    thread.join(NO_DEADLOCK_S)
    running.close()


class Ledger:
    """Writes that note their order and whether another write ran at the same time."""

    def __init__(self) -> None:
        self.order: list[int] = []
        self.overlapped = False
        self._running = 0
        self._lock = threading.Lock()

    def write(self, number: int) -> None:
        with self._lock:
            self._running += 1
            self.overlapped = self.overlapped or self._running > 1
        time.sleep(0.001)  # long enough for a second write to overlap, were it allowed to
        with self._lock:
            self.order.append(number)
            self._running -= 1


def test_writes_run_once_each_in_order_however_they_are_let_go(loop: asyncio.AbstractEventLoop) -> None:
    errors: list[Exception] = []
    ledger = Ledger()
    with ThreadPoolExecutor(max_workers=8) as pool:
        recorder = Recorder(pool, loop, errors.append)
        for number in range(30):
            if number % 7 == 3:
                recorder.now(ledger.write, number)
            else:
                recorder.later(ledger.write, number)
            if number % 5 == 0:
                recorder.go()  # a next call's answer began
        recorder.wait()
        assert not recorder.busy()

    assert ledger.order == list(range(30))
    assert not ledger.overlapped
    assert errors == []


def test_held_back_writes_go_by_themselves(loop: asyncio.AbstractEventLoop) -> None:
    ledger = Ledger()
    with ThreadPoolExecutor(max_workers=2) as pool:
        recorder = Recorder(pool, loop, lambda exc: None)
        done = recorder.later(ledger.write, 1)
        # Nobody lets it go: the loop's timer does.
        done.result(timeout=NO_DEADLOCK_S)

    assert ledger.order == [1]


def test_waiting_from_a_busy_pool_runs_the_held_writes_itself(loop: asyncio.AbstractEventLoop) -> None:
    # Given a pool whose one thread is the one that waits (as a call's admission does)
    ledger = Ledger()
    with ThreadPoolExecutor(max_workers=1) as pool:
        recorder = Recorder(pool, loop, lambda exc: None)

        def admit() -> None:
            recorder.later(ledger.write, 1)
            recorder.later(ledger.write, 2)
            recorder.wait()

        # When it waits for the lease's writes, Then they are done without a second thread
        pool.submit(admit).result(timeout=NO_DEADLOCK_S)

    assert ledger.order == [1, 2]


def test_a_failed_write_is_reported_and_the_next_ones_still_run(loop: asyncio.AbstractEventLoop) -> None:
    errors: list[Exception] = []
    ledger = Ledger()

    def broken() -> None:
        msg = "the database refused it"
        raise RuntimeError(msg)

    with ThreadPoolExecutor(max_workers=2) as pool:
        recorder = Recorder(pool, loop, errors.append)
        recorder.later(broken)
        recorder.later(ledger.write, 2)
        recorder.wait()

    assert [str(exc) for exc in errors] == ["the database refused it"]
    assert ledger.order == [2]
