"""Why a model call was tried again: the ``llm_retry`` event's ``reason``, and the line people read.

Apart from the retry logic (workers.llm.retry) so that what shows an event — ``raas follow``,
the embedded run's screen — does not import the anthropic SDK (a second and a half of every
``raas`` command's start).
"""

from __future__ import annotations

from enum import Enum


class Cause(str, Enum):
    """Why a model call was tried again: the ``llm_retry`` event's ``reason``, for people."""

    UNREACHABLE = "unreachable"  # no connection, or it dropped
    TIMED_OUT = "timed_out"
    RATE_LIMITED = "rate_limited"
    OVERLOADED = "overloaded"
    SERVER_ERROR = "server_error"
    INCOMPLETE = "incomplete"  # the stream ended without a stop reason
    CONTEXT_TOO_LONG = "context_too_long"  # retried at once with the conversation truncated
    MAX_TOKENS = "max_tokens"  # a reply with tool calls cut off: retried with a larger limit
    HARNESS = "api_retry"  # an agent CLI retrying a call through the gateway, as it reports it


_WORDS: dict[str, str] = {
    Cause.UNREACHABLE: "model unreachable",
    Cause.TIMED_OUT: "model call timed out",
    Cause.RATE_LIMITED: "rate limited by the model API",
    Cause.OVERLOADED: "model overloaded",
    Cause.SERVER_ERROR: "model API error",
    Cause.INCOMPLETE: "reply ended early",
    Cause.CONTEXT_TOO_LONG: "prompt too long, truncated",
    Cause.MAX_TOKENS: "reply cut off at max_tokens",
    Cause.HARNESS: "model call failed",
}


def cause_words(reason: str) -> str:
    """A cause in words (``model unreachable``); one this code does not know, its name spelled out."""
    return _WORDS.get(reason) or reason.replace("_", " ")


def retry_line(reason: str, attempt: int | None, delay_s: float | None) -> str:
    """An ``llm_retry`` event as people read it: ``model unreachable, retry 3 in 4 s``."""
    words = cause_words(reason)
    if attempt is None:
        return f"{words}, retrying"
    wait = f" in {delay_s:.1f}".removesuffix(".0") + " s" if delay_s is not None else ""
    return f"{words}, retry {attempt}{wait}"
