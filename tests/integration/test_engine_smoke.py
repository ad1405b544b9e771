"""The in-process engine harness itself runs a project (the base for the engine's rule tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.db import session_scope
from shared.models import Project, ProjectStatus
from tests.harness import engine

pytestmark = [pytest.mark.integration, pytest.mark.docker]

WRITE_THEN_COMPLETE = {
    "responses": [
        {"content": [{"type": "tool_use", "name": "write", "input": {"path": "a.txt", "content": "hi\n"}}]},
        {"content": [{"type": "tool_use", "name": "task_complete", "input": {"summary": "wrote a.txt"}}]},
    ]
}


def test_harness_runs_a_project_to_completion(services: dict[str, str], tmp_path: Path) -> None:
    with engine(WRITE_THEN_COMPLETE, tmp_path) as eng:
        project_id = eng.submit()
        assert eng.run_to_end(project_id) == 1
        with session_scope() as session:
            project = session.get_one(Project, project_id)
        assert project.status == ProjectStatus.COMPLETED
        assert len(eng.requests(project_id)) == 2
