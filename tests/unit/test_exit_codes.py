"""``raas`` exits by one table, and the README lists the same numbers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.cli.exit_codes import ExitCode
from shared.models import ProjectStatus

pytestmark = pytest.mark.unit

README = Path(__file__).resolve().parents[2] / "README.md"


def test_how_a_project_ended_decides_the_exit_code() -> None:
    assert ExitCode.for_status(ProjectStatus.COMPLETED) == 0
    assert ExitCode.for_status(ProjectStatus.FAILED) == ExitCode.for_status(ProjectStatus.STOPPED) == 1
    assert ExitCode.for_status(ProjectStatus.PAUSED) == 2
    assert ExitCode.for_status(ProjectStatus.WAITING_FOR_APPROVAL) == 2  # raas run stops at an approval


def test_the_readme_lists_every_exit_code() -> None:
    text = " ".join(README.read_text(encoding="utf-8").split())
    listed = re.search(r"Exit codes \(one table, `orchestrator/cli/exit_codes.py`\): ([^.]*)\.", text)
    assert listed is not None
    numbers = {int(n) for n in re.findall(r"\b(\d+) ", listed.group(1) + " ")}
    assert numbers == {int(code) for code in ExitCode}
