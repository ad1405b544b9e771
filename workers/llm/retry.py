"""Classifying LLM call failures and backing off (DESIGN.md rule 6).

Rate limits, overload, server errors, dropped connections, an error event in the middle of a
stream, and a response that ended without a stop reason are retried with capped, jittered
exponential backoff that honours ``retry-after``. A prompt that is too long is truncated and
retried. A rejected API key pauses the project. Anything else fails the iteration.

A call's retries have a budget in count and in time (:class:`RetryPolicy`): at most 10 attempts,
and no wait that would end more than ``RAAS_LLM_RETRY_BUDGET_S`` (60 s) after the call's first
failure. So a model that stays unreachable fails the iteration in about a minute and the circuit
breaker opens in minutes, not after ten minutes of silence; every retry says why in an
``llm_retry`` event (:class:`shared.llm_retry.Cause`, in words by
:func:`shared.llm_retry.retry_line`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum

import anthropic

from shared.llm_retry import Cause, cause_words


class Failure(str, Enum):
    RETRY = "retry"
    CONTEXT_TOO_LONG = "context_too_long"
    API_KEY = "api_key"
    FATAL = "fatal"


class IncompleteReply(Exception):
    """The stream ended without a stop reason: the response is not whole.

    A local control-flow signal: classified as retryable like a dropped connection.
    """


_RETRY_TYPES = {"overloaded_error", "rate_limit_error", "api_error", "timeout_error"}
_TOO_LONG_HINTS = ("prompt is too long", "too many tokens", "context length", "context window")


def _error_type(exc: anthropic.APIStatusError) -> str | None:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error") if isinstance(body.get("error"), dict) else body
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else None


def classify(exc: BaseException) -> Failure:
    """What to do about an exception raised by an LLM call."""
    if isinstance(exc, anthropic.AuthenticationError | anthropic.PermissionDeniedError):
        return Failure.API_KEY
    if isinstance(exc, anthropic.APIConnectionError | IncompleteReply):
        return Failure.RETRY
    if isinstance(exc, anthropic.APIStatusError):
        text = str(exc).lower()
        if exc.status_code == 413 or (exc.status_code == 400 and any(h in text for h in _TOO_LONG_HINTS)):
            return Failure.CONTEXT_TOO_LONG
        # A 200 with an error event mid-stream arrives as APIStatusError(status_code=200).
        if exc.status_code in (408, 409, 429) or exc.status_code >= 500 or exc.status_code == 200:
            return (
                Failure.RETRY if exc.status_code != 200 or _error_type(exc) in _RETRY_TYPES else Failure.FATAL
            )
    return Failure.FATAL


def cause(exc: BaseException) -> Cause:
    """Why a call that failed with ``exc`` (retryable, or a prompt too long) is tried again."""
    if isinstance(exc, anthropic.APITimeoutError):
        return Cause.TIMED_OUT
    if isinstance(exc, anthropic.APIConnectionError):
        return Cause.UNREACHABLE
    if not isinstance(exc, anthropic.APIStatusError):
        return Cause.INCOMPLETE
    if classify(exc) is Failure.CONTEXT_TOO_LONG:
        return Cause.CONTEXT_TOO_LONG
    kind = _error_type(exc)
    if exc.status_code == 429 or kind == "rate_limit_error":
        return Cause.RATE_LIMITED
    if exc.status_code == 529 or kind == "overloaded_error":
        return Cause.OVERLOADED
    return Cause.SERVER_ERROR


def retry_after_s(exc: BaseException) -> float | None:
    """The server's ``retry-after`` in seconds, if it sent one."""
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long one model call is tried: ``max_attempts`` at most, and no wait that
    would end more than ``budget_s`` after its first failure (long enough to ride out a 30 s
    overload, short enough that a dead endpoint fails the iteration in about a minute)."""

    max_attempts: int = 10
    base_s: float = 1.0
    cap_s: float = 60.0
    budget_s: float = 60.0  # RAAS_LLM_RETRY_BUDGET_S: the runner passes the worker's setting

    def delay_s(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter, at least ``retry-after`` (both capped)."""
        backoff = min(self.cap_s, self.base_s * 2**attempt) * random.uniform(0.5, 1.0)
        if retry_after is not None:
            backoff = max(backoff, min(retry_after, self.cap_s))
        return backoff

    def wait_s(self, attempts: int, failure: BaseException, retrying_for_s: float) -> float | None:
        """How long to wait before trying again after ``attempts`` attempts (the last failed with
        ``failure``, ``retrying_for_s`` after the first failed), or None: give up."""
        if attempts >= self.max_attempts:
            return None
        retryable = classify(failure) is Failure.RETRY
        wait = self.delay_s(attempts - 1, retry_after_s(failure)) if retryable else 0.0
        return None if retrying_for_s + wait > self.budget_s else wait

    def gave_up(self, attempts: int, retrying_for_s: float, failure: BaseException) -> str:
        """Why the call failed, in words: the last failure's cause, how many attempts were made over
        how long, and which limit ended them (the caller adds the last error)."""
        limit = (
            f"at most {self.max_attempts} attempts"
            if attempts >= self.max_attempts
            else f"a retry budget of {self.budget_s:g} s, RAAS_LLM_RETRY_BUDGET_S"
        )
        tried = f"after {attempts} attempts, retried for {retrying_for_s:.0f} s ({limit})"
        return f"{cause_words(cause(failure))}: LLM call failed {tried}"
