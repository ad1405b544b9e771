"""The iteration loop: the turn cap, and what counts as completing the task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shared import events
from shared.models import IterationStatus, ProjectStatus
from tests.support.engine import engine
from tests.support.records import event_log, iterations, project, text, tool

pytestmark = [pytest.mark.integration, pytest.mark.docker]

MARKER = "<promise>COMPLETE</promise>"


def test_the_turn_cap_ends_an_iteration_after_max_turns_llm_calls(
    services: dict[str, str], tmp_path: Path
) -> None:
    # Given: a model that would call tools forever.
    script = {"responses": [tool("bash", {"command": "echo again"})], "when_exhausted": "repeat_last"}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(raas_toml="max_turns = 3\nmax_iterations = 1")
        eng.run_next(project_id)

        assert len(eng.requests(project_id)) == 3
        (row,) = iterations(project_id)
        assert (row.status, row.completed_task) == (IterationStatus.SUCCEEDED, False)
        assert len(event_log(project_id, events.TOOL_EXECUTED)) == 3
        (end,) = event_log(project_id, events.ITERATION_COMPLETE)
        assert end.data["completed_task"] is False
        assert project(project_id).status == ProjectStatus.FAILED


def test_the_completion_marker_ending_a_turn_completes_the_task(
    services: dict[str, str], tmp_path: Path
) -> None:
    script = {
        "responses": [
            # Naming the marker while still calling tools is not ending the turn with it.
            {
                "content": [
                    {"type": "text", "text": f"When done I will say {MARKER}."},
                    {"type": "tool_use", "name": "bash", "input": {"command": "true"}},
                ]
            },
            text("Not finished yet; the next iteration goes on."),
            text(f"All tests pass. {MARKER}"),
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(raas_toml=f'completion_marker = "{MARKER}"')

        assert eng.run_to_end(project_id) == 2

        first, second = iterations(project_id)
        assert (first.completed_task, second.completed_task) == (False, True)
        assert MARKER in (second.summary or "")
        assert project(project_id).status == ProjectStatus.COMPLETED


def test_a_completion_threshold_of_two_needs_two_consecutive_completing_iterations(
    services: dict[str, str], tmp_path: Path
) -> None:
    # Each iteration changes the workspace (progress, so the circuit breaker stays closed).
    def iteration(n: int, ending: str) -> list[dict[str, Any]]:
        return [tool("write", {"path": f"step{n}.txt", "content": f"{n}\n"}), text(ending)]

    done, not_done = f"Done. {MARKER}", "More to do."
    script = {
        "responses": [*iteration(1, done), *iteration(2, not_done), *iteration(3, done), *iteration(4, done)]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(raas_toml=f'completion_marker = "{MARKER}"\ncompletion_threshold = 2')

        # One completing iteration is not enough, nor two that are not consecutive.
        eng.run_next(project_id)
        assert project(project_id).status == ProjectStatus.RUNNING
        assert eng.run_to_end(project_id) == 3

        rows = iterations(project_id)
        assert [r.completed_task for r in rows] == [True, False, True, True]
        assert project(project_id).status == ProjectStatus.COMPLETED
        assert len(event_log(project_id, events.PROJECT_COMPLETED)) == 1
