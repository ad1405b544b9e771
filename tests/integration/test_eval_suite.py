"""The bundled eval suite (``evals/basic``, issue #27 point 1): every task is well formed, and in
the real sandbox image its hidden test fails on the unsolved workspace and passes after its oracle.

The check is ``evals/verify.sh`` itself, so what CI runs is what an author runs by hand; a task
broken on purpose shows that it can fail.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.support.sandboxes import RUN_ID, RUN_LABEL

ROOT = Path(__file__).resolve().parents[2]
VERIFY = ROOT / "evals" / "verify.sh"
SUITE = ROOT / "evals" / "basic"
TASKS = sorted(path.parent.name for path in SUITE.glob("*/task.toml"))
TASK_ID = re.compile(r"^[a-z0-9-]+$")


def verify(*paths: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "RAAS_VERIFY_LABEL": f"{RUN_LABEL}={RUN_ID}"}
    return subprocess.run(
        ["bash", str(VERIFY), *map(str, paths)], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.fixture
def verified_containers_removed(docker_client: docker.DockerClient) -> Iterator[None]:
    """verify.sh runs ``--rm`` containers; any a killed run left behind carry this run's label."""
    yield
    for container in docker_client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={RUN_ID}"}):
        container.remove(force=True)


@pytest.mark.unit
def test_the_suite_has_12_to_16_well_formed_tasks() -> None:
    suite = tomllib.loads((SUITE / "suite.toml").read_text())["suite"]
    assert suite["name"] == "basic"
    assert suite["description"]
    assert 12 <= len(TASKS) <= 16
    difficulties = set()
    for task_id in TASKS:
        task_dir = SUITE / task_id
        assert TASK_ID.match(task_id), task_id
        meta = tomllib.loads((task_dir / "task.toml").read_text())["task"]
        assert set(meta) == {"difficulty", "tags", "time_limit_s", "budget_usd"}, task_id
        assert meta["difficulty"] in {"easy", "medium", "hard"}, task_id
        assert meta["tags"], task_id
        assert all(isinstance(tag, str) for tag in meta["tags"]), task_id
        assert meta["time_limit_s"] > 0, task_id
        assert meta["budget_usd"] > 0, task_id
        difficulties.add(meta["difficulty"])
        assert (task_dir / "instruction.md").read_text().strip(), task_id
        assert (task_dir / "workspace").is_dir(), task_id
        assert (task_dir / "tests" / "test.sh").is_file(), task_id
        assert (task_dir / "solution" / "solve.sh").is_file(), task_id
        # The hidden tests and the oracle never ride along in the agent's tree.
        assert not list((task_dir / "workspace").rglob("test_hidden.py")), task_id
    assert difficulties == {"easy", "medium", "hard"}


@pytest.mark.docker
@pytest.mark.parametrize("task_id", TASKS)
def test_task_fails_unsolved_and_passes_after_its_oracle(
    task_id: str, docker_engine: str, verified_containers_removed: None
) -> None:
    result = verify(SUITE / task_id)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == f"ok     {task_id}"


@pytest.mark.docker
def test_a_task_whose_oracle_does_nothing_is_reported_broken(
    tmp_path: Path, docker_engine: str, verified_containers_removed: None
) -> None:
    # Given a copy of a real task whose solution changes nothing
    task = tmp_path / "median-even"
    shutil.copytree(SUITE / "median-even", task)
    (task / "solution" / "solve.sh").write_text("#!/usr/bin/env bash\ntrue\n")
    # When it is verified
    result = verify(task)
    # Then it is refused, with the reason
    assert result.returncode == 1
    assert "BROKEN median-even: tests/test.sh fails after solution/solve.sh" in result.stdout


@pytest.mark.docker
def test_a_task_already_solved_is_reported_broken(
    tmp_path: Path, docker_engine: str, verified_containers_removed: None
) -> None:
    # Given a copy of a real task whose workspace is already the solution
    task = tmp_path / "merge-intervals"
    shutil.copytree(SUITE / "merge-intervals", task)
    subprocess.run(["bash", str(task / "solution" / "solve.sh")], cwd=task / "workspace", check=True)
    # When it is verified, then the unsolved state passing is the reason it is refused
    result = verify(task)
    assert result.returncode == 1
    assert "BROKEN merge-intervals: the unsolved workspace passes tests/test.sh" in result.stdout


@pytest.mark.unit
def test_verify_refuses_a_folder_that_is_neither_task_nor_suite(tmp_path: Path) -> None:
    result = verify(tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"verify.sh: {tmp_path} is neither a task (no task.toml) nor a suite (no suite.toml); "
        "give one of them"
    )
