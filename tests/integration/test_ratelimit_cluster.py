"""The cluster rate limit against real Redis: the Lua window arithmetic, and worker processes
sharing one limit without ever exceeding it.

Single-process tests drive a fake clock (``clock=`` plus a ``sleep`` that advances it), so the
windows are exact and the tests instant; the multi-process test uses the Redis server's clock.
"""

from __future__ import annotations

import multiprocessing
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workers.llm.ratelimit import PREFIX, ProjectLimits, ProviderLimits, RateLimiter, key_fingerprint

pytestmark = pytest.mark.integration

START_S = 1000.0  # small enough that float seconds hold microseconds exactly


class FakeClock:
    def __init__(self) -> None:
        self.now_s = START_S

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.now_s += seconds


@pytest.fixture(scope="module")
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


def _forget(client: redis.Redis, *names: str) -> None:
    for name in names:
        keys = list(client.scan_iter(f"{PREFIX}*{name}*"))
        if keys:
            client.delete(*keys)


@pytest.fixture
def fingerprint(client: redis.Redis) -> Iterator[str]:
    """A fresh API-key fingerprint (so tests never share windows), forgotten afterwards."""
    fp = secrets.token_hex(8)
    yield fp
    _forget(client, fp)


def test_a_window_admits_up_to_its_limit_then_waits_until_the_oldest_entry_leaves(
    client: redis.Redis, fingerprint: str
) -> None:
    clock = FakeClock()
    rl = RateLimiter(client, ProviderLimits(requests_per_minute=3), fingerprint, clock=clock)
    # Given three calls 10 s apart fill the window
    for _ in range(3):
        assert rl.acquire("p", None, 0, 0, sleep=clock.sleep).waited_s == 0
        clock.sleep(10)
    # When a fourth comes at t=30 s
    waits: list[tuple[float, str]] = []
    admission = rl.acquire("p", None, 0, 0, on_wait=lambda s, n: waits.append((s, n)), sleep=clock.sleep)
    # Then it waited until the first (t=0) left the 60 s window, and not a microsecond longer
    assert waits == [(pytest.approx(30.0, abs=1e-5), "requests_per_minute")]
    assert admission.admitted_at_us == round((START_S + 60) * 1e6) + 1


def test_adjust_corrects_the_token_windows_to_actual_usage(client: redis.Redis, fingerprint: str) -> None:
    clock = FakeClock()
    limits = ProviderLimits(input_tokens_per_minute=100, output_tokens_per_minute=1000)
    rl = RateLimiter(client, limits, fingerprint, clock=clock)
    # Given a call estimated at 80 input tokens that used 30
    rl.acquire("p", None, 80, 500, sleep=clock.sleep).adjust(30, 100)
    # Then 70 more fit at once
    assert rl.acquire("p", None, 70, 0, sleep=clock.sleep).waited_s == 0
    # And a call that used more than its estimate holds the window for what it used
    clock.sleep(61)
    rl.acquire("p", None, 10, 0, sleep=clock.sleep).adjust(90, 0)
    assert rl.acquire("p", None, 20, 0, sleep=clock.sleep).waited_s == pytest.approx(60, abs=1e-5)


def test_settling_after_the_entry_left_its_window_changes_nothing(
    client: redis.Redis, fingerprint: str
) -> None:
    clock = FakeClock()
    rl = RateLimiter(client, ProviderLimits(input_tokens_per_minute=100), fingerprint, clock=clock)
    admission = rl.acquire("p", None, 50, 0, sleep=clock.sleep)
    clock.sleep(120)
    rl.acquire("p", None, 0, 0, sleep=clock.sleep)  # prunes the old entry
    admission.adjust(0, 0)
    assert rl.acquire("p", None, 100, 0, sleep=clock.sleep).waited_s == 0


def test_project_limits_apply_to_each_project_on_its_own(client: redis.Redis, fingerprint: str) -> None:
    clock = FakeClock()
    alpha, beta = f"alpha-{fingerprint}", f"beta-{fingerprint}"
    rl = RateLimiter(client, ProviderLimits(), fingerprint, clock=clock)
    hourly = ProjectLimits(calls_per_hour=2, tokens_per_hour=1000)
    heard: list[str] = []
    for _ in range(2):
        rl.acquire(alpha, hourly, 100, 100, sleep=clock.sleep)
    # beta is not held back by alpha's two calls
    assert rl.acquire(beta, hourly, 100, 100, sleep=clock.sleep).waited_s == 0
    # alpha's third call waits for the hour
    third = rl.acquire(
        alpha, hourly, 100, 100, on_wait=lambda s, n: heard.append(n), max_wait_s=7200, sleep=clock.sleep
    )
    assert third.waited_s == pytest.approx(3600, abs=1e-5)
    assert heard == ["project_calls_per_hour"]


def test_every_key_has_the_prefix_and_a_ttl_and_none_holds_the_api_key(
    client: redis.Redis, fingerprint: str
) -> None:
    api_key = "sk-ant-" + secrets.token_hex(16)
    fp = key_fingerprint(api_key)
    rl = RateLimiter(client, ProviderLimits(requests_per_minute=5, input_tokens_per_minute=500), fp)
    project = f"proj-{fingerprint}"
    rl.acquire(project, ProjectLimits(tokens_per_hour=900), 10, 10).adjust(20, 5)
    keys = [k.decode() for k in client.scan_iter(f"{PREFIX}*") if fp in k.decode() or project in k.decode()]
    assert len(keys) == 6  # 3 windows, each a log and a total
    for key in keys:
        assert 0 < client.pttl(key) <= 3601_000
        assert api_key not in key
    _forget(client, fp)


def test_the_redis_server_clock_stamps_admissions(client: redis.Redis, fingerprint: str) -> None:
    rl = RateLimiter(client, ProviderLimits(requests_per_minute=5), fingerprint)
    before = client.time()
    admitted = rl.acquire("p", None, 0, 0).admitted_at_us
    after = client.time()
    assert admitted is not None
    assert before[0] * 1_000_000 + before[1] <= admitted <= after[0] * 1_000_000 + after[1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    limit=st.integers(1, 50),
    window_ms=st.integers(1_000, 5_000),
    arrivals=st.lists(st.tuples(st.integers(0, 3_000), st.integers(0, 60)), max_size=25),
)
def test_admitted_amounts_in_any_window_never_exceed_the_limit_and_no_wait_is_longer_than_needed(
    client: redis.Redis, limit: int, window_ms: int, arrivals: list[tuple[int, int]]
) -> None:
    fp, clock = secrets.token_hex(8), FakeClock()
    rl = RateLimiter(
        client, ProviderLimits(input_tokens_per_minute=limit, window_s=window_ms / 1000), fp, clock=clock
    )
    window_us = window_ms * 1000
    admitted: list[tuple[int, int]] = []
    try:
        for gap_ms, raw_amount in arrivals:
            clock.sleep(gap_ms / 1000)
            amount = min(raw_amount, limit)
            arrived_us = round(clock() * 1e6)
            admission = rl.acquire("p", None, amount, 0, sleep=clock.sleep)
            at = admission.admitted_at_us
            assert at is not None
            if at > arrived_us:
                # Tight: one microsecond earlier it would not have fit.
                held = sum(a for t, a in admitted if at - 1 - window_us <= t <= at - 1)
                assert held + amount > limit
            admitted.append((at, amount))
    finally:
        _forget(client, fp)
    for end, _ in admitted:
        assert sum(a for t, a in admitted if end - window_us <= t <= end) <= limit


LIMIT, WINDOW_S, WORKERS, CALLS_EACH = 20, 1.0, 4, 12


def _hammer(redis_url: str, fingerprint: str, barrier: Any, results: Any) -> None:
    """One worker process: make CALLS_EACH calls as fast as the shared limit lets it."""
    client = redis.Redis.from_url(redis_url)
    rl = RateLimiter(client, ProviderLimits(requests_per_minute=LIMIT, window_s=WINDOW_S), fingerprint)
    waits: list[float] = []
    stamps: list[int | None] = []
    barrier.wait()
    for _ in range(CALLS_EACH):
        admission = rl.acquire("p", None, 100, 100, on_wait=lambda s, _n: waits.append(s), max_wait_s=8)
        stamps.append(admission.admitted_at_us)
    results.put((stamps, waits))
    client.close()


@pytest.mark.slow
def test_worker_processes_sharing_one_limit_never_exceed_it_and_all_get_through(
    redis_url: str, client: redis.Redis, fingerprint: str
) -> None:
    # Given four worker processes sharing 20 requests per 1 s window, each wanting 12 calls
    ctx = multiprocessing.get_context("spawn")  # no Redis connection or lock inherited from pytest
    barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [
        ctx.Process(target=_hammer, args=(redis_url, fingerprint, barrier, results)) for _ in range(WORKERS)
    ]
    try:
        for proc in procs:
            proc.start()
        # When they all hammer the limiter at once
        # (a guard against a hang, not a figure: spawning four interpreters on a busy machine is slow)
        outcomes = [results.get(timeout=120) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()
    stamps = sorted(s for got, _ in outcomes for s in got if s is not None)
    # Then every call got through, some had to wait, and no 1 s window holds more than 20
    assert len(stamps) == WORKERS * CALLS_EACH
    assert any(waits for _, waits in outcomes)
    window_us = round(WINDOW_S * 1e6)
    busiest = max(sum(1 for t in stamps if end - window_us <= t <= end) for end in stamps)
    assert busiest <= LIMIT, [(t - stamps[0]) / 1e6 for t in stamps]
    # And no wait asked for was longer than a window (that none is longer than needed, to the
    # microsecond, is the property test's above, on a clock of its own: here the processes
    # share two cores with the rest of the machine, and their sleeps overrun)
    assert 2 * window_us < stamps[-1] - stamps[0]  # 48 calls at 20 a window: into the third
    assert all(0 < wait <= WINDOW_S + 1e-6 for _, waits in outcomes for wait in waits)  # + its 1 µs
    assert all(proc.exitcode == 0 for proc in procs)
