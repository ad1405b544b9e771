"""What a follower sees live: coalesced output chunks, tool calls and the iteration's lifecycle."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared import events
from tests.support.engine import engine
from tests.support.records import agent, event_log, iterations, tool

pytestmark = [pytest.mark.integration, pytest.mark.docker]


def test_output_chunks_carry_all_the_text_in_fewer_events_than_deltas(
    services: dict[str, str], tmp_path: Path
) -> None:
    words = " ".join(f"word{n}" for n in range(300))
    script = {"responses": [{"content": [{"type": "text", "text": words}]}], "text_chunk_words": 1}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        chunks = event_log(project_id, events.AGENT_OUTPUT_CHUNK)
        assert "".join(chunk.data["text"] for chunk in chunks) == words
        assert 1 <= len(chunks) < 300  # one delta per word
        iteration_id = iterations(project_id)[0].id
        assert {chunk.iteration_id for chunk in chunks} == {iteration_id}


def test_tool_calls_and_the_lifecycle_are_events_with_ids(services: dict[str, str], tmp_path: Path) -> None:
    script = {
        "responses": [
            tool("bash", {"command": "echo hello"}, use_id="toolu_01FixedForTheTest"),
            tool("task_complete", {"summary": "said hello"}, use_id="toolu_01Complete"),
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        iteration_id, agent_id = iterations(project_id)[0].id, agent(project_id).id
        log = [e for e in event_log(project_id) if e.iteration_id is not None]
        assert [e.type for e in log] == [
            events.ITERATION_STARTED,
            events.AGENT_TOOL_CALL,
            events.TOOL_EXECUTED,
            events.AGENT_TOOL_CALL,
            events.TOOL_EXECUTED,
            events.ITERATION_COMPLETE,
        ]
        assert {(e.iteration_id, e.agent_id) for e in log} == {(iteration_id, agent_id)}
        started, call, executed, _, _, complete = log
        assert (started.data["number"], started.data["attempt"]) == (1, 1)
        assert call.data == {
            "tool": "bash",
            "input": {"command": "echo hello"},
            "tool_use_id": "toolu_01FixedForTheTest",
        }
        assert executed.data["tool_use_id"] == "toolu_01FixedForTheTest"
        assert (executed.data["is_error"], executed.data["output"]) == (False, "exit code 0\nhello")
        assert complete.data["completed_task"] is True
        assert complete.data["summary"] == "said hello"
        seqs = [e.seq for e in event_log(project_id)]
        assert seqs == list(range(1, len(seqs) + 1))


def test_text_is_sent_live_while_a_slow_tool_call_is_still_streaming(
    services: dict[str, str], tmp_path: Path
) -> None:
    # Given: a sentence, then a tool call whose input takes about 1.5 s to stream.
    sentence = "I will write the notes file now."
    slow_call = {"type": "tool_use", "name": "write", "input": {"path": "notes.txt", "content": "x" * 290}}
    script = {
        "responses": [
            {"content": [{"type": "text", "text": sentence}, slow_call], "delta_delay_s": 0.05},
            tool("task_complete", {"summary": "wrote notes"}),
        ],
        "json_chunk_chars": 10,
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        chunks = event_log(project_id, events.AGENT_OUTPUT_CHUNK)
        assert "".join(c.data["text"] for c in chunks) == sentence
        (call,) = [e for e in event_log(project_id, events.AGENT_TOOL_CALL) if e.data["tool"] == "write"]
        # The whole sentence was out long before the call's input had finished streaming.
        assert (call.ts - chunks[-1].ts).total_seconds() > 1.0
