"""``raas eval check`` (issue #27, point 1): in fresh containers of the sandbox image, a task is
admitted only when its hidden test fails on the unsolved workspace and passes after its oracle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from workers.evaluation import EVAL_LABEL

pytestmark = [pytest.mark.integration, pytest.mark.docker]

SUITE = Path(__file__).resolve().parents[1] / "fixtures" / "evals" / "check"


def test_check_admits_only_tasks_whose_oracle_passes_and_whose_unsolved_workspace_fails(
    tmp_path: Path,
) -> None:
    # A data directory of its own: its containers are told apart from other tests' by their mounts
    data = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "eval", "check", str(SUITE), "--json"],
        env={**os.environ, "RAAS_DATA_DIR": str(data)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 1, done.stderr  # not every task was admitted
    verdicts = {r["task"]: (r["admitted"], r["reason"]) for r in json.loads(done.stdout)}
    assert verdicts == {
        "already-solved": (False, "the unsolved workspace already passes tests/test.sh"),
        "good": (True, "oracle passes, unsolved workspace fails"),
        "no-oracle": (False, "no solution/solve.sh: an oracle must show the task can be solved"),
        "oracle-fails": (False, "the oracle's workspace fails tests/test.sh (exit 1: no output)"),
    }
    # Every container it made is gone (the low-level listing: another test's container may go
    # between a listing and its inspection).
    client = docker.from_env()
    try:
        listed = client.api.containers(all=True, filters={"label": f"{EVAL_LABEL}=true"})
        mine = [c["Id"] for c in listed if any(str(data) in m.get("Source", "") for m in c.get("Mounts", []))]
        assert mine == []
    finally:
        client.close()
    # The suite's own files are untouched: the oracle ran on a copy.
    assert (SUITE / "good" / "workspace" / "answer.txt").read_text() == "BUG\n"


def test_check_of_a_suite_with_a_task_missing_its_test_says_so_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "suite.toml").write_text('[suite]\nname = "s"\n')
    (tmp_path / "t1" / "workspace").mkdir(parents=True)
    (tmp_path / "t1" / "task.toml").write_text("[task]\n")
    (tmp_path / "t1" / "instruction.md").write_text("Do it.\n")
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "eval", "check", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"error: {tmp_path.name}/t1: no tests/test.sh (the hidden test that decides success); add it"
    ]
