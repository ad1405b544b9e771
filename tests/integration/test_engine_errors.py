"""LLM errors are classified and handled as DESIGN.md rule 6 says, through real iterations.

A model that refuses every connection is retried within the call's retry budget, each retry said
in an event, and then fails the iteration saying how many attempts were made (issue #22).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.projects import format_event
from shared import events
from shared.models import ErrorKind, IterationStatus, ProjectStatus
from tests.support.engine import engine
from tests.support.loopback import free_port
from tests.support.records import (
    bodies,
    event_log,
    iterations,
    project,
    text,
    tool,
    tool_results,
)
from workers.agent import context

pytestmark = [pytest.mark.integration, pytest.mark.docker]

DONE = "Done for now."


def _assert_retried_once_then_succeeded(project_id: str, reason: str) -> dict[str, Any]:
    (retry,) = event_log(project_id, events.LLM_RETRY)
    assert retry.data["reason"] == reason
    assert retry.data["attempt"] == 1
    row = iterations(project_id)[0]
    assert (row.status, row.error) == (IterationStatus.SUCCEEDED, None)
    assert event_log(project_id, events.ITERATION_ERROR) == []
    return retry.data


def test_rate_limit_is_retried_no_sooner_than_retry_after(services: dict[str, str], tmp_path: Path) -> None:
    script = {
        "responses": [
            {"error": {"status": 429, "message": "slow down", "retry_after_s": 1}},
            text(DONE),
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        retry = _assert_retried_once_then_succeeded(project_id, "rate_limited")
        assert retry["delay_s"] >= 1
        assert "RateLimitError" in retry["error"]
        first, second = eng.requests(project_id)
        assert (second.time - first.time).total_seconds() >= 1
        assert second.body["messages"] == first.body["messages"]


def test_overloaded_is_retried_then_succeeds(services: dict[str, str], tmp_path: Path) -> None:
    script = {"responses": [{"error": {"status": 529}}, text(DONE)]}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        retry = _assert_retried_once_then_succeeded(project_id, "overloaded")
        assert "OverloadedError" in retry["error"]
        assert len(eng.requests(project_id)) == 2


def test_an_error_in_the_middle_of_a_stream_is_retried(services: dict[str, str], tmp_path: Path) -> None:
    script = {
        "responses": [
            {"error": {"type": "overloaded_error"}, "mid_stream": True, "partial_text": "Let me look"},
            text(DONE),
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        _assert_retried_once_then_succeeded(project_id, "overloaded")
        first, second = bodies(eng, project_id)
        # The half-streamed answer is not taken into the conversation.
        assert second["messages"] == first["messages"]


RETRY_BUDGET_S = 5.0


def _refusing_url() -> str:
    """A loopback address where nothing listens: every connection is refused."""
    return f"http://127.0.0.1:{free_port()}"


def test_an_unreachable_model_fails_the_iteration_within_the_retry_budget_saying_each_retry(
    services: dict[str, str], tmp_path: Path
) -> None:
    # Given a model API that refuses every connection, and a retry budget of 5 s
    retry_budget = RETRY_BUDGET_S
    model = {"anthropic_base_url": _refusing_url(), "llm_retry_budget_s": retry_budget}
    with engine({"responses": [text(DONE)]}, tmp_path, **model) as eng:
        project_id = eng.submit()

        # When an iteration calls it
        eng.run_next(project_id)

        # Then each retry was said, with its number and its wait, and the waits kept to the budget
        retries = [e.data for e in event_log(project_id, events.LLM_RETRY)]
        assert retries, "no llm_retry event"
        assert [r["attempt"] for r in retries] == list(range(1, len(retries) + 1))
        assert {r["reason"] for r in retries} == {"unreachable"}
        assert all(r["delay_s"] > 0 for r in retries)
        assert sum(r["delay_s"] for r in retries) <= retry_budget
        # And `raas follow` says it in words
        first = event_log(project_id, events.LLM_RETRY)[0]
        assert "model unreachable, retry 1 in " in format_event(first)
        # And the failed iteration's reason says how many attempts were made, and why it stopped
        row = iterations(project_id)[0]
        assert (row.status, row.error_kind) == (IterationStatus.FAILED, ErrorKind.LLM)
        assert f"model unreachable: LLM call failed after {len(retries) + 1} attempts" in (row.error or "")
        assert f"a retry budget of {retry_budget:g} s" in (row.error or "")


def test_a_rejected_api_key_fails_the_iteration_and_pauses_the_project(
    services: dict[str, str], tmp_path: Path
) -> None:
    script = {"responses": [{"error": {"status": 401}}], "when_exhausted": "repeat_last"}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        row = iterations(project_id)[0]
        assert (row.status, row.error_kind) == (IterationStatus.FAILED, ErrorKind.API_KEY)
        assert "API key" in (row.error or "")
        assert len(eng.requests(project_id)) == 1  # never retried
        assert event_log(project_id, events.LLM_RETRY) == []
        assert project(project_id).status == ProjectStatus.PAUSED
        assert len(event_log(project_id, events.API_KEY_REQUIRED)) == 1
        assert not eng.dispatcher.pending(project_id)


def test_a_prompt_too_long_is_truncated_and_retried(services: dict[str, str], tmp_path: Path) -> None:
    # Given: a fresh-context iteration (the default) whose conversation has grown with tool calls.
    script = {
        "responses": [
            tool("bash", {"command": "seq 1 3000"}),
            tool("bash", {"command": "echo second"}),
            {"error": {"status": 400, "message": "prompt is too long: 212345 tokens > 200000 maximum"}},
            tool("bash", {"command": "echo third"}),
            text(DONE),
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        retry = _assert_retried_once_then_succeeded(project_id, "context_too_long")
        assert retry["delay_s"] == 0
        too_long, retried, next_turn = bodies(eng, project_id)[2:]
        assert len(retried["messages"]) == len(too_long["messages"]) == 5
        # The big, oldest tool output is dropped; the latest one and every tool_use stay.
        assert tool_results(too_long["messages"][2])[0]["content"].startswith("exit code 0\n1\n2\n")
        assert tool_results(retried["messages"][2])[0]["content"] == context.ELIDED
        assert retried["messages"][3:] == too_long["messages"][3:]
        _assert_tool_pairs_intact(retried["messages"])
        # Later turns are cut the same way at once, rather than after another refusal.
        assert next_turn["messages"][:5] == retried["messages"]


def test_a_bad_request_fails_the_iteration_with_an_llm_error(
    services: dict[str, str], tmp_path: Path
) -> None:
    script = {"responses": [{"error": {"status": 400, "message": "messages.0: unexpected field"}}]}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        row = iterations(project_id)[0]
        assert (row.status, row.error_kind) == (IterationStatus.FAILED, ErrorKind.LLM)
        assert "unexpected field" in (row.error or "")
        assert len(eng.requests(project_id)) == 1
        (error,) = event_log(project_id, events.ITERATION_ERROR)
        assert (error.iteration_id, error.data["kind"]) == (row.id, "llm")
        assert "unexpected field" in error.data["error"]
        assert event_log(project_id, events.ITERATION_COMPLETE) == []


def _assert_tool_pairs_intact(messages: list[dict[str, Any]]) -> None:
    """Every tool_result answers a tool_use of the message before it, and every tool_use is answered."""
    for index, message in enumerate(messages):
        blocks = [b for b in message["content"] if isinstance(b, dict)]
        if message["role"] == "assistant":
            asked = {b["id"] for b in blocks if b.get("type") == "tool_use"}
            if asked:
                answer = messages[index + 1]["content"]
                assert asked == {b["tool_use_id"] for b in answer if b.get("type") == "tool_result"}
        else:
            answered = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
            if answered:
                assert index > 0
                before = messages[index - 1]["content"]
                assert answered <= {b["id"] for b in before if b.get("type") == "tool_use"}
