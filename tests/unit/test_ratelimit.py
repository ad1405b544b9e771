"""The rate limiter's promises that need no Redis: validation, the wait loop, key hygiene.

fakeredis runs Lua only with the optional ``lupa`` package, which the project does not install,
so the window arithmetic itself (the Lua script) is tested against real Redis in
tests/integration/test_ratelimit_cluster.py. Here a stub client answers the script calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pydantic
import pytest

from shared.errors import CallExceedsRateLimit, InvalidInput, RaasError, RateLimitWaitTooLong
from workers.llm.ratelimit import (
    ProjectLimits,
    ProviderLimits,
    RateLimiter,
    key_fingerprint,
)

pytestmark = pytest.mark.unit

API_KEY = "sk-ant-api03-not-a-real-key"


class StubRedis:
    """Answers each script call with the next scripted reply and records what it was sent."""

    def __init__(self, replies: list[list[int]] | None = None) -> None:
        self.replies = list(replies or [])
        self.calls: list[tuple[list[str], list[Any]]] = []

    def register_script(self, source: str) -> Callable[..., Any]:
        def run(keys: list[str], args: list[Any]) -> Any:
            self.calls.append((keys, args))
            return self.replies.pop(0) if self.replies else 0

        return run


def limiter(stub: StubRedis, **limits: Any) -> RateLimiter:
    return RateLimiter(stub, ProviderLimits(**limits), key_fingerprint(API_KEY))


def test_fingerprint_is_16_hex_digits_and_does_not_contain_the_key() -> None:
    fingerprint = key_fingerprint(API_KEY)
    assert len(fingerprint) == 16
    assert int(fingerprint, 16) >= 0
    assert fingerprint == key_fingerprint(API_KEY)
    assert fingerprint != key_fingerprint(API_KEY + "x")
    assert API_KEY[:8] not in fingerprint


def test_passing_the_api_key_itself_as_fingerprint_is_refused_without_echoing_it() -> None:
    with pytest.raises(InvalidInput, match="key_fingerprint") as info:
        RateLimiter(StubRedis(), ProviderLimits(requests_per_minute=1), API_KEY)
    assert API_KEY not in str(info.value)


def test_no_configured_limit_admits_at_once_without_a_redis_round_trip() -> None:
    stub = StubRedis()
    admission = limiter(stub).acquire("p1", ProjectLimits(), 10_000, 4_000)
    admission.adjust(12_000, 3_000)
    assert stub.calls == []
    assert admission.admitted_at_us is None


def test_api_key_never_reaches_redis_keys_or_arguments() -> None:
    stub = StubRedis(replies=[[1, 1_000_000]])
    admission = limiter(stub, requests_per_minute=5, input_tokens_per_minute=100).acquire(
        "p1", ProjectLimits(tokens_per_hour=1000), 10, 20
    )
    admission.adjust(5, 5)
    sent = repr(stub.calls)
    assert API_KEY not in sent
    assert all(key.startswith("raas:rl:") for keys, _ in stub.calls for key in keys)
    assert key_fingerprint(API_KEY) in sent


@pytest.mark.parametrize(
    ("limits", "project", "estimate", "named"),
    [
        ({"input_tokens_per_minute": 1000}, None, (1001, 0), "input_tokens_per_minute = 1000"),
        ({"output_tokens_per_minute": 500}, None, (0, 8192), "output_tokens_per_minute = 500"),
        ({}, ProjectLimits(tokens_per_hour=100), (60, 60), "project_tokens_per_hour = 100"),
    ],
)
def test_an_estimate_larger_than_a_whole_window_is_refused_with_a_clear_message(
    limits: dict[str, int], project: ProjectLimits | None, estimate: tuple[int, int], named: str
) -> None:
    stub = StubRedis()
    with pytest.raises(CallExceedsRateLimit, match="can never be admitted") as info:
        limiter(stub, **limits).acquire("p1", project, *estimate)
    assert named in str(info.value)
    assert isinstance(info.value, InvalidInput)
    assert stub.calls == []


def test_on_wait_hears_the_wait_and_the_binding_limit_before_each_sleep() -> None:
    # Given Redis answers "wait 1.5 s for window 2", then "wait 0.25 s for window 1", then admits
    stub = StubRedis(replies=[[0, 1_500_000, 2], [0, 250_000, 1], [1, 42]])
    heard: list[tuple[float, str]] = []
    slept: list[float] = []
    # When a call is acquired
    admission = limiter(stub, requests_per_minute=5, input_tokens_per_minute=100).acquire(
        "p1", None, 10, 0, on_wait=lambda s, name: heard.append((s, name)), sleep=slept.append
    )
    # Then each wait was announced, then slept, and the admission knows the total
    assert heard == [(1.5, "input_tokens_per_minute"), (0.25, "requests_per_minute")]
    assert slept == [1.5, 0.25]
    assert admission.waited_s == pytest.approx(1.75)
    assert admission.admitted_at_us == 42


def test_a_wait_past_max_wait_s_raises_instead_of_sleeping() -> None:
    stub = StubRedis(replies=[[0, 4_000_000, 1], [0, 7_000_000, 1]])
    slept: list[float] = []
    with pytest.raises(RateLimitWaitTooLong, match=r"requests_per_minute needs another 7\.0s") as info:
        limiter(stub, requests_per_minute=1).acquire("p1", None, 0, 0, max_wait_s=10, sleep=slept.append)
    assert slept == [4.0]
    assert isinstance(info.value, RaasError)


def test_project_windows_are_keyed_by_project_and_provider_windows_by_key() -> None:
    stub = StubRedis(replies=[[1, 1], [1, 2]])
    rl = limiter(stub, requests_per_minute=5)
    rl.acquire("alpha", ProjectLimits(calls_per_hour=3), 1, 1)
    rl.acquire("beta", ProjectLimits(calls_per_hour=3), 1, 1)
    (alpha_keys, _), (beta_keys, _) = stub.calls
    assert alpha_keys[0] == beta_keys[0]  # one provider window for the API key
    assert "alpha" in alpha_keys[2]
    assert "beta" in beta_keys[2]


def test_negative_estimates_are_refused() -> None:
    with pytest.raises(InvalidInput, match="must not be negative"):
        limiter(StubRedis(), requests_per_minute=1).acquire("p1", None, -1, 0)


@pytest.mark.parametrize(
    "bad",
    [{"requests_per_minute": 0}, {"input_tokens_per_minute": -5}, {"window_s": 0}, {"rpm": 3}],
)
def test_limits_must_be_positive_and_spelled_right(bad: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        ProviderLimits(**bad)
