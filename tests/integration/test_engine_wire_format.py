"""The seven recorded Messages API streams, each replayed through a real iteration.

What the SDK makes of each is pinned in ``test_scripted_model.py`` (and the fixtures' README);
here the promise is what the engine does with it: the worker survives every one, never runs a
tool call it should not, and never takes a broken reply for a completion.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shared import events
from shared.models import ErrorKind, IterationStatus, ProjectStatus
from tests.support.engine import engine
from tests.support.records import (
    bodies,
    event_log,
    iterations,
    messages,
    project,
    replay,
    text,
    tool,
    tool_results,
    workspace_git,
)

pytestmark = [pytest.mark.integration, pytest.mark.docker]

RECORDED_TOOL_USE_ID = "toolu_01NRLabsLyVHZPKxbKvkfSMn"


def test_a_recorded_plain_answer_is_an_ordinary_turn(services: dict[str, str], tmp_path: Path) -> None:
    with engine({"responses": [replay("basic_response.txt")]}, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        row = iterations(project_id)[0]
        assert (row.status, row.completed_task, row.error) == (IterationStatus.SUCCEEDED, False, None)
        reply = messages(project_id)[1]
        assert (reply.role, reply.stop_reason) == ("assistant", "end_turn")
        assert reply.content == [{"type": "text", "text": "Hello there!"}]
        assert (reply.input_tokens, reply.output_tokens) == (11, 6)
        chunks = event_log(project_id, events.AGENT_OUTPUT_CHUNK)
        assert "".join(c.data["text"] for c in chunks) == "Hello there!"


def test_a_recorded_call_of_an_unknown_tool_gets_an_error_result(
    services: dict[str, str], tmp_path: Path
) -> None:
    script = {"responses": [replay("tool_use_response.txt"), text("No weather tool, then.")]}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        answer = bodies(eng, project_id)[1]["messages"]
        # The call goes back as the model sent it (its partial JSON assembled, unknown fields left out).
        assert answer[-2]["content"][1] == {
            "type": "tool_use",
            "id": RECORDED_TOOL_USE_ID,
            "name": "get_weather",
            "input": {"location": "Paris"},
        }
        (result,) = tool_results(answer[-1])
        assert (result["tool_use_id"], result["is_error"]) == (RECORDED_TOOL_USE_ID, True)
        assert "unknown tool 'get_weather'" in result["content"]
        assert iterations(project_id)[0].status == IterationStatus.SUCCEEDED


def test_a_recorded_tool_call_with_invalid_json_is_not_run_and_the_model_is_told(
    services: dict[str, str], tmp_path: Path
) -> None:
    script = {"responses": [replay("tool_use_invalid_json_response.txt"), text("I will resend it.")]}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        (result,) = tool_results(bodies(eng, project_id)[1]["messages"][-1])
        assert (result["tool_use_id"], result["is_error"]) == (RECORDED_TOOL_USE_ID, True)
        # Refused before any tool is looked up: not "unknown tool", but "not valid JSON".
        assert result["content"].startswith("Not run: the tool input was not valid JSON")
        assert "celsius}" in result["content"]
        (executed,) = event_log(project_id, events.TOOL_EXECUTED)
        assert executed.data["output"].startswith("Not run:")
        # The iteration's record keeps what happened: the refused call and the error result.
        stored = messages(project_id)
        assert stored[2].content == [result]
        assert iterations(project_id)[0].status == IterationStatus.SUCCEEDED


def test_a_tool_call_cut_off_at_max_tokens_is_never_run(services: dict[str, str], tmp_path: Path) -> None:
    script = {
        "responses": [
            replay("incomplete_partial_json_response.txt"),
            # A cut-off call whose input parses and would write a file if it were run.
            {
                "content": [
                    {"type": "tool_use", "name": "write", "input": {"path": "cut.txt", "content": "x"}}
                ],
                "stop_reason": "max_tokens",
            },
            text("Giving up on the file."),
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        assert event_log(project_id, events.AGENT_TOOL_CALL) == []
        assert event_log(project_id, events.TOOL_EXECUTED) == []
        retries = event_log(project_id, events.LLM_RETRY)
        assert [(r.data["reason"], r.data["tool_calls_discarded"]) for r in retries] == [
            ("max_tokens", 1)
        ] * 2
        # Each retry asks for more room; no tool result is ever sent back.
        requests = bodies(eng, project_id)
        assert [r["max_tokens"] for r in requests] == [8192, 16384, 32768]
        assert all(r["messages"] == requests[0]["messages"] for r in requests)
        row = iterations(project_id)[0]
        assert (row.status, row.files_changed) == (IterationStatus.SUCCEEDED, [])
        assert "cut.txt" not in workspace_git(eng, project_id, "ls-tree", "-r", "--name-only", "main")


def test_a_recorded_refusal_fails_the_iteration_and_is_not_a_completion(
    services: dict[str, str], tmp_path: Path
) -> None:
    with engine({"responses": [replay("refusal_response.txt")]}, tmp_path) as eng:
        project_id = eng.submit(raas_toml="max_iterations = 1")
        eng.run_next(project_id)

        row = iterations(project_id)[0]
        assert (row.status, row.error_kind, row.completed_task) == (
            IterationStatus.FAILED,
            ErrorKind.REFUSAL,
            False,
        )
        assert "category: cyber" in (row.error or "")
        (error,) = event_log(project_id, events.ITERATION_ERROR)
        assert error.data["kind"] == "refusal"
        assert project(project_id).status != ProjectStatus.COMPLETED


def test_usage_sent_only_at_the_end_of_a_stream_is_counted(services: dict[str, str], tmp_path: Path) -> None:
    with engine({"responses": [replay("missing_usage_response.txt")]}, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        reply = messages(project_id)[1]
        assert reply.content == [{"type": "text", "text": "hi"}]
        assert (
            reply.input_tokens,
            reply.output_tokens,
            reply.cache_creation_input_tokens,
            reply.cache_read_input_tokens,
        ) == (11, 1, 3, 5)
        row = iterations(project_id)[0]
        assert (row.status, row.error) == (IterationStatus.SUCCEEDED, None)


def test_a_reply_without_a_stop_reason_is_retried_not_taken_as_the_end(
    services: dict[str, str], tmp_path: Path
) -> None:
    script = {
        "responses": [
            replay("out_of_order_response.txt"),
            tool("bash", {"command": "echo resumed"}),
            text("Ok."),
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        (retry,) = event_log(project_id, events.LLM_RETRY)
        assert retry.data["reason"] == "incomplete"
        assert "stop reason" in retry.data["error"]
        first, second, _ = bodies(eng, project_id)
        assert second["messages"] == first["messages"]
        # The session went on past the incomplete reply: the next answer's tool ran.
        (executed,) = event_log(project_id, events.TOOL_EXECUTED)
        assert executed.data["output"] == "exit code 0\nresumed"
        row = iterations(project_id)[0]
        assert (row.status, row.completed_task) == (IterationStatus.SUCCEEDED, False)
