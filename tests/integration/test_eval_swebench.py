"""SWE-bench-style instances imported, then checked in Docker (issue #27, point 1).

Two tiny local git repositories and three instances (tests/support/swebench_repos.py): after
``raas eval import-swebench``, ``raas eval check`` — the real CLI, containers of the sandbox image
with no network — admits the two whose gold patch makes FAIL_TO_PASS and PASS_TO_PASS pass and
refuses the one whose gold patch does not; no test patch line is in any imported workspace.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from tests.support.swebench_repos import TEST_COMMAND, TEST_PATCH_MARKS, make_fixture
from workers.evaluation import EVAL_LABEL

pytestmark = [pytest.mark.integration, pytest.mark.docker]


def _cli(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "eval", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_imported_instances_are_admitted_only_when_their_gold_patch_passes_the_tests(tmp_path: Path) -> None:
    fixture = make_fixture(tmp_path / "in")
    out = tmp_path / "swe"
    imported = _cli(
        "import-swebench",
        str(fixture.jsonl),
        "--repos",
        str(fixture.repos),
        "--out",
        str(out),
        "--test-command",
        TEST_COMMAND,
        timeout_s=120,
    )
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith(f"imported 3 task(s) into {out}")
    for path in out.glob("*/workspace/**/*"):
        if path.is_file():
            assert not [m for m in TEST_PATCH_MARKS if m in path.read_text()], path

    done = _cli("check", str(out), "--json", timeout_s=600)
    assert done.returncode == 1, done.stderr  # not every task was admitted
    verdicts = {r["task"]: (r["admitted"], r["reason"]) for r in json.loads(done.stdout)}
    assert verdicts["acme-calc-1"] == (True, "oracle passes, unsolved workspace fails")
    assert verdicts["widgets-text-7"] == (True, "oracle passes, unsolved workspace fails")
    admitted, reason = verdicts["acme-calc-2"]
    assert not admitted
    # test_neg.py imports a neg the README-only "fix" never wrote: unittest's last line.
    assert reason == "the oracle's workspace fails tests/test.sh (exit 1: FAILED (errors=1))"
    assert set(verdicts) == {"acme-calc-1", "acme-calc-2", "widgets-text-7"}
    # Every container it made is gone. (The low-level listing: no inspect per container, which
    # races with other eval containers on this engine being removed; ours mount the suite's tests.)
    client = docker.from_env()
    try:
        listed = client.api.containers(all=True, filters={"label": f"{EVAL_LABEL}=true"})
    finally:
        client.close()
    mounts = [m.get("Source", "") for c in listed for m in c.get("Mounts", [])]
    assert not [m for m in mounts if m.startswith(str(out.resolve()))]
    # The suite on disk is untouched by the check: the oracles ran on copies.
    assert not (out / "acme-calc-1" / "workspace" / "test_calc.py").read_text().count("TestAdd")
