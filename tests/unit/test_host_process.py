"""An agent CLI run on the host (embedded runs): read to its end, or ended with its reader."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from workers.sandbox.base import SandboxLimits
from workers.sandbox.local import LocalSandbox

pytestmark = pytest.mark.unit


def test_a_process_read_to_its_end_reports_its_exit_code(tmp_path: Path) -> None:
    sandbox = LocalSandbox.start(host_workspace=tmp_path, limits=SandboxLimits())
    process = sandbox.spawn(["sh", "-c", "echo one; echo two; exit 3"], {}, 30.0)
    assert list(process.lines()) == ["one", "two"]
    assert process.exit_code == 3
    sandbox.close()


def test_a_process_whose_reader_stops_early_is_killed_not_left_running(tmp_path: Path) -> None:
    # Given a process that would run for a minute, read only to its first line
    sandbox = LocalSandbox.start(host_workspace=tmp_path, limits=SandboxLimits())
    process = sandbox.spawn(["sh", "-c", "echo one; sleep 60"], {}, 120.0)
    lines = process.lines()
    assert next(lines) == "one"
    # When its reader is closed
    lines.close()
    # Then the process was killed and waited for
    assert process.exit_code == -signal.SIGKILL
    sandbox.close()
