"""A model's bad tool call becomes an error result the model reads; the iteration goes on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shared import events
from shared.models import IterationStatus
from tests.support.engine import engine
from tests.support.records import (
    bodies,
    event_log,
    iterations,
    text,
    tool,
    tool_results,
    workspace_git,
)
from workers.tools import TOOL_NAMES, TOOLS
from workers.tools.base import input_schema

pytestmark = [pytest.mark.integration, pytest.mark.docker]


def test_the_model_is_shown_each_tools_schema_generated_from_its_argument_model(
    services: dict[str, str], tmp_path: Path
) -> None:
    with engine({"responses": [text("Nothing to do.")]}, tmp_path) as eng:
        project_id = eng.submit()
        eng.run_next(project_id)

        (body,) = bodies(eng, project_id)
    shown = {spec["name"]: spec["input_schema"] for spec in body["tools"]}
    assert {name: shown[name] for name in TOOL_NAMES} == {
        name: input_schema(TOOLS[name].args_model) for name in TOOL_NAMES
    }


@pytest.mark.parametrize(
    ("name", "args", "error"),
    [
        pytest.param("frobnicate", {"x": 1}, "unknown tool 'frobnicate'", id="unknown-tool"),
        pytest.param(
            "write", {"path": "b.txt"}, "missing required argument 'content'", id="missing-argument"
        ),
        pytest.param(
            "edit",
            {"path": "notes.txt", "old_text": "same", "new_text": "other"},
            "old_text occurs 2 times in notes.txt",
            id="ambiguous-edit",
        ),
    ],
)
def test_a_bad_tool_call_is_answered_with_an_error_result_and_changes_nothing(
    services: dict[str, str], tmp_path: Path, name: str, args: dict[str, Any], error: str
) -> None:
    script = {"responses": [tool(name, args, use_id="toolu_01BadCall"), text("I see; stopping here.")]}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(files={"notes.txt": "same\nsame\n"})
        eng.run_next(project_id)

        # The model is told, in the next request, with the error flag set.
        (result,) = tool_results(bodies(eng, project_id)[1]["messages"][-1])
        assert result["tool_use_id"] == "toolu_01BadCall"
        assert result["is_error"] is True
        assert error in result["content"]
        (executed,) = event_log(project_id, events.TOOL_EXECUTED)
        assert executed.data["is_error"] is True
        # The worker survives and the iteration ends normally, with the workspace untouched.
        row = iterations(project_id)[0]
        assert (row.status, row.error, row.files_changed) == (IterationStatus.SUCCEEDED, None, [])
        assert workspace_git(eng, project_id, "show", "main:notes.txt") == "same\nsame"
        assert workspace_git(eng, project_id, "rev-list", "--count", "main") == "1"
