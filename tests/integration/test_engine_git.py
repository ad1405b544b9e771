"""Every iteration that changes the workspace is one commit, authored by its agent (DESIGN.md rule 7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.engine import engine
from tests.support.records import agent, iterations, text, tool, workspace_git

pytestmark = [pytest.mark.integration, pytest.mark.docker]


def test_each_iteration_is_a_commit_authored_by_its_agent(services: dict[str, str], tmp_path: Path) -> None:
    script = {
        "responses": [
            tool("write", {"path": "a.txt", "content": "a\n"}),
            text("Wrote a.txt."),
            tool("bash", {"command": "mkdir -p src && echo b > src/b.txt && rm old.txt"}),
            text("Wrote src/b.txt, removed old.txt."),
        ]
    }
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(files={"old.txt": "old\n"})
        eng.run_next(project_id)
        eng.run_next(project_id)

        first, second = iterations(project_id)[:2]
        assert first.files_changed == ["a.txt"]
        assert sorted(second.files_changed) == ["old.txt", "src/b.txt"]
        assert second.base_sha == first.commit_sha
        log = workspace_git(eng, project_id, "log", "--format=%H %an <%ae>|%s", "main").splitlines()
        author = f"agent-{agent(project_id).id}"
        assert log[:2] == [
            f"{second.commit_sha} {author} <{author}@constellation.local>|Iteration 2: test",
            f"{first.commit_sha} {author} <{author}@constellation.local>|Iteration 1: test",
        ]
        assert log[2].endswith("|Initial workspace")
        assert workspace_git(eng, project_id, "show", "main:src/b.txt") == "b"


def test_an_iteration_that_changes_nothing_makes_no_commit(services: dict[str, str], tmp_path: Path) -> None:
    script = {"responses": [tool("read", {"path": "notes.txt"}), text("Read it; nothing to change.")]}
    with engine(script, tmp_path) as eng:
        project_id = eng.submit(files={"notes.txt": "keep\n"})
        initial = workspace_git(eng, project_id, "rev-parse", "main")
        eng.run_next(project_id)

        row = iterations(project_id)[0]
        assert (row.base_sha, row.commit_sha, row.files_changed) == (initial, initial, [])
        assert workspace_git(eng, project_id, "rev-parse", "main") == initial
        assert workspace_git(eng, project_id, "rev-list", "--count", "main") == "1"
