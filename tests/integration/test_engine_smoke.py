"""The in-process engine harness itself runs a project (the base for the engine's rule tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.db import session_scope
from shared.models import Project, ProjectStatus
from tests.support.engine import engine

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


def test_an_iteration_runs_in_a_warm_pool_sandbox(services: dict[str, str], tmp_path: Path) -> None:
    import docker

    from workers.sandbox.base import SandboxLimits
    from workers.sandbox.pool import SandboxPool

    client = docker.from_env()
    with engine(WRITE_THEN_COMPLETE, tmp_path) as eng:
        pool = SandboxPool(
            size=1,
            image=services["sandbox_image"],
            limits=SandboxLimits(),
            labels={"raas.test": tmp_path.name},
            client=client,
            name_prefix=f"raas-pool-test-{tmp_path.name[-8:]}",
            scratch_dir=tmp_path / "pool",
        )
        try:
            assert pool.wait_until_full(60)
            warm = {c.name for c in client.containers.list(filters={"label": f"raas.test={tmp_path.name}"})}
            eng.pool = pool
            project_id = eng.submit()
            eng.run_to_end(project_id)
            with session_scope() as session:
                assert session.get_one(Project, project_id).status == ProjectStatus.COMPLETED
            # the warm sandbox did the work, and was removed after it
            names = {
                c.name
                for c in client.containers.list(all=True, filters={"label": f"raas.test={tmp_path.name}"})
            }
            assert warm
            assert not warm & names
        finally:
            pool.close()
            client.close()
