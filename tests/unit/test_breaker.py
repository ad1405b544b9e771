"""The circuit breaker: what opens it, what it tells the user, how it recovers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.scheduling.breaker import (
    Breaker,
    BreakerConfig,
    BreakerState,
    IterationReport,
    Trip,
    check_timeout,
    may_run,
    normalise_error,
    record,
    reset,
)

pytestmark = pytest.mark.unit

T0 = datetime(2025, 1, 1, tzinfo=UTC)
CONFIG = BreakerConfig()
PROGRESS = IterationReport(failed=False, progress=True)
IDLE = IterationReport(failed=False, progress=False)


def fail(error: str | None = "boom") -> IterationReport:
    return IterationReport(failed=True, error=error, progress=False)


def feed(
    reports: list[IterationReport], breaker: Breaker | None = None, config: BreakerConfig = CONFIG
) -> tuple[Breaker, list[Trip]]:
    """Record the reports one minute apart from T0; return the breaker and every trip."""
    breaker = breaker or Breaker()
    trips: list[Trip] = []
    for minute, report in enumerate(reports):
        breaker, trip = record(breaker, report, config, T0 + timedelta(minutes=minute))
        trips += [trip] if trip else []
    return breaker, trips


def opened(config: BreakerConfig = CONFIG, at: datetime = T0) -> Breaker:
    breaker = Breaker()
    for _ in range(config.max_no_progress):
        breaker, _trip = record(breaker, IDLE, config, at)
    assert breaker.state is BreakerState.OPEN
    return breaker


# Configuration


def test_defaults_are_the_ones_ralph_loop_users_settled_on() -> None:
    assert CONFIG.model_dump() == {
        "max_consecutive_failures": 5,
        "max_no_progress": 3,
        "max_same_error": 5,
        "timeout_s": None,
        "cooldown_s": 1800,
    }


def test_every_setting_is_documented_for_the_configuration_reference() -> None:
    assert all(field.description for field in BreakerConfig.model_fields.values())


@pytest.mark.parametrize(
    "bad", [{"max_no_progres": 3}, {"max_no_progress": 0}, {"cooldown_s": -1}, {"timeout_s": 0}]
)
def test_a_misspelt_key_or_impossible_value_is_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(pydantic.ValidationError):
        BreakerConfig.model_validate(bad)


# Counting


def test_a_success_with_progress_resets_the_failure_no_progress_and_error_counts() -> None:
    breaker, _ = feed([fail(), fail(), IDLE, PROGRESS])
    assert (breaker.consecutive_failures, breaker.no_progress, breaker.same_error) == (0, 0, 0)
    assert breaker.last_error is None


def test_a_success_without_progress_counts_as_no_progress_and_ends_the_failure_streak() -> None:
    breaker, _ = feed([fail(), fail(), IDLE])
    assert (breaker.consecutive_failures, breaker.no_progress) == (0, 1)


def test_a_repeated_error_counts_as_a_failure_and_as_the_same_error() -> None:
    breaker, _ = feed([fail("timeout after 31s"), fail("timeout after 29s")])
    assert (breaker.consecutive_failures, breaker.same_error) == (2, 2)
    assert breaker.last_error == "timeout after <n>s"


def test_a_different_error_restarts_the_same_error_count_at_one() -> None:
    breaker, _ = feed([fail("a"), fail("a"), fail("b")])
    assert (breaker.consecutive_failures, breaker.same_error, breaker.last_error) == (3, 1, "b")


def test_a_failure_without_an_error_is_not_a_repeat_of_anything() -> None:
    breaker, _ = feed([fail(None), fail(None)])
    assert (breaker.consecutive_failures, breaker.same_error) == (2, 0)


def test_a_failure_neither_counts_nor_clears_no_progress() -> None:
    # Given a loop alternating failures and idle successes, which never fails twice in a row
    breaker, trips = feed([IDLE, fail("a"), IDLE, fail("b"), IDLE])
    # Then the no-progress count still catches it
    assert [trip.reason for trip in trips] == ["no_progress"]
    assert breaker.no_progress == 3


def test_the_caller_may_pass_raw_error_text() -> None:
    report = fail("Error: /tmp/ws-81/build failed\n  at line 3")
    assert report.error == "Error: <path> failed"
    assert fail("   \n").error is None


# Opening


def test_consecutive_failures_open_the_breaker_with_the_streak_and_threshold() -> None:
    breaker, trips = feed([fail(f"error {letter}") for letter in "abcde"])
    assert breaker.state is BreakerState.OPEN
    assert breaker.reason == "consecutive_failures"
    assert breaker.opened_at == T0 + timedelta(minutes=4)
    assert trips == [
        Trip(
            reason="consecutive_failures",
            numbers={"consecutive_failures": 5, "threshold": 5},
            message="circuit breaker opened: 5 iterations in a row failed (threshold 5); last error: error e",
        )
    ]


def test_failures_without_an_error_text_open_the_breaker_without_naming_one() -> None:
    _, trips = feed([fail(None)] * 5)
    assert trips[0].message == "circuit breaker opened: 5 iterations in a row failed (threshold 5)"


def test_no_progress_opens_the_breaker_with_a_message_naming_the_numbers() -> None:
    _, trips = feed([IDLE, IDLE, IDLE])
    assert trips[0].reason == "no_progress"
    assert trips[0].numbers == {"no_progress": 3, "threshold": 3}
    assert trips[0].message == (
        "circuit breaker opened: 3 iterations in a row made no change to the workspace (threshold 3)"
    )


def test_the_same_error_opens_the_breaker_even_when_idle_successes_break_the_streak() -> None:
    config = BreakerConfig(max_no_progress=10, max_same_error=3)
    _, trips = feed([fail("exit 1"), IDLE, fail("exit 2"), IDLE, fail("exit 3")], config=config)
    assert [trip.reason for trip in trips] == ["same_error"]
    assert trips[0].numbers == {"same_error": 3, "threshold": 3}
    assert "(exit <n>)" in trips[0].message


def test_thresholds_come_from_the_configuration() -> None:
    _, trips = feed([fail(), fail()], config=BreakerConfig(max_consecutive_failures=2))
    assert [trip.reason for trip in trips] == ["consecutive_failures"]


def test_the_wall_clock_timeout_opens_the_breaker_with_elapsed_and_limit() -> None:
    config = BreakerConfig(timeout_s=3600)
    breaker, trip = check_timeout(Breaker(), T0, config, T0 + timedelta(seconds=3599))
    assert trip is None
    breaker, trip = check_timeout(breaker, T0, config, T0 + timedelta(seconds=3600))
    assert trip is not None
    assert trip.reason == "timeout"
    assert trip.numbers == {"elapsed_s": 3600, "timeout_s": 3600}
    assert breaker.state is BreakerState.OPEN


def test_without_a_timeout_the_run_may_last_forever() -> None:
    assert check_timeout(Breaker(), T0, CONFIG, T0 + timedelta(days=365)) == (Breaker(), None)


def test_a_timeout_is_not_lifted_by_the_cooldown_only_by_a_resume_which_restarts_the_clock() -> None:
    config = BreakerConfig(timeout_s=60, cooldown_s=0)
    # Given a breaker already open for no progress when the run's time runs out
    breaker, trip = check_timeout(opened(config), T0, config, T0 + timedelta(seconds=60))
    # Then the timeout takes over and no trial iteration runs
    assert trip is not None
    assert breaker.reason == "timeout"
    assert may_run(breaker, config, T0 + timedelta(days=1)) == (breaker, False)
    # When the user resumes, the run gets another timeout_s from then
    resumed = reset(breaker, now=T0 + timedelta(seconds=100))
    assert check_timeout(resumed, T0, config, T0 + timedelta(seconds=159))[1] is None
    assert check_timeout(resumed, T0, config, T0 + timedelta(seconds=160))[1] is not None


def test_reports_arriving_while_open_change_nothing() -> None:
    breaker = opened()
    assert feed([fail(), PROGRESS, IDLE], breaker) == (breaker, [])


# Recovering


def test_may_run_holds_while_open_then_lets_one_trial_through_after_the_cooldown() -> None:
    breaker = opened()
    assert may_run(breaker, CONFIG, T0 + timedelta(minutes=29, seconds=59)) == (breaker, False)
    trial, allowed = may_run(breaker, CONFIG, T0 + timedelta(minutes=30))
    assert allowed
    assert trial.state is BreakerState.HALF_OPEN
    assert may_run(trial, CONFIG, T0 + timedelta(hours=5)) == (trial, False)


def test_a_trial_that_makes_progress_closes_the_breaker_with_zero_counters() -> None:
    trial, _ = may_run(opened(), CONFIG, T0 + timedelta(hours=1))
    closed, trip = record(trial, PROGRESS, CONFIG, T0 + timedelta(hours=2))
    assert trip is None
    assert closed == Breaker(trips=1)


@pytest.mark.parametrize(
    ("report", "outcome"), [(fail(), "failed"), (IDLE, "made no change to the workspace")]
)
def test_a_trial_that_fails_or_changes_nothing_opens_the_breaker_again_from_now(
    report: IterationReport, outcome: str
) -> None:
    trial, _ = may_run(opened(), CONFIG, T0 + timedelta(hours=1))
    breaker, trip = record(trial, report, CONFIG, T0 + timedelta(hours=2))
    assert trip is not None
    assert trip.reason == "half_open_failed"
    assert trip.message == (
        f"circuit breaker opened again: the trial iteration after the cooldown {outcome}; next trial in 1800s"
    )
    assert (breaker.state, breaker.opened_at, breaker.trips) == (
        BreakerState.OPEN,
        T0 + timedelta(hours=2),
        2,
    )


def test_a_resume_closes_the_breaker_with_zero_counters_and_keeps_the_trip_count() -> None:
    assert reset(opened()) == Breaker(trips=1)


def test_the_breaker_survives_a_round_trip_through_json() -> None:
    breaker = opened()
    assert Breaker.model_validate_json(breaker.model_dump_json()) == breaker


def test_record_returns_a_new_breaker_and_leaves_its_input_alone() -> None:
    breaker = Breaker()
    record(breaker, fail(), CONFIG, T0)
    assert breaker == Breaker()
    with pytest.raises(pydantic.ValidationError):
        breaker.state = BreakerState.OPEN  # type: ignore[misc]


# Error signatures


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("timeout after 31s", "timeout after 29s"),
        ("FileNotFoundError: /work/a/b.py", "FileNotFoundError: ./c/d.py"),
        ("bad object 3f9a2c1d0e", "bad object 0c2d5e7f19"),
        ("pointer 0xdeadbeef", "pointer 0x1"),
        ("job 123e4567-e89b-12d3-a456-426614174000 died", "job 00000000-aaaa-bbbb-cccc-000000000000 died"),
        ("error: x\nmore detail 1", "error: x\nother detail 2"),
    ],
)
def test_occurrences_of_the_same_error_get_the_same_signature(first: str, second: str) -> None:
    assert normalise_error(first) == normalise_error(second)


def test_different_errors_get_different_signatures() -> None:
    assert normalise_error("timeout after 3s") != normalise_error("connection refused")


def test_a_traceback_is_named_by_its_last_line() -> None:
    text = 'Traceback (most recent call last):\n  File "/app/x.py", line 3\nKeyError: 7\n'
    assert normalise_error(text) == "KeyError: <n>"


@given(st.text())
def test_normalising_a_signature_again_changes_nothing(text: str) -> None:
    signature = normalise_error(text)
    assert normalise_error(signature) == signature
    assert "\n" not in signature
    assert len(signature) <= 200


# Properties

reports = st.builds(
    IterationReport,
    failed=st.booleans(),
    error=st.sampled_from([None, "a", "b", "timeout after 1s"]),
    progress=st.booleans(),
)
thresholds = st.integers(min_value=1, max_value=6)
configs = st.builds(
    BreakerConfig,
    max_consecutive_failures=thresholds,
    max_no_progress=thresholds,
    max_same_error=thresholds,
    cooldown_s=st.floats(min_value=0, max_value=7200),
)


@given(configs, st.lists(reports, max_size=30))
def test_the_breaker_never_opens_before_a_counter_reaches_its_threshold(
    config: BreakerConfig, sequence: list[IterationReport]
) -> None:
    breaker = Breaker()
    for report in sequence:
        breaker, trip = record(breaker, report, config, T0)
        reached = {
            "consecutive_failures": breaker.consecutive_failures >= config.max_consecutive_failures,
            "same_error": breaker.same_error >= config.max_same_error,
            "no_progress": breaker.no_progress >= config.max_no_progress,
        }
        assert (trip is not None) == any(reached.values())
        if trip is not None:
            assert reached[trip.reason]
            return


@given(configs, st.lists(st.sampled_from([None, "a", "b"]), min_size=6, max_size=6))
def test_n_failures_in_a_row_open_the_breaker_for_consecutive_failures(
    config: BreakerConfig, errors: list[str | None]
) -> None:
    n = config.max_consecutive_failures
    config = config.model_copy(
        update={
            "max_no_progress": max(n, config.max_no_progress),
            "max_same_error": max(n, config.max_same_error),
        }
    )
    breaker, trips = feed([fail(error) for error in errors[:n]], config=config)
    assert [trip.reason for trip in trips] == ["consecutive_failures"]
    assert trips[0].numbers == {"consecutive_failures": n, "threshold": n}
    assert breaker.state is BreakerState.OPEN


@given(configs, st.lists(st.tuples(reports, st.integers(min_value=0, max_value=7200)), max_size=30))
def test_after_any_sequence_a_resume_gives_a_closed_breaker_with_zero_counters(
    config: BreakerConfig, steps: list[tuple[IterationReport, int]]
) -> None:
    breaker, now = Breaker(), T0
    for report, wait_s in steps:
        now += timedelta(seconds=wait_s)
        breaker, _allowed = may_run(breaker, config, now)
        breaker, _trip = record(breaker, report, config, now)
    resumed = reset(breaker)
    assert resumed.state is BreakerState.CLOSED
    assert (resumed.consecutive_failures, resumed.no_progress, resumed.same_error) == (0, 0, 0)
    assert (resumed.last_error, resumed.opened_at, resumed.reason) == (None, None, None)
    assert may_run(resumed, config, now) == (resumed, True)


@given(configs, st.lists(st.floats(min_value=0, max_value=14400), min_size=1, max_size=20))
def test_may_run_says_no_before_the_cooldown_and_yes_exactly_once_after_it(
    config: BreakerConfig, offsets_s: list[float]
) -> None:
    breaker = opened(config)
    answers = []
    for offset in sorted(timedelta(seconds=offset_s) for offset_s in offsets_s):
        breaker, allowed = may_run(breaker, config, T0 + offset)
        answers.append((offset >= timedelta(seconds=config.cooldown_s), allowed))
    assert all(not allowed for cooled, allowed in answers if not cooled)
    cooled_answers = [allowed for cooled, allowed in answers if cooled]
    assert cooled_answers == ([True] + [False] * (len(cooled_answers) - 1) if cooled_answers else [])
