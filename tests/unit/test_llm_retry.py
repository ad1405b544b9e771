"""A model call's retries are bounded in count and in time, and each is said in words."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from shared.llm_retry import Cause, retry_line
from workers.llm.retry import IncompleteReply, RetryPolicy, cause

pytestmark = pytest.mark.unit
REQUEST = httpx.Request("POST", "http://model.invalid/v1/messages")


def _status(code: int, kind: str) -> anthropic.APIStatusError:
    body = {"type": "error", "error": {"type": kind, "message": "no"}}
    return anthropic.APIStatusError("no", response=httpx.Response(code, request=REQUEST), body=body)


def _waits(policy: RetryPolicy, failure: BaseException, attempt_s: float) -> list[float]:
    """The waits a call makes when every attempt fails with ``failure`` after ``attempt_s``."""
    waits: list[float] = []
    retrying_for = 0.0
    while (wait := policy.wait_s(len(waits) + 1, failure, retrying_for)) is not None:
        waits.append(wait)
        retrying_for += wait + attempt_s
    return waits


def test_an_unreachable_model_is_given_up_on_within_the_retry_budget() -> None:
    policy = RetryPolicy(budget_s=60.0)
    unreachable = anthropic.APIConnectionError(request=REQUEST)

    for _ in range(50):  # the waits are jittered
        waits = _waits(policy, unreachable, attempt_s=0.1)

        assert 0 < len(waits) < policy.max_attempts - 1
        # The last attempt starts within the budget, counted from the first failure
        assert sum(waits) + 0.1 * (len(waits) - 1) <= 60.0


def test_a_call_makes_at_most_its_attempts_however_long_the_budget() -> None:
    policy = RetryPolicy(budget_s=10_000.0, base_s=0.01)

    assert len(_waits(policy, IncompleteReply("cut"), attempt_s=0.0)) == policy.max_attempts - 1


def test_a_wait_that_would_end_past_the_budget_is_not_started() -> None:
    policy = RetryPolicy(budget_s=5.0, base_s=1.0)
    overloaded = _status(529, "overloaded_error")

    assert policy.wait_s(1, overloaded, retrying_for_s=5.5) is None
    assert policy.wait_s(1, overloaded, retrying_for_s=0.0) is not None


def test_giving_up_says_why_how_many_attempts_and_which_limit() -> None:
    unreachable = anthropic.APIConnectionError(request=REQUEST)

    said = RetryPolicy(budget_s=60.0).gave_up(5, 58.4, unreachable)
    assert said == (
        "model unreachable: LLM call failed after 5 attempts, retried for 58 s "
        "(a retry budget of 60 s, RAAS_LLM_RETRY_BUDGET_S)"
    )
    assert "at most 10 attempts" in RetryPolicy(budget_s=60.0).gave_up(10, 30.0, unreachable)


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (anthropic.APIConnectionError(request=REQUEST), Cause.UNREACHABLE),
        (anthropic.APITimeoutError(request=REQUEST), Cause.TIMED_OUT),
        (_status(429, "rate_limit_error"), Cause.RATE_LIMITED),
        (_status(529, "overloaded_error"), Cause.OVERLOADED),
        (_status(200, "overloaded_error"), Cause.OVERLOADED),  # an error event mid-stream
        (_status(500, "api_error"), Cause.SERVER_ERROR),
        (_status(413, "request_too_large"), Cause.CONTEXT_TOO_LONG),
        (IncompleteReply("no stop reason"), Cause.INCOMPLETE),
    ],
)
def test_each_retry_has_a_cause(failure: BaseException, expected: Cause) -> None:
    assert cause(failure) is expected


def test_a_retry_reads_as_words_with_its_number_and_wait() -> None:
    assert retry_line("unreachable", 3, 4.0) == "model unreachable, retry 3 in 4 s"
    assert retry_line("overloaded", 1, 0.53) == "model overloaded, retry 1 in 0.5 s"
    assert retry_line("max_tokens", None, None) == "reply cut off at max_tokens, retrying"
    assert retry_line("something_new", 2, 1.0) == "something new, retry 2 in 1 s"
