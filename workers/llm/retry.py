"""Classifying LLM call failures and backing off (DESIGN.md rule 6).

Rate limits, overload, server errors, dropped connections, an error event in the middle of a
stream, and a response that ended without a stop reason are retried with capped, jittered
exponential backoff that honours ``retry-after``. A prompt that is too long is truncated and
retried. A rejected API key pauses the project. Anything else fails the iteration.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum

import anthropic


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
    max_attempts: int = 10
    base_s: float = 1.0
    cap_s: float = 60.0
    # Give up when the waits alone would pass this; long enough to ride out a 30 s overload.
    max_total_wait_s: float = 600.0

    def delay_s(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter, at least ``retry-after`` (both capped)."""
        backoff = min(self.cap_s, self.base_s * 2**attempt) * random.uniform(0.5, 1.0)
        if retry_after is not None:
            backoff = max(backoff, min(retry_after, self.cap_s))
        return backoff
