"""Event payloads are typed: one model per event type, and the JSON they store is what each type
has always stored (followers, the CLI and old databases read it)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from shared import events
from shared.event_payloads import (
    PAYLOADS,
    IterationError,
    LlmRetry,
    NoWorkers,
    ProjectPaused,
    ToolExecuted,
    Trip,
    payload,
)
from shared.events import EventData
from shared.models import ErrorKind, PauseReason
from shared.schemas import EventOut

pytestmark = pytest.mark.unit


def _event(data: EventData) -> EventOut:
    return EventOut(seq=1, project_id="p", type=data.TYPE, data=data.data(), ts=datetime.now(UTC))


def test_every_event_type_has_one_payload_model() -> None:
    constants = {value for name, value in vars(events).items() if name.isupper() and isinstance(value, str)}

    assert set(PAYLOADS) == constants
    assert all(type_ == model.TYPE for type_, model in PAYLOADS.items())


@pytest.mark.parametrize(
    ("written", "stored"),
    [
        (
            ToolExecuted(tool="bash", tool_use_id="toolu_1", is_error=False, output="ok"),
            {"tool": "bash", "tool_use_id": "toolu_1", "is_error": False, "output": "ok"},
        ),
        (
            ToolExecuted(tool="check", command="pytest", exit_code=1, is_error=True, output="1 failed"),
            {"tool": "check", "command": "pytest", "exit_code": 1, "is_error": True, "output": "1 failed"},
        ),
        (
            LlmRetry(reason="overloaded", error="529", attempt=2, delay_s=1.5),
            {"reason": "overloaded", "error": "529", "attempt": 2, "delay_s": 1.5},
        ),
        (
            NoWorkers(since=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), queue="iterations"),
            {"since": "2026-01-02T03:04:05+00:00", "queue": "iterations"},
        ),
        (
            IterationError(number=3, error="boom", kind=ErrorKind.LLM),
            {"number": 3, "error": "boom", "kind": "llm"},
        ),
        (
            ProjectPaused(reason=PauseReason.BUDGET_EXCEEDED, message="spent $1.0000 of $1.00"),
            {"reason": "budget_exceeded", "message": "spent $1.0000 of $1.00"},
        ),
    ],
)
def test_a_payload_stores_the_json_its_event_always_had(written: EventData, stored: dict[str, Any]) -> None:
    assert written.data() == stored


def test_money_is_stored_as_the_decimal_string_it_was() -> None:
    warning = PAYLOADS[events.BUDGET_WARNING](spent_usd=Decimal("0.800000"), limit_usd=Decimal("1"))

    assert warning.data() == {"spent_usd": "0.800000", "limit_usd": "1"}


def test_a_reader_gets_back_the_payload_that_was_written() -> None:
    trip = Trip(reason="no_progress", numbers={"no_progress": 3, "limit": 3}, message="no change in 3")

    assert payload(_event(trip)) == trip


def test_an_event_type_this_version_does_not_know_has_no_payload() -> None:
    event = EventOut(seq=1, project_id="p", type="from_the_future", data={"x": 1}, ts=datetime.now(UTC))

    assert payload(event) is None
