"""A task's ``[environment]`` reaches its hidden test and its oracle (issue #27), prepared as an
iteration's is (workers/environment: the setup run once, snapshotted, its ``keep`` directories
linked back, its ``env`` set): a task whose test needs what its setup made is admitted by
``raas eval check`` and resolved by an attempt that fixes it; without the environment the same
task's solved workspace fails its test."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy import select

from orchestrator.evals import store
from orchestrator.evals.driver import EvalDriver
from shared.db import session_scope
from shared.models.evals import AttemptOutcome, AttemptState, EvalAttempt
from shared.settings import Settings, get_settings
from tests.support.engine import Engine, engine
from workers.evaluation import check_task, close_fresh_boxes, verify_attempt

pytestmark = [pytest.mark.integration, pytest.mark.docker]

ENVIRONMENT = """
[environment]
setup = "mkdir -p .venv && echo made by the setup > .venv/ready"
setup_network = "none"
env = { TOOL_MODE = "strict" }
"""
TEST_SH = """set -e
test "$(cat .venv/ready)" = "made by the setup"
test "$TOOL_MODE" = strict
grep -qx OK answer.txt
"""
FIX = {"command": "sed -i 's/^BUG$/OK/' answer.txt"}
SCRIPT = {
    "responses": [
        {"content": [{"type": "tool_use", "name": "bash", "input": FIX}]},
        {"content": [{"type": "tool_use", "name": "task_complete", "input": {"summary": "fixed"}}]},
    ],
    "when_exhausted": "error",
}


def _suite(root: Path, environment: str) -> Path:
    """A suite of one task whose test needs the file its setup writes and the variable it sets."""
    task = root / "needs-setup"
    (task / "workspace").mkdir(parents=True)
    (task / "workspace" / "answer.txt").write_text("BUG\n")
    (task / "tests").mkdir()
    (task / "tests" / "test.sh").write_text(TEST_SH)
    (task / "solution").mkdir()
    (task / "solution" / "solve.sh").write_text("sed -i 's/^BUG$/OK/' answer.txt\n")
    (task / "instruction.md").write_text("answer.txt says BUG: make it say OK.\n")
    (task / "task.toml").write_text(
        '[task]\ndifficulty = "easy"\ntime_limit_s = 120\nbudget_usd = 0.5\n' + environment
    )
    (root / "suite.toml").write_text('[suite]\nname = "env"\n')
    return task


@pytest.fixture(autouse=True)
def _no_box_left() -> Iterator[None]:
    """The process's warm test containers go with the test (test_eval_check counts them)."""
    yield
    close_fresh_boxes()


@pytest.fixture
def settings(services: dict[str, str], tmp_path: Path) -> Settings:
    return get_settings().model_copy(update={"data_dir": tmp_path / "data"})


def test_check_runs_the_oracle_and_the_test_in_the_tasks_environment(
    settings: Settings, tmp_path: Path
) -> None:
    # Given: the task with its setup, and the same task without it.
    with_setup = _suite(tmp_path / "with", ENVIRONMENT)
    without = _suite(tmp_path / "without", "")
    # When: each is checked.
    admitted = check_task(with_setup, settings.sandbox_image, 120, settings)
    refused = check_task(without, settings.sandbox_image, 120, settings)
    # Then: with its environment the oracle's workspace passes (and the unsolved one fails);
    # without it the test cannot pass, solved or not.
    assert (admitted.admitted, admitted.reason) == (True, "oracle passes, unsolved workspace fails")
    assert not refused.admitted
    assert refused.reason.startswith("the oracle's workspace fails tests/test.sh (exit 1")
    # The setup's links went into the copies only: the suite's workspace is as it was.
    assert sorted(p.name for p in (with_setup / "workspace").iterdir()) == ["answer.txt"]


def test_a_failing_setup_refuses_the_task_with_the_setups_own_words(
    settings: Settings, tmp_path: Path
) -> None:
    task = _suite(
        tmp_path, '[environment]\nsetup = "echo no compiler here; exit 3"\nsetup_network = "none"\n'
    )
    result = check_task(task, settings.sandbox_image, 120, settings)
    assert not result.admitted
    assert result.reason.startswith("the task's environment could not be made: [environment] setup exited 3")
    assert "no compiler here" in result.reason


def _upload(suite: Path, tmp: Path) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(suite, arcname=store.SUITE_DIR)
        request = store.RunRequest(configs=[store.ConfigIn(name="one", toml="max_iterations = 1\n")], k=1)
        data = request.model_dump_json().encode()
        info = tarfile.TarInfo(store.REQUEST_FILE)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    path = tmp / "upload.tar.gz"
    path.write_bytes(buffer.getvalue())
    return path


class _InProcess:
    def __init__(self, eng: Engine) -> None:
        self.eng = eng

    def verify(self, attempt_id: str) -> None:
        verify_attempt(attempt_id, self.eng.settings)


def test_an_attempts_hidden_test_runs_in_the_tasks_environment(
    services: dict[str, str], tmp_path: Path
) -> None:
    # Given: a run of the task with its setup, and a scripted model that fixes answer.txt.
    suite = tmp_path / "suite"
    _suite(suite, ENVIRONMENT)
    with engine(SCRIPT, tmp_path, anthropic_api_key=SecretStr("sk-test")) as eng:
        run = store.create_run(_upload(suite, tmp_path), None, eng.settings)
        driver = EvalDriver(eng.settings, eng.dispatcher, eng.bus, _InProcess(eng))
        # When: the driver starts the attempt, its project runs to its end, the driver tests it.
        for _ in range(10):
            driver.run_once()
            with session_scope() as session:
                attempt = session.scalars(select(EvalAttempt).where(EvalAttempt.run_id == run.id)).one()
                session.expunge(attempt)
            if attempt.state == AttemptState.DONE:
                break
            if attempt.project_id is not None:
                eng.run_to_end(attempt.project_id)
    # Then: the hidden test found what the setup made and the variable it set: resolved.
    assert (attempt.state, attempt.outcome) == (AttemptState.DONE, AttemptOutcome.RESOLVED), (
        attempt.test_output_tail
    )
    assert attempt.test_exit_code == 0
    assert attempt.image is not None
