"""The circuit breaker (DESIGN.md rule 2): pause a stuck Ralph loop, say why, try again later.

A loop that keeps failing, keeps changing nothing, or keeps hitting one error burns money without
moving. The breaker opens on any of those or on the run's wall-clock timeout, waits a cooldown,
lets one trial iteration through (half-open) and closes only if that trial changed the workspace
(ralph-claude-code users asked for a breaker that does not stay open forever, #160).

Everything here is pure: frozen models in, new models out. The scheduler persists ``Breaker`` as
JSON on the project row, and on a ``Trip`` (the payload of ``circuit_breaker_triggered``, in
shared.event_payloads) pauses the project and records it.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from enum import Enum

from pydantic import BaseModel, ConfigDict, field_validator

from shared.event_payloads import Trip, TripReason
from shared.project_config import BreakerConfig


class BreakerState(str, Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Breaker(BaseModel):
    """A project's breaker as persisted. While open, the counters keep the values that opened it."""

    model_config = ConfigDict(frozen=True)

    state: BreakerState = BreakerState.CLOSED
    consecutive_failures: int = 0
    no_progress: int = 0
    last_error: str | None = None
    same_error: int = 0
    opened_at: datetime | None = None
    reason: TripReason | None = None
    trips: int = 0
    clock_from: datetime | None = None  # set by a resume: the timeout counts from here


_TRACEBACK = "Traceback (most recent call last):"
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
_HEX = re.compile(r"\b0x[0-9a-f]+\b|\b(?=[0-9a-f]*\d)[0-9a-f]{7,}\b", re.IGNORECASE)
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:~|\.{1,2})?(?:[/\\][\w.@+-]+)+[/\\]?")
_NUMBER = re.compile(r"\d+")
_SPACE = re.compile(r"\s+")
_MAX_SIGNATURE = 200


def normalise_error(text: str) -> str:
    """One line that is equal for two occurrences of "the same" error ("" for no text).

    Ids, hashes, paths and numbers vary between occurrences (``timeout after 31s`` / ``29s``), so
    they become ``<uuid>``, ``<hex>``, ``<path>`` and ``<n>``. The first line usually names the
    error; for a Python traceback the last line does. Idempotent.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1] if lines[0].strip() == _TRACEBACK else lines[0]
    for pattern, token in ((_UUID, "<uuid>"), (_HEX, "<hex>"), (_PATH, "<path>"), (_NUMBER, "<n>")):
        line = pattern.sub(token, line)
    return _SPACE.sub(" ", line).strip()[:_MAX_SIGNATURE].rstrip()


class IterationReport(BaseModel):
    """What one finished iteration tells the breaker. ``error`` is normalised on construction."""

    model_config = ConfigDict(frozen=True)

    failed: bool
    error: str | None = None
    progress: bool  # the workspace tree changed since the iteration began, its commits included

    @field_validator("error")
    @classmethod
    def _signature(cls, value: str | None) -> str | None:
        return (normalise_error(value) or None) if value is not None else None


def record(
    breaker: Breaker, report: IterationReport, config: BreakerConfig, now: datetime
) -> tuple[Breaker, Trip | None]:
    """Count one finished iteration; return the new breaker and the trip if this opened it.

    While OPEN, reports change nothing: they come from iterations started before the trip, and the
    cooldown and trial decide what happens next. While HALF_OPEN the first report is the trial's:
    a success with progress closes the breaker with zero counters; anything else opens it again.
    """
    if breaker.state is BreakerState.OPEN:
        return breaker, None
    counted = _count(breaker, report)
    if breaker.state is BreakerState.HALF_OPEN:
        if report.progress and not report.failed:
            return Breaker(trips=breaker.trips, clock_from=breaker.clock_from), None
        outcome = "failed" if report.failed else "made no change to the workspace"
        retrip = Trip(
            reason="half_open_failed",
            numbers={"failed": int(report.failed), "progress": int(report.progress),
                     "cooldown_s": config.cooldown_s},
            message=f"circuit breaker opened again: the trial iteration after the cooldown {outcome}; "
            f"next trial in {config.cooldown_s:g}s",
        )  # fmt: skip
        return _open(counted, retrip, now), retrip
    trip = _threshold_trip(counted, config)
    return (counted, None) if trip is None else (_open(counted, trip, now), trip)


def check_timeout(
    breaker: Breaker, started_at: datetime, config: BreakerConfig, now: datetime
) -> tuple[Breaker, Trip | None]:
    """Open the breaker if the run has lasted ``timeout_s`` (counted from a resume, if later).

    A breaker already open for another reason is re-opened as ``timeout`` so that no cooldown
    trial runs past the limit. The scheduler calls this before ``may_run``.
    """
    if config.timeout_s is None or breaker.reason == "timeout":
        return breaker, None
    since = max(started_at, breaker.clock_from) if breaker.clock_from else started_at
    elapsed_s = (now - since).total_seconds()
    if elapsed_s < config.timeout_s:
        return breaker, None
    trip = Trip(
        reason="timeout",
        numbers={"elapsed_s": round(elapsed_s, 3), "timeout_s": config.timeout_s},
        message=f"circuit breaker opened: the run has taken {elapsed_s:.0f}s, past its wall-clock "
        f"timeout of {config.timeout_s:g}s; `raas resume` grants another {config.timeout_s:g}s",
    )
    return _open(breaker, trip, now), trip


def may_run(breaker: Breaker, config: BreakerConfig, now: datetime) -> tuple[Breaker, bool]:
    """Whether the scheduler may enqueue one more iteration; call before each enqueue and persist.

    CLOSED: yes. OPEN: no until ``cooldown_s`` after ``opened_at``; then the breaker turns
    HALF_OPEN and this call (only this one) says yes: that iteration is the trial. HALF_OPEN: no
    while the trial runs; its ``record`` decides. A timeout trip waits for ``raas resume``.
    """
    if breaker.state is BreakerState.CLOSED:
        return breaker, True
    if breaker.state is BreakerState.HALF_OPEN or breaker.reason == "timeout":
        return breaker, False
    # An OPEN row always has opened_at; one without it (edited by hand) must not stay open forever.
    cooling = breaker.opened_at is not None and now - breaker.opened_at < timedelta(seconds=config.cooldown_s)
    if cooling:
        return breaker, False
    return breaker.model_copy(update={"state": BreakerState.HALF_OPEN}), True


def reset(breaker: Breaker, now: datetime | None = None) -> Breaker:
    """A user's ``raas resume``: CLOSED, counters zero, the trip history (``trips``) kept.

    Pass ``now`` so the wall-clock timeout counts again from the resume; without it a project
    that tripped on its timeout trips again at the next ``check_timeout``.
    """
    return Breaker(trips=breaker.trips, clock_from=now or breaker.clock_from)


def _count(breaker: Breaker, report: IterationReport) -> Breaker:
    # A failure does not count as "no progress" (it is counted as a failure) but does not clear
    # it either: a loop alternating failures and idle successes must still trip something.
    last_error, same_error = breaker.last_error, breaker.same_error
    if report.failed:
        # A failure without a signature cannot be a repeat of anything.
        repeat = report.error is not None and report.error == breaker.last_error
        last_error = report.error
        same_error = breaker.same_error + 1 if repeat else int(report.error is not None)
    elif report.progress:
        last_error, same_error = None, 0
    return breaker.model_copy(
        update={
            "consecutive_failures": breaker.consecutive_failures + 1 if report.failed else 0,
            "no_progress": 0 if report.progress else breaker.no_progress + int(not report.failed),
            "last_error": last_error,
            "same_error": same_error,
        }
    )


def _threshold_trip(breaker: Breaker, config: BreakerConfig) -> Trip | None:
    # Checked in this order, so N failures in a row name the streak even if they share one error.
    checks: list[tuple[TripReason, int, int, str]] = [
        ("consecutive_failures", breaker.consecutive_failures, config.max_consecutive_failures,
         "iterations in a row failed"),
        ("same_error", breaker.same_error, config.max_same_error,
         f"iterations failed with the same error ({breaker.last_error})"),
        ("no_progress", breaker.no_progress, config.max_no_progress,
         "iterations in a row made no change to the workspace"),
    ]  # fmt: skip
    for reason, count, threshold, what in checks:
        if count >= threshold:
            named = reason == "consecutive_failures" and breaker.last_error
            last = f"; last error: {breaker.last_error}" if named else ""
            message = f"circuit breaker opened: {count} {what} (threshold {threshold}){last}"
            return Trip(reason=reason, numbers={reason: count, "threshold": threshold}, message=message)
    return None


def _open(breaker: Breaker, trip: Trip, now: datetime) -> Breaker:
    update = {"state": BreakerState.OPEN, "opened_at": now, "reason": trip.reason, "trips": breaker.trips + 1}
    return breaker.model_copy(update=update)
