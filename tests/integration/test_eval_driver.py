"""The eval driver's own rules (issue #27), pass by pass on real Postgres, with no worker: what it
enqueues is recorded (tests/support/engine.py's dispatcher) and the hidden tests it would send are
remembered. It starts attempts within the tenant's projects per hour and the run's concurrency,
resumes a start that a crash cut in two, and sends a test once per ended project."""

from __future__ import annotations

import io
import secrets
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, update

from orchestrator.api.tenants import authenticate, create_tenant
from orchestrator.evals import store
from orchestrator.evals.driver import EvalDriver
from orchestrator.scheduling import advance, lifecycle
from shared.db import session_scope
from shared.events import NullBus
from shared.models import ErrorKind, Project, ProjectStatus, utcnow
from shared.models.evals import AttemptState, EvalAttempt, EvalRun, EvalRunStatus
from shared.settings import Settings, get_settings
from tests.support.engine import RecordingDispatcher
from workers import records
from workers.claim import claim_iteration
from workers.records import Outcome

pytestmark = [pytest.mark.integration]

SUITE = Path(__file__).resolve().parents[1] / "fixtures" / "evals" / "four"


class RecordingVerifier:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def verify(self, attempt_id: str) -> None:
        self.sent.append(attempt_id)


def _upload(tmp: Path, concurrency: int) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(SUITE, arcname=store.SUITE_DIR)
        request = store.RunRequest(
            configs=[store.ConfigIn(name="one", toml="max_iterations = 1\n")], k=1, concurrency=concurrency
        )
        data = request.model_dump_json().encode()
        info = tarfile.TarInfo(store.REQUEST_FILE)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    path = tmp / f"upload-{secrets.token_hex(4)}.tar.gz"
    path.write_bytes(buffer.getvalue())
    return path


@pytest.fixture
def settings(services: dict[str, str], tmp_path: Path) -> Settings:
    return get_settings().model_copy(update={"data_dir": tmp_path / "data"})


@pytest.fixture(autouse=True)
def _no_run_left_running() -> Iterator[None]:
    """A run a test leaves running would be driven by a later test's driver (or coordinator)."""
    started = utcnow()
    yield
    with session_scope() as session:
        session.execute(
            update(EvalRun)
            .where(EvalRun.created_at >= started, EvalRun.status == EvalRunStatus.RUNNING)
            .values(status=EvalRunStatus.PAUSED)
        )


def _ids(run_id: str) -> set[str]:
    with session_scope() as session:
        return set(session.scalars(select(EvalAttempt.id).where(EvalAttempt.run_id == run_id)))


def _states(run_id: str) -> dict[str, AttemptState]:
    with session_scope() as session:
        rows = session.execute(
            select(EvalAttempt.task_key, EvalAttempt.state).where(EvalAttempt.run_id == run_id)
        ).all()
    return {task: state for task, state in rows}


def test_attempts_start_within_the_tenants_projects_per_hour_and_the_runs_concurrency(
    settings: Settings, tmp_path: Path
) -> None:
    # Given: a tenant that may make 2 projects an hour, and its run of 4 attempts, 3 at a time.
    token = create_tenant(f"eval-quota-{secrets.token_hex(4)}", submissions_per_hour=2)[1]
    tenant_id = authenticate(token, "-").tenant_id
    run = store.create_run(_upload(tmp_path, concurrency=3), tenant_id, settings)
    dispatcher, verifier = RecordingDispatcher(), RecordingVerifier()
    driver = EvalDriver(settings, dispatcher, NullBus(), verifier)
    # When: the driver passes twice.
    driver.run_once()
    driver.run_once()
    # Then: two attempts run, as the tenant's projects, each with its first iteration enqueued;
    # the other two wait for the tenant's hour.
    states = _states(run.id)
    assert sorted(states.values()) == sorted([AttemptState.RUNNING] * 2 + [AttemptState.PENDING] * 2)
    assert sorted(t for t, s in states.items() if s == AttemptState.RUNNING) == ["broken-env", "fix-bad"]
    with session_scope() as session:
        projects = session.scalars(select(Project).where(Project.name.startswith(f"eval {run.id} "))).all()
        assert {p.tenant_id for p in projects} == {tenant_id}
        assert {p.status for p in projects} == {ProjectStatus.RUNNING}
        assert {p.budget_limit_usd for p in projects} == {projects[0].budget_limit_usd}
        project_ids = {p.id for p in projects}
    assert project_ids <= {pid for pid, _ in dispatcher.enqueued}  # (with the session's other runs')
    assert not {a for a in verifier.sent if a in _ids(run.id)}


def test_a_start_cut_by_a_crash_resumes_and_an_ended_project_is_tested_once(
    settings: Settings, tmp_path: Path
) -> None:
    # Given: a run of 4 attempts, one at a time, whose first attempt was claimed a moment ago by a
    # driver that died before it made a project, and nothing else started.
    run = store.create_run(_upload(tmp_path, concurrency=1), None, settings)
    with session_scope() as session:
        session.execute(
            update(EvalAttempt)
            .where(EvalAttempt.run_id == run.id, EvalAttempt.task_key == "broken-env")
            .values(state=AttemptState.STARTING, claimed_at=utcnow())
        )
    dispatcher, verifier = RecordingDispatcher(), RecordingVerifier()
    driver = EvalDriver(settings, dispatcher, NullBus(), verifier)
    # When: the next driver passes (it holds the run, so no live driver is inside that start): the
    # claim is pending again and started at once, one project.
    driver.run_once()
    assert _states(run.id)["broken-env"] == AttemptState.RUNNING
    with session_scope() as session:
        attempt = session.scalars(
            select(EvalAttempt).where(EvalAttempt.run_id == run.id, EvalAttempt.task_key == "broken-env")
        ).one()
        attempt_id, project_id = attempt.id, attempt.project_id
    assert project_id is not None
    # And its project ends (stopped): the next pass freezes its cost and sends its test, once.
    lifecycle.stop_project(project_id, dispatcher, NullBus())
    driver.run_once()
    driver.run_once()
    assert [a for a in verifier.sent if a == attempt_id] == [attempt_id]  # (other tests' runs aside)
    assert _states(run.id)["broken-env"] == AttemptState.TESTING
    # A new driver (a restarted coordinator) resends the test in flight: the worker's write is
    # conditional, so a copy is harmless.
    EvalDriver(settings, dispatcher, NullBus(), verifier).run_once()
    assert [a for a in verifier.sent if a == attempt_id] == [attempt_id, attempt_id]
    # The concurrency of 1 held: the one attempt testing does not hold a slot, the next one runs.
    assert _states(run.id)["fix-bad"] == AttemptState.RUNNING
    with session_scope() as session:
        stopped = session.get_one(EvalAttempt, attempt_id)
        assert stopped.stop_reason is not None
        assert stopped.stop_reason.startswith("stopped")
        assert session.scalar(select(Project.status).where(Project.id == project_id)) == ProjectStatus.STOPPED


def test_an_attempt_whose_model_failed_after_retries_is_an_infra_failure_with_its_cause(
    settings: Settings, tmp_path: Path
) -> None:
    # Given: four attempts running, each project's one iteration (max_iterations = 1) played as
    # a worker records it: a model error after retries, a task not finished, a task completed,
    # a refusal.
    run = store.create_run(_upload(tmp_path, concurrency=4), None, settings)
    dispatcher, verifier = RecordingDispatcher(), RecordingVerifier()
    driver = EvalDriver(settings, dispatcher, NullBus(), verifier)
    driver.run_once()
    outcomes = {
        "broken-env": Outcome(error="overloaded_error (529) after 3 retries", error_kind=ErrorKind.LLM),
        "fix-bad": Outcome(completed_task=False, summary="not yet"),
        "fix-bug": Outcome(completed_task=True, summary="fixed"),
        "never": Outcome(error="the model refused", error_kind=ErrorKind.REFUSAL),
    }
    with session_scope() as session:
        projects = dict(
            session.execute(
                select(EvalAttempt.project_id, EvalAttempt.task_key).where(EvalAttempt.run_id == run.id)
            ).all()
        )
    for project_id, iteration_id in list(dispatcher.enqueued):
        claim = claim_iteration(iteration_id, "spec-worker", stale_after_s=3600)
        assert claim is not None
        records.finish(claim, outcomes[projects[project_id]])
        advance.advance(project_id, iteration_id, dispatcher, NullBus())
    # When: the driver passes again.
    driver.run_once()
    # Then: every attempt is testing; only the model's failure carries an infra cause.
    with session_scope() as session:
        rows = session.execute(
            select(
                EvalAttempt.task_key, EvalAttempt.state, EvalAttempt.infra_cause, EvalAttempt.iterations
            ).where(EvalAttempt.run_id == run.id)
        ).all()
    assert {task: (state, cause, n) for task, state, cause, n in rows} == {
        "broken-env": (AttemptState.TESTING, "model: overloaded_error (529) after 3 retries", 1),
        "fix-bad": (AttemptState.TESTING, None, 1),
        "fix-bug": (AttemptState.TESTING, None, 1),
        "never": (AttemptState.TESTING, None, 1),
    }
    ours = _ids(run.id)
    assert sorted(a for a in verifier.sent if a in ours) == sorted(ours)  # (the session's other runs too)


def test_a_start_cut_after_its_project_was_made_links_that_project_and_makes_no_second(
    settings: Settings, tmp_path: Path
) -> None:
    # Given: a run whose first attempt's project was made, and the driver died before the link
    # (the attempt is STARTING again, with no project; the project exists, never started).
    run = store.create_run(_upload(tmp_path, concurrency=1), None, settings)
    dispatcher, verifier = RecordingDispatcher(), RecordingVerifier()
    EvalDriver(settings, dispatcher, NullBus(), verifier).run_once()
    with session_scope() as session:
        attempt = session.scalars(
            select(EvalAttempt).where(EvalAttempt.run_id == run.id, EvalAttempt.state == AttemptState.RUNNING)
        ).one()
        attempt_id, made = attempt.id, attempt.project_id
        attempt.state, attempt.project_id, attempt.started_at = AttemptState.STARTING, None, None
    # When: a new driver (a restarted coordinator) passes.
    EvalDriver(settings, dispatcher, NullBus(), verifier).run_once()
    # Then: the attempt runs the project that was made, and the run has one project for it.
    with session_scope() as session:
        linked = session.get_one(EvalAttempt, attempt_id)
        assert (linked.state, linked.project_id) == (AttemptState.RUNNING, made)
        projects = session.scalars(select(Project.id).where(Project.name.startswith(f"eval {run.id} "))).all()
    assert projects == [made]
