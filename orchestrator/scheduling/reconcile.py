"""The reconcile loop: what makes at-least-once delivery whole (DESIGN.md rule 3).

It re-enqueues iterations whose worker died (stale heartbeat) and fails those past their
attempt limit, resends queued iterations whose message was lost (a broker restart), advances
iterations whose report was lost, terminates iterations of stopped projects that did not end
by themselves, and gives an approval past its deadline its default action (once: a conditional
UPDATE, orchestrator.scheduling.decisions). It runs on one coordinator replica at a time,
the holder of its lease (orchestrator.scheduling.lease). A replica that takes the lease (the
survivor of the holder's death, or a coordinator restarted alone once its previous lease has
expired or was given back) runs it at once, so it picks up every project, and its first pass
*resumes*: a message sent before it started may
have died with the coordinator that sent it (killed between a commit and the send, or in the
middle of a delivery), so every queued iteration and pending delivery is sent again at once
instead of ``requeue_after_s`` later (the steady state's timer). A copy of a message that was
not lost is harmless: the iteration's claim and the delivery's lease turn it away.
Given a probe of the broker's consumers, it also tells projects when no worker is there to run
what waits (:mod:`orchestrator.scheduling.worker_watch`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from orchestrator.scheduling import advance, decisions, lifecycle
from orchestrator.scheduling.admission import pump
from orchestrator.scheduling.dispatch import Dispatcher
from orchestrator.scheduling.lease import DatabaseLease, Holding
from orchestrator.scheduling.outbox import transaction
from orchestrator.scheduling.worker_watch import ConsumerProbe, WorkerWatch
from orchestrator.workspaces import get_store
from shared.errors import ServiceUnavailable
from shared.events import EventBus
from shared.iterations import fail_iteration
from shared.models import (
    Delivery,
    DeliveryStatus,
    ErrorKind,
    Iteration,
    IterationStatus,
    PauseReason,
    Project,
    ProjectStatus,
    unfinished,
    utcnow,
)
from shared.project_config import ProjectConfig
from shared.settings import Settings

log = logging.getLogger(__name__)
STOP_GRACE_S = 30.0
REPORT_GRACE_S = 5.0


@dataclass
class ReconcileReport:
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    advanced: list[str] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)
    trials: list[str] = field(default_factory=list)
    pumped: list[str] = field(default_factory=list)  # projects whose waiting iterations were sent
    no_workers: list[str] = field(default_factory=list)  # projects told that no worker is there
    workers_back: list[str] = field(default_factory=list)  # projects told that one is back
    redelivered: list[str] = field(default_factory=list)  # deliveries sent again
    approvals: list[str] = field(default_factory=list)  # approvals their deadline decided
    swept: list[str] = field(default_factory=list)  # workspace objects no row named, deleted


def _not_resent_since(iteration: Iteration, cutoff: datetime) -> bool:
    """Its last message went out before its (dead) worker took it, or long ago: send another."""
    sent = iteration.enqueued_at
    return (
        sent is None
        or sent < cutoff
        or (iteration.heartbeat_at is not None and sent < iteration.heartbeat_at)
    )


def _locked_iterations(session: Session, *where: ColumnElement[bool]) -> Sequence[Iteration]:
    """Iterations matching ``where`` (over Iteration and its Project), locked for this pass."""
    query = select(Iteration).join(Project, Project.id == Iteration.project_id).where(*where)
    return session.scalars(query.with_for_update(of=Iteration)).all()


class Reconciler:
    def __init__(
        self,
        settings: Settings,
        dispatcher: Dispatcher,
        bus: EventBus,
        terminate: Callable[[str], None] | None = None,
        consumers: ConsumerProbe | None = None,
    ) -> None:
        self.settings = settings
        self.dispatcher = dispatcher
        self.bus = bus
        self.terminate = terminate
        # No probe (the embedded engine, tests of the other steps): no worker watch.
        self.watch = WorkerWatch(settings, dispatcher, bus, consumers) if consumers is not None else None
        self._swept_at = float("-inf")

    def run_once(self, now: datetime | None = None, *, resume: bool = False) -> ReconcileReport:
        """One pass. ``resume``: this coordinator's first (see the module's docstring): whatever was
        sent before ``now`` counts as lost and is sent again, not only what waited ``requeue_after_s``."""
        now = now or utcnow()
        report = ReconcileReport()
        sent_before = now if resume else now - timedelta(seconds=self.settings.requeue_after_s)
        self._revive_or_fail(now, sent_before, report)
        self._resend_queued(sent_before, report)
        self._resend_deliveries(sent_before, report)
        self._stop_leftovers(now, report)
        self._half_open(report)
        self._pump_waiting(report)
        report.approvals = decisions.apply_deadlines(now, self.dispatcher, self.bus)
        for project_id, iteration_id in self._unadvanced(now):
            advance.advance(project_id, iteration_id, self.dispatcher, self.bus)
            report.advanced.append(iteration_id)
        report.swept = self._sweep_workspaces()
        if self.watch is not None:  # last: its probe waits up to a second for the workers' replies
            watched = self.watch.check(now)
            report.no_workers, report.workers_back = watched.marked, watched.cleared
        return report

    def _sweep_workspaces(self) -> list[str]:
        """Every ``workspace_sweep_s``; a store that does not answer is tried at the next one."""
        if time.monotonic() - self._swept_at < self.settings.workspace_sweep_s:
            return []
        self._swept_at = time.monotonic()
        try:
            return get_store(self.settings).sweep()
        except ServiceUnavailable as exc:
            log.warning("could not sweep the workspace store: %s", exc)
            return []

    def _revive_or_fail(self, now: datetime, sent_before: datetime, report: ReconcileReport) -> None:
        stale = now - timedelta(seconds=self.settings.heartbeat_stale_s)
        with transaction(self.dispatcher, self.bus) as out:
            rows = out.session.execute(
                select(Iteration, Project.status)
                .join(Project, Project.id == Iteration.project_id)
                .where(
                    unfinished(),
                    Iteration.status == IterationStatus.RUNNING,
                    Iteration.heartbeat_at < stale,
                )
                .with_for_update(of=Iteration)
            ).all()
            for iteration, project_status in rows:
                if (
                    project_status != ProjectStatus.RUNNING
                    or iteration.attempt >= self.settings.max_iteration_attempts
                ):
                    error = f"its worker stopped answering {iteration.attempt} time(s)"
                    fail_iteration(
                        out.session, iteration.id, error, kind=ErrorKind.WORKER_LOST, finished_at=now
                    )
                    report.failed.append(iteration.id)
                elif _not_resent_since(iteration, sent_before):
                    out.enqueue(iteration.project_id, iteration)
                    report.requeued.append(iteration.id)

    def _resend_queued(self, sent_before: datetime, report: ReconcileReport) -> None:
        with transaction(self.dispatcher, self.bus) as out:
            for iteration in _locked_iterations(
                out.session,
                unfinished(),
                Iteration.status == IterationStatus.QUEUED,
                Project.status == ProjectStatus.RUNNING,
                Iteration.enqueued_at < sent_before,
            ):
                out.enqueue(iteration.project_id, iteration)
                report.requeued.append(iteration.id)

    def _resend_deliveries(self, sent_before: datetime, report: ReconcileReport) -> None:
        """A pending delivery whose message was lost (a coordinator killed mid-delivery, a broker
        restart) is sent again; one still running ignores the extra message (its lease)."""
        with transaction(self.dispatcher, self.bus) as out:
            for delivery in out.session.scalars(
                select(Delivery)
                .where(Delivery.status == DeliveryStatus.PENDING, Delivery.enqueued_at < sent_before)
                .with_for_update(skip_locked=True)
            ):
                out.deliver(delivery)
                report.redelivered.append(delivery.id)

    def _stop_leftovers(self, now: datetime, report: ReconcileReport) -> None:
        cutoff = now - timedelta(seconds=STOP_GRACE_S)
        with transaction(self.dispatcher, self.bus) as out:
            for iteration in _locked_iterations(
                out.session,
                unfinished(),
                Iteration.status == IterationStatus.RUNNING,
                Project.status == ProjectStatus.STOPPED,
                Project.finished_at < cutoff,
            ):
                error = "terminated: the project was stopped"
                fail_iteration(out.session, iteration.id, error, advanced=True, finished_at=now)
                report.terminated.append(iteration.id)
                if self.terminate is not None and iteration.celery_task_id:
                    self.terminate(iteration.celery_task_id)

    def _half_open(self, report: ReconcileReport) -> None:
        with transaction(self.dispatcher, self.bus) as out:
            paused = out.session.scalars(
                select(Project)
                .where(
                    Project.status == ProjectStatus.PAUSED,
                    Project.pause_reason == PauseReason.CIRCUIT_BREAKER,
                )
                .with_for_update()
            ).all()
            for project in paused:
                if lifecycle.try_half_open(out, project):
                    report.trials.append(project.id)

    def _pump_waiting(self, report: ReconcileReport) -> None:
        """Send iterations that wait for room (after a restart, nothing else would send them)."""
        with transaction(self.dispatcher, self.bus) as out:
            waiting = out.session.scalars(
                select(Project)
                .where(
                    Project.status == ProjectStatus.RUNNING,
                    Project.id.in_(
                        select(Iteration.project_id).where(
                            unfinished(),
                            Iteration.status == IterationStatus.QUEUED,
                            Iteration.enqueued_at.is_(None),
                        )
                    ),
                )
                .with_for_update()
            ).all()
            for project in waiting:
                if pump(out, project, ProjectConfig.model_validate(project.config)):
                    report.pumped.append(project.id)

    def _unadvanced(self, now: datetime) -> list[tuple[str, str]]:
        cutoff = now - timedelta(seconds=REPORT_GRACE_S)
        with transaction(self.dispatcher, self.bus) as out:
            rows = out.session.execute(
                select(Iteration.project_id, Iteration.id).where(
                    Iteration.status.in_([IterationStatus.SUCCEEDED, IterationStatus.FAILED]),
                    Iteration.advanced.is_(False),
                    Iteration.finished_at < cutoff,
                )
            ).all()
        return [(row[0], row[1]) for row in rows]

    def loop(self, stop: threading.Event, lease: DatabaseLease | None = None) -> None:
        """Run every ``reconcile_interval_s`` until ``stop`` is set; errors are logged, not fatal.

        The first pass that succeeds resumes (``run_once(resume=True)``): the loop starts with its
        coordinator, so this is what a restarted coordinator does at once. With a ``lease`` (the
        coordinator replicas, orchestrator.scheduling.lease) passes run only while this replica
        holds it, renewed every tick; taking it over is a first pass, and so is a holder's
        answer to a replica that starts and asks for one. The lease is given back on ``stop``.
        """
        resume, last_pass = True, float("-inf")
        tick = self.settings.reconcile_interval_s
        if lease is not None:
            tick = min(tick, lease.renew_every_s)
        while True:
            try:
                holding = Holding.KEPT if lease is None else lease.renew()
                if holding is None:
                    resume = True  # whoever holds it now, this replica resumes if it takes it later
                elif (
                    holding is Holding.TAKEN
                    or resume
                    or time.monotonic() - last_pass >= self.settings.reconcile_interval_s
                ):
                    last_pass = time.monotonic()
                    self._pass(resume=resume or holding is Holding.TAKEN)
                    resume = False
            except Exception:
                log.exception("reconcile pass failed")
            if stop.wait(tick):
                break
        if lease is not None:
            try:
                lease.release()
            except Exception:
                log.exception("could not give back the %s lease; it expires by itself", lease.name)

    def _pass(self, *, resume: bool) -> None:
        report = self.run_once(resume=resume)
        if any(
            (
                report.requeued,
                report.failed,
                report.advanced,
                report.terminated,
                report.trials,
                report.pumped,
                report.no_workers,
                report.workers_back,
                report.redelivered,
                report.swept,
            )
        ):
            log.info("reconcile: %s", report)
