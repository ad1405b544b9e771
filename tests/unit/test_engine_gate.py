"""A process has at most RAAS_SANDBOX_ENGINE_CALLS container creates and removals in flight."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from workers.sandbox.docker import EngineGate

pytestmark = pytest.mark.unit


def _most_at_once(gate: EngineGate, callers: int, limit: int) -> int:
    """The most callers inside a turn at one moment. Each holds its turn until ``limit`` are in
    (or every caller has come), so a slow thread start cannot hide a gate that lets too many in."""
    inside = most = entered = 0
    full = threading.Condition()

    def call(_: int) -> None:
        nonlocal inside, most, entered
        with gate.turn():
            with full:
                inside, entered = inside + 1, entered + 1
                most = max(most, inside)
                full.notify_all()
                full.wait_for(lambda: inside >= limit or entered >= callers, timeout=10)
            time.sleep(0.02)  # still inside: a gate that lets too many in lets them in now
            with full:
                inside -= 1

    with ThreadPoolExecutor(callers) as pool:
        list(pool.map(call, range(callers)))
    return most


def test_callers_past_the_limit_wait_for_a_turn() -> None:
    gate = EngineGate()
    gate.limit(2)
    assert _most_at_once(gate, 8, 2) == 2


def test_unset_means_twice_the_cores() -> None:
    gate = EngineGate()
    gate.limit(None)
    assert _most_at_once(gate, EngineGate.default() + 4, EngineGate.default()) == EngineGate.default()


def test_a_turn_taken_before_a_new_limit_is_given_back_where_it_came_from() -> None:
    # Given a turn held under a limit of 1
    gate = EngineGate()
    gate.limit(1)
    with gate.turn():
        # When the limit changes meanwhile
        gate.limit(3)
    # Then the old turn's release did not land on the new limit (a bounded semaphore would raise),
    # and the new limit holds
    assert _most_at_once(gate, 6, 3) == 3
