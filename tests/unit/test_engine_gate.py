"""A process has at most RAAS_SANDBOX_ENGINE_CALLS container creates and removals in flight."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from workers.sandbox.docker import EngineGate

pytestmark = pytest.mark.unit


def _most_at_once(gate: EngineGate, callers: int) -> int:
    inside, most = 0, 0
    lock = threading.Lock()

    def call(_: int) -> None:
        nonlocal inside, most
        with gate.turn():
            with lock:
                inside += 1
                most = max(most, inside)
            time.sleep(0.05)
            with lock:
                inside -= 1

    with ThreadPoolExecutor(callers) as pool:
        list(pool.map(call, range(callers)))
    return most


def test_callers_past_the_limit_wait_for_a_turn() -> None:
    gate = EngineGate()
    gate.limit(2)
    assert _most_at_once(gate, 8) == 2


def test_unset_means_twice_the_cores() -> None:
    gate = EngineGate()
    gate.limit(None)
    assert _most_at_once(gate, EngineGate.default() + 4) == EngineGate.default()


def test_a_turn_taken_before_a_new_limit_is_given_back_where_it_came_from() -> None:
    # Given a turn held under a limit of 1
    gate = EngineGate()
    gate.limit(1)
    with gate.turn():
        # When the limit changes meanwhile
        gate.limit(3)
    # Then the old turn's release did not land on the new limit (a bounded semaphore would raise),
    # and the new limit holds
    assert _most_at_once(gate, 6) == 3
