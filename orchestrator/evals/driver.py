"""The eval driver: walks every open run's attempts, reconcile-style, from the database alone.

Each pass, for each running run (one coordinator at a time: the run's row is locked, SKIP LOCKED,
for the pass):

1. an attempt whose project ended (or paused for good: budget, breaker, API key; or ran past
   the task's time limit, then stopped), once none of its iterations is unfinished, has its
   cost, tokens, iterations, wall time and stop reason read from the project's rows and frozen,
   becomes TESTING, and its hidden test is sent
   to a worker (``raas.eval_verify``, which writes the outcome); a test not answered within the
   task's time limit (plus a margin) is sent again — the worker's write is conditional;
2. a project made but not started (a crash between the link and the start) is started;
3. a claim whose project was never linked (a crash inside the start) goes back to PENDING at
   once: the pass holds the run's row, so no live driver is inside that start. An attempt's
   project has the attempt's id, so the restart links the project the crash left (made, never
   started, nothing charged) instead of making a second one;
4. pending attempts start, up to the run's concurrency and within its tenant's projects per
   hour (the limit ``raas submit`` has), while the eval-wide budget can hold their caps:
   committed = frozen costs of finished attempts + caps of running ones, so the run never
   spends past its budget. When the next one does not fit and nothing runs, the rest are
   PAUSED and the run says how many did not run.

Beside the runs, a pass sends again the remote checks' tasks no worker answered in time
(:func:`orchestrator.evals.checks.resend_lost`).

Every step is a conditional write (claim PENDING → STARTING, link STARTING → RUNNING, RUNNING →
TESTING, TESTING → DONE), committed before what it guards happens: an attempt is started once,
charged once, and a restarted coordinator resumes where the last one stopped.
"""

from __future__ import annotations

import io
import logging
import shutil
import tarfile
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from celery import Celery
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, defer

from orchestrator.evals import checks
from orchestrator.evals.checks import CheckSender
from orchestrator.evals.configs import EvalConfig, attempt_cap, attempt_config, to_toml
from orchestrator.scheduling import lifecycle, submission
from orchestrator.scheduling.dispatch import Dispatcher
from orchestrator.workspaces import get_store
from shared import events
from shared.archive import pack_directory, unpack
from shared.celery_app import EVAL_CHECK, EVAL_VERIFY, ITERATIONS_QUEUE
from shared.db import get_engine, session_scope
from shared.errors import RaasError
from shared.events import EventBus, RedisBus
from shared.models import (
    ErrorKind,
    Iteration,
    IterationStatus,
    Message,
    PauseReason,
    Project,
    ProjectStatus,
    Tenant,
    unfinished,
    utcnow,
)
from shared.models.evals import AttemptOutcome, AttemptState, EvalAttempt, EvalRun, EvalRunStatus
from shared.settings import Settings

log = logging.getLogger(__name__)

TICK_S = 1.0
# With no eval running, a pass only looks for one: every coordinator does that, so it is rarer.
IDLE_TICK_S = 5.0
# After a wake-up, how long the loop lets other ends arrive before its pass.
WAKE_GAP_S = 0.05
# The events after which an attempt may be ready for its test (their JSON, as published).
_ENDS = tuple(
    f'"type":"{kind}"'.encode()
    for kind in (
        events.PROJECT_COMPLETED,
        events.PROJECT_FAILED,
        events.PROJECT_STOPPED,
        events.PROJECT_PAUSED,
        events.ITERATION_COMPLETE,
        events.ITERATION_ERROR,
    )
)
# Beyond the task's time limit, how long a hidden test may take before it is sent again.
TEST_MARGIN = timedelta(minutes=5)
# Beyond the task's time limit (the breaker's wall clock stops it first), when the driver stops it.
RUN_MARGIN = timedelta(minutes=2)
ACTIVE = (AttemptState.STARTING, AttemptState.RUNNING)
# Iteration failures that are the infrastructure's, not the agent's.
INFRA_KINDS = {
    ErrorKind.LLM: "model",
    ErrorKind.ENVIRONMENT: "environment",
    ErrorKind.INTERNAL: "sandbox",
    ErrorKind.WORKER_LOST: "worker lost",
    ErrorKind.API_KEY: "api key",
}
ENDED_PAUSES = (PauseReason.BUDGET_EXCEEDED, PauseReason.CIRCUIT_BREAKER, PauseReason.API_KEY_REQUIRED)


class Verifier(Protocol):
    def verify(self, attempt_id: str) -> None: ...


class CeleryVerifier:
    """Sends ``raas.eval_verify`` and ``raas.eval_check`` by name to the workers' queue (the
    coordinator imports no worker)."""

    def __init__(self, app: Celery) -> None:
        self._app = app

    def verify(self, attempt_id: str) -> None:
        self._app.send_task(EVAL_VERIFY, kwargs={"attempt_id": attempt_id}, queue=ITERATIONS_QUEUE)

    def check(self, row_id: str) -> None:
        """One task of ``raas eval check --remote`` (orchestrator.evals.checks)."""
        self._app.send_task(EVAL_CHECK, kwargs={"row_id": row_id}, queue=ITERATIONS_QUEUE)


@dataclass
class PassReport:
    started: list[str] = field(default_factory=list)
    tested: list[str] = field(default_factory=list)
    resent: list[str] = field(default_factory=list)
    paused: int = 0
    runs: int = 0  # running eval runs the pass looked at


class EvalDriver:
    def __init__(
        self,
        settings: Settings,
        dispatcher: Dispatcher,
        bus: EventBus,
        verifier: Verifier,
        tick_s: float = TICK_S,
    ) -> None:
        self.settings = settings
        self.dispatcher = dispatcher
        self.bus = bus
        self.verifier = verifier
        self.tick_s = tick_s
        self._resumed = False
        self._wake = threading.Event()
        # Set while a run is running: only then does an end event wake a pass. Without it every
        # iteration's end anywhere in the cluster cost every coordinator a pass (two
        # transactions) for nothing.
        self._running = threading.Event()
        self.watching = threading.Event()
        """Set once the driver listens for its projects' ends (a Redis bus only)."""

    def loop(self, stop: threading.Event) -> None:
        """A pass every ``tick_s`` (``IDLE_TICK_S`` while no run is running), and while one is, one
        as soon as a project ends (or an iteration of one does): with a Redis bus, an ended
        attempt's hidden test is sent without waiting for the next tick."""
        if isinstance(self.bus, RedisBus):
            threading.Thread(target=self._listen, args=(stop,), name="evals-wake", daemon=True).start()
        while not stop.is_set():
            self._wake.clear()
            tick_s = self.tick_s
            try:
                report = self.run_once()
                if report.started or report.tested or report.resent or report.paused:
                    log.info("eval driver: %s", report)
                if not report.runs:
                    self._running.clear()
                    tick_s = max(tick_s, IDLE_TICK_S)
            except Exception:  # a database restart: the next pass tries again
                log.warning("eval driver pass failed", exc_info=True)
            if self._wake.wait(tick_s):
                stop.wait(WAKE_GAP_S)  # a burst of ends makes one pass, not one each

    def _listen(self, stop: threading.Event) -> None:
        """Wake the loop on any project's end event, or its iteration's (the pass reads the rows)."""
        import redis

        client = redis.Redis.from_url(self.settings.redis_url)
        while not stop.is_set():
            try:
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.psubscribe(events.channel("*"))
                self.watching.set()
                while not stop.is_set():
                    message = pubsub.get_message(timeout=1.0)
                    if message is None or not self._running.is_set():
                        continue
                    if any(kind in message["data"] for kind in _ENDS):
                        self._wake.set()
            except redis.RedisError:  # the passes go on by the tick meanwhile
                self.watching.clear()
                stop.wait(3.0)
        client.close()

    def run_once(self, now: datetime | None = None) -> PassReport:
        """One pass over every running run. The first pass of a driver resends every test in
        flight (a restarted coordinator cannot know which messages were lost)."""
        now = now or utcnow()
        report = PassReport()
        with session_scope() as session:
            run_ids = session.scalars(select(EvalRun.id).where(EvalRun.status == EvalRunStatus.RUNNING)).all()
        report.runs = len(run_ids)
        if run_ids:
            # Before any attempt starts: an attempt that ends while this pass goes on must wake
            # the next one.
            self._running.set()
        for run_id in run_ids:
            with self._locked(run_id) as run:
                if run is not None:
                    self._pass(run, now, report)
        if isinstance(self.verifier, CheckSender):
            report.resent += checks.resend_lost(self.verifier, now)
        self._resumed = True
        return report

    @contextmanager
    def _locked(self, run_id: str) -> Iterator[EvalRun | None]:
        """The run's row, held for the pass (another coordinator's driver skips it); None if held."""
        with session_scope() as session:
            # The suite's archive is read only by a pass that starts an attempt (a lazy load).
            query = (
                select(EvalRun)
                .options(defer(EvalRun.suite_archive))
                .where(EvalRun.id == run_id, EvalRun.status == EvalRunStatus.RUNNING)
            )
            if get_engine().dialect.name != "sqlite":  # one process there; SQLite has no row locks
                query = query.with_for_update(skip_locked=True)
            yield session.scalars(query).one_or_none()

    def _pass(self, run: EvalRun, now: datetime, report: PassReport) -> None:
        tasks = {t["id"]: t for t in run.tasks}
        configs = {c["name"]: EvalConfig(c["name"], c["toml"]) for c in run.configs}
        with session_scope() as session:
            attempts = session.scalars(
                select(EvalAttempt)
                .where(EvalAttempt.run_id == run.id, EvalAttempt.state != AttemptState.DONE)
                .order_by(EvalAttempt.attempt)
            ).all()
            session.expunge_all()
        for attempt in attempts:
            task = tasks[attempt.task_key]
            if attempt.state == AttemptState.RUNNING:
                self._watch(attempt, task, now, report)
            elif attempt.state == AttemptState.TESTING:
                self._retest(attempt, task, now, report)
            elif attempt.state == AttemptState.STARTING:  # its driver died inside the start
                _move(attempt.id, AttemptState.STARTING, state=AttemptState.PENDING, claimed_at=None)
        self._start_pending(run, tasks, configs, now, report)
        self._settle_run(run, now)

    # -- running attempts -------------------------------------------------------------------

    def _watch(self, attempt: EvalAttempt, task: dict[str, Any], now: datetime, report: PassReport) -> None:
        with session_scope() as session:
            project = session.get(Project, attempt.project_id) if attempt.project_id else None
            project_id = project.id if project is not None else None
            status = project.status if project is not None else None
            pause = project.pause_reason if project is not None else None
        if project_id is None:  # deleted by its owner: nothing to test
            _move(
                attempt.id,
                AttemptState.RUNNING,
                state=AttemptState.DONE,
                outcome=AttemptOutcome.INFRA,
                infra_cause="its project was deleted",
                finished_at=now,
            )
            return
        timed_out = (
            attempt.started_at is not None
            and now - attempt.started_at > timedelta(seconds=float(task["time_limit_s"])) + RUN_MARGIN
        )
        if status == ProjectStatus.CREATED:
            self._start_project(attempt.id, project_id)
            return
        ended = status is not None and status.is_terminal
        if not ended and (timed_out or (status == ProjectStatus.PAUSED and pause in ENDED_PAUSES)):
            try:
                lifecycle.stop_project(project_id, self.dispatcher, self.bus)
            except RaasError:
                log.warning(
                    "eval attempt %s: could not stop project %s", attempt.id, project_id, exc_info=True
                )
            ended = True
        if not ended or _still_running(project_id):
            return  # a stopped project's iteration may still be paying its last call
        facts = _facts(project_id, now)
        if timed_out and facts["infra_cause"] is None:
            facts["infra_cause"] = f"timeout: past the task's {float(task['time_limit_s']):.0f}s"
        if _move(attempt.id, AttemptState.RUNNING, state=AttemptState.TESTING, test_sent_at=now, **facts):
            self.verifier.verify(attempt.id)
            report.tested.append(attempt.id)

    def _retest(self, attempt: EvalAttempt, task: dict[str, Any], now: datetime, report: PassReport) -> None:
        late = timedelta(seconds=float(task["time_limit_s"])) + TEST_MARGIN
        if self._resumed and attempt.test_sent_at is not None and attempt.test_sent_at > now - late:
            return
        if _move(attempt.id, AttemptState.TESTING, state=AttemptState.TESTING, test_sent_at=now):
            self.verifier.verify(attempt.id)
            report.resent.append(attempt.id)

    # -- starting attempts ------------------------------------------------------------------

    def _start_pending(
        self,
        run: EvalRun,
        tasks: dict[str, dict[str, Any]],
        configs: dict[str, EvalConfig],
        now: datetime,
        report: PassReport,
    ) -> None:
        with session_scope() as session:
            active = (
                session.scalar(
                    select(func.count()).where(EvalAttempt.run_id == run.id, EvalAttempt.state.in_(ACTIVE))
                )
                or 0
            )
            committed = _committed(session, run.id)
            pending = session.scalars(
                select(EvalAttempt)
                .where(EvalAttempt.run_id == run.id, EvalAttempt.state == AttemptState.PENDING)
                .order_by(EvalAttempt.attempt)
            ).all()
            session.expunge_all()
        quota = _tenant_quota(run.tenant_id, now)
        order = {key: index for index, key in enumerate(tasks)}
        names = list(configs)
        pending = sorted(pending, key=lambda a: (a.attempt, order[a.task_key], names.index(a.config)))
        with tempfile.TemporaryDirectory(prefix="raas-eval-start-") as tmp:
            suite_dir: Path | None = None
            for attempt in pending:
                if active >= run.concurrency or quota == 0:
                    return  # a slot, or the tenant's hourly projects, frees up on a later pass
                cap = attempt_cap(tasks[attempt.task_key], configs[attempt.config], run.attempt_budget_usd)
                if run.budget_usd is not None and committed + cap > run.budget_usd:
                    if active == 0:
                        report.paused += self._pause_rest(run, committed)
                    return
                if not _move(
                    attempt.id, AttemptState.PENDING, state=AttemptState.STARTING, claimed_at=now, cap_usd=cap
                ):
                    continue
                if suite_dir is None:
                    suite_dir = _unpack_suite(run.suite_archive, Path(tmp))
                self._make_project(
                    run, attempt, tasks[attempt.task_key], configs[attempt.config], cap, suite_dir, now
                )
                active += 1
                committed += cap
                quota = None if quota is None else quota - 1
                report.started.append(attempt.id)

    def _make_project(
        self,
        run: EvalRun,
        attempt: EvalAttempt,
        task: dict[str, Any],
        config: EvalConfig,
        cap: Decimal,
        suite_dir: Path,
        now: datetime,
    ) -> None:
        name = f"eval {run.id} {run.suite_name}/{task['id']} {config.name} #{attempt.attempt}"
        with session_scope() as session:
            made = session.get(Project, attempt.id) is not None  # by a driver that died before the link
        if made:
            self._link(attempt.id, attempt.id, now)
            return
        with tempfile.TemporaryDirectory(prefix="raas-eval-project-") as tmp:
            root = Path(tmp) / "project"
            shutil.copytree(suite_dir / task["path"] / "workspace", root, symlinks=True)
            (root / "PROMPT.md").write_text(
                (suite_dir / task["path"] / "instruction.md").read_text(encoding="utf-8")
            )
            (root / "raas.toml").write_text(to_toml(attempt_config(task, config, cap, name)))
            archive = Path(tmp) / "upload.tar.gz"
            archive.write_bytes(pack_directory(root))
            try:
                project = submission.create_project(
                    get_store(self.settings),
                    archive,
                    name,
                    self.bus,
                    tenant_id=run.tenant_id,
                    network_allowed=self.settings.sandbox_network_allowed,
                    settings=self.settings,
                    project_id=attempt.id,
                )
            except RaasError as exc:  # the configuration cannot run here (a harness not installed...)
                _move(
                    attempt.id,
                    AttemptState.STARTING,
                    state=AttemptState.DONE,
                    outcome=AttemptOutcome.INFRA,
                    infra_cause=f"could not make its project: {exc}",
                    finished_at=now,
                )
                return
        self._link(attempt.id, project.id, now)

    def _link(self, attempt_id: str, project_id: str, now: datetime) -> None:
        if _move(
            attempt_id,
            AttemptState.STARTING,
            state=AttemptState.RUNNING,
            project_id=project_id,
            started_at=now,
        ):
            self._start_project(attempt_id, project_id)

    def _start_project(self, attempt_id: str, project_id: str) -> None:
        try:
            submission.start_project(project_id, self.dispatcher, self.bus)
        except RaasError:  # started by another pass already
            log.info("eval attempt %s: project %s was started already", attempt_id, project_id)

    # -- the run ----------------------------------------------------------------------------

    def _pause_rest(self, run: EvalRun, committed: Decimal) -> int:
        with session_scope() as session:
            paused = session.scalars(
                update(EvalAttempt)
                .where(EvalAttempt.run_id == run.id, EvalAttempt.state == AttemptState.PENDING)
                .values(state=AttemptState.PAUSED)
                .returning(EvalAttempt.id)
                .execution_options(synchronize_session=False)
            ).all()
        run.status_reason = (
            f"the eval budget ${run.budget_usd} cannot pay another attempt's cap (${committed} spent); "
            f"{len(paused)} attempt(s) did not run"
        )
        return len(paused)

    def _settle_run(self, run: EvalRun, now: datetime) -> None:
        with session_scope() as session:
            states = set(session.scalars(select(EvalAttempt.state).where(EvalAttempt.run_id == run.id)).all())
        if states <= {AttemptState.DONE}:
            run.status, run.finished_at = EvalRunStatus.COMPLETED, now
        elif states <= {AttemptState.DONE, AttemptState.PAUSED}:
            run.status, run.finished_at = EvalRunStatus.PAUSED, now


def _still_running(project_id: str) -> bool:
    """An iteration of the project is unfinished: its cost is not final yet."""
    with session_scope() as session:
        return bool(
            session.scalar(select(func.count()).where(Iteration.project_id == project_id, unfinished()))
        )


def _tenant_quota(tenant_id: str | None, now: datetime) -> int | None:
    """Projects the run's tenant may still make this hour (its ``submissions_per_hour``, as for
    ``raas submit``): an eval waits for its quota rather than passing it. None: no limit."""
    if tenant_id is None:
        return None
    with session_scope() as session:
        limit = session.scalar(select(Tenant.submissions_per_hour).where(Tenant.id == tenant_id))
        if limit is None:
            return None
        return max(0, limit - submission.projects_this_hour(session, tenant_id, now))


def _move(attempt_id: str, from_state: AttemptState, **values: Any) -> bool:
    """A conditional write: the attempt moves only if it is still in ``from_state``."""
    with session_scope() as session:
        moved = session.execute(
            update(EvalAttempt)
            .where(EvalAttempt.id == attempt_id, EvalAttempt.state == from_state)
            .values(**values)
            .returning(EvalAttempt.id)
            .execution_options(synchronize_session=False)
        ).scalar_one_or_none()
    return moved is not None


def _committed(session: Session, run_id: str) -> Decimal:
    """What the run has spent (frozen costs) plus what its running attempts may still spend (caps)."""
    spent = session.scalar(
        select(func.coalesce(func.sum(EvalAttempt.cost_usd), 0)).where(
            EvalAttempt.run_id == run_id, EvalAttempt.state.in_((AttemptState.TESTING, AttemptState.DONE))
        )
    )
    held = session.scalar(
        select(func.coalesce(func.sum(EvalAttempt.cap_usd), 0)).where(
            EvalAttempt.run_id == run_id, EvalAttempt.state.in_(ACTIVE)
        )
    )
    return Decimal(str(spent or 0)) + Decimal(str(held or 0))


def _facts(project_id: str, now: datetime) -> dict[str, Any]:
    """The ended project's cost and tokens (its Message rows: the gateway's receipts, cache reads
    and writes priced by shared.pricing), iterations, wall time, stop reason and infra cause."""
    with session_scope() as session:
        project = session.get_one(Project, project_id)
        sums = session.execute(
            select(
                func.coalesce(func.sum(Message.cost_usd), 0),
                func.coalesce(func.sum(Message.input_tokens), 0),
                func.coalesce(func.sum(Message.output_tokens), 0),
                func.coalesce(func.sum(Message.cache_read_input_tokens), 0),
                func.coalesce(func.sum(Message.cache_creation_input_tokens), 0),
            ).where(Message.project_id == project_id)
        ).one()
        iterations = session.scalars(
            select(Iteration).where(Iteration.project_id == project_id).order_by(Iteration.created_at)
        ).all()
        finished = [i for i in iterations if i.status != IterationStatus.QUEUED]
        infra = [i for i in finished if i.error_kind in INFRA_KINDS]
        cause = None
        if infra and project.status != ProjectStatus.COMPLETED:
            last = infra[-1]
            assert last.error_kind is not None
            first_line = (
                (last.error or "").strip().splitlines()[0][:300] if (last.error or "").strip() else ""
            )
            cause = f"{INFRA_KINDS[last.error_kind]}: {first_line}".rstrip(": ")
        started = project.started_at or project.created_at
        ended = project.finished_at or now
        return {
            "cost_usd": Decimal(str(sums[0])),
            "input_tokens": int(sums[1]),
            "output_tokens": int(sums[2]),
            "cache_read_tokens": int(sums[3]),
            "cache_write_tokens": int(sums[4]),
            "iterations": len(finished),
            "wall_time_s": max(0.0, (ended - started).total_seconds()),
            "stop_reason": f"{project.status.value}: {project.status_line}"
            if project.status_line
            else project.status.value,
            "infra_cause": cause,
        }


def _unpack_suite(archive: bytes, dest: Path) -> Path:
    root = dest / "suite"
    root.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        unpack(tar, root, links=False)
    return root
