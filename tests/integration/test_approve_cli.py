"""``raas approve`` through the API (issue #25, point 2): what a project waits for is decided once,
and a project that waits for nothing answers one line, a non-zero exit, nothing changed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from orchestrator.cli import app
from shared import events
from shared.db import session_scope
from shared.models import Approval, Project, ProjectStatus
from tests.support.engine import Engine, cli_env, engine
from tests.support.records import event_log, tool

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.usefixtures("services")]

COMPLETE = tool("task_complete", {"summary": "done"})


@contextmanager
def _cli(eng: Engine) -> Iterator[CliRunner]:
    with cli_env(eng):
        yield CliRunner()


def test_approving_a_project_that_waits_for_nothing_is_one_line_and_changes_nothing(tmp_path: Path) -> None:
    with engine({"responses": [COMPLETE]}, tmp_path) as eng:
        project_id = eng.submit()
        with _cli(eng) as cli:
            result = cli.invoke(app, ["approve", project_id, "-m", "ok"])
        assert result.exit_code != 0
        assert "waits for no approval (running)" in str(result.exception)
        assert "\n" not in str(result.exception)
        with session_scope() as session:
            assert session.get_one(Project, project_id).status == ProjectStatus.RUNNING
            count = select(func.count()).select_from(Approval).where(Approval.project_id == project_id)
            assert session.scalar(count) == 0
        assert event_log(project_id, events.APPROVAL_DECIDED) == []


def test_raas_approve_delivers_the_waiting_work_and_a_second_is_told_the_first(tmp_path: Path) -> None:
    with engine({"responses": [COMPLETE]}, tmp_path) as eng:
        project_id = eng.submit(raas_toml="[approvals]\ndiff = true\n")
        eng.run_to_end(project_id)
        with session_scope() as session:
            assert session.get_one(Project, project_id).status == ProjectStatus.WAITING_FOR_APPROVAL
        with _cli(eng) as cli:
            first = cli.invoke(app, ["approve", project_id, "-m", "looks good"])
            second = cli.invoke(app, ["approve", project_id])
        assert first.exit_code == 0, first.output
        assert first.output == f"{project_id}: approve the work before delivery approved\n"
        assert second.exit_code != 0
        assert "diff#1 was approved by operator" in str(second.exception)
        with session_scope() as session:
            assert session.get_one(Project, project_id).status == ProjectStatus.COMPLETED
        assert len(event_log(project_id, events.APPROVAL_DECIDED)) == 1
        assert len(event_log(project_id, events.PROJECT_COMPLETED)) == 1
