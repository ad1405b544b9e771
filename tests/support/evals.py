"""``raas eval`` through a running stack: wait for a run to end, read its report."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from shared.db import session_scope
from shared.models.evals import EvalRun, EvalRunStatus
from tests.support.stack import Stack


def wait_run(stack: Stack, run_id: str, timeout_s: float, poll_s: float = 1.0) -> None:
    """Until the eval run is no longer running; the test fails with the stack's logs after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with session_scope() as session:
            if session.get_one(EvalRun, run_id).status != EvalRunStatus.RUNNING:
                return
        time.sleep(poll_s)
    pytest.fail(f"eval run {run_id} did not end within {timeout_s}s\n{stack.logs()}")


def run_report(stack: Stack, run_id: str, *flags: str) -> Any:
    """``raas eval report RUN FLAGS``: parsed with ``--json``, else the text."""
    done = stack.cli("eval", "report", run_id, *flags)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if "--json" in flags else done.stdout
