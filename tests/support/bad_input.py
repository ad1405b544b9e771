"""What every bad-input test checks: the command failed with one line naming what is wrong, and
the coordinator's state (projects, events, workspaces) is as it was."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sqlalchemy import func, select

from shared.db import session_scope
from shared.models import Event, Project
from tests.support.stack import Stack


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """A non-zero exit and one ``error: ...`` line on stderr holding every fragment."""
    stderr = result.stderr.strip()
    assert result.returncode != 0, result.stdout
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("error: ")
    for fragment in fragments:
        assert fragment in stderr


def coordinator_state(stack: Stack) -> tuple[int, int, list[str]]:
    """The number of projects and events, and the workspaces on disk: equal before and after a refusal."""
    with session_scope() as session:
        projects = session.scalar(select(func.count()).select_from(Project)) or 0
        events = session.scalar(select(func.count()).select_from(Event)) or 0
    workspaces = Path(stack.env["RAAS_DATA_DIR"]) / "workspaces"
    return projects, events, sorted(p.name for p in workspaces.iterdir()) if workspaces.exists() else []
