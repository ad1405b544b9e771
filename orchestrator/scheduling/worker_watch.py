"""Noticing that waiting iterations have no worker to run them (issue #10).

A worker that is gone (a crash after which Celery exits 0, a host scaled to zero, a deploy gone
wrong) leaves its iterations queued, and the reconcile loop resends them into a queue nobody
reads: without this watch ``raas follow`` waits in silence and ``raas status`` says running
forever. Each reconcile pass that finds work waiting asks the broker which nodes consume the
``iterations`` queue (one broadcast that waits ``PROBE_TIMEOUT_S``; a pass with nothing waiting
asks nothing). When none has for ``RAAS_NO_WORKERS_AFTER_S``, every running project with work
waiting is marked (``Project.waiting_for_worker_since``) and told (a ``no_workers`` event);
when a consumer answers again the marks are cleared and the projects told (``workers_back``).

The mark lives in Postgres, not in this process: a restarted coordinator or another replica
clears what one set, ``raas status`` and ``/metrics`` read it, and the row lock taken to set
or clear it keeps replicas from announcing it twice. A broker that does not answer says
nothing about workers, so it changes nothing here. The embedded engine gives no probe: its
worker threads live in its own process and exist whenever it does, so nothing is reported there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from celery import Celery
from kombu.exceptions import OperationalError
from redis import RedisError
from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from orchestrator.scheduling.dispatch import Dispatcher
from orchestrator.scheduling.outbox import transaction
from shared.celery_app import ITERATIONS_QUEUE
from shared.db import session_scope
from shared.event_payloads import NoWorkers, WorkersBack
from shared.events import EventBus
from shared.models import Iteration, IterationStatus, Project, ProjectStatus, unfinished
from shared.settings import Settings

log = logging.getLogger(__name__)
#: How long a probe waits for the nodes' replies (on loopback or a LAN they take milliseconds).
PROBE_TIMEOUT_S = 1.0
_ENDED = (ProjectStatus.COMPLETED, ProjectStatus.FAILED, ProjectStatus.STOPPED)

ConsumerProbe = Callable[[], list[str] | None]
"""The names of the live nodes consuming the iterations queue; None if the broker did not answer."""


class CeleryConsumers:
    """A :data:`ConsumerProbe` that asks every Celery node for its queues (``active_queues``)."""

    def __init__(
        self, app: Celery, queue: str = ITERATIONS_QUEUE, timeout_s: float = PROBE_TIMEOUT_S
    ) -> None:
        self._app = app
        self._queue = queue
        self._timeout_s = timeout_s

    def __call__(self) -> list[str] | None:
        try:
            with self._app.connection_for_write() as connection:
                # No retries: kombu's would hold the reconcile pass ~6 s while the broker is down.
                connection.ensure_connection(max_retries=0)
                inspect = self._app.control.inspect(timeout=self._timeout_s, connection=connection)
                replies = inspect.active_queues() or {}
        except (OperationalError, OSError, RedisError) as exc:
            log.warning("worker watch: the broker does not answer (%s: %s)", type(exc).__name__, exc)
            return None
        return sorted(
            node
            for node, queues in replies.items()
            if any(q.get("name") == self._queue for q in queues or ())
        )


@dataclass
class WatchReport:
    marked: list[str] = field(default_factory=list)  # projects told no_workers in this pass
    cleared: list[str] = field(default_factory=list)  # projects told workers_back


def _utc(value: datetime) -> datetime:
    # SQLite hands timestamps back without their zone; they were written in UTC.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


class WorkerWatch:
    """Marks and clears projects waiting for a worker; :meth:`check` runs once per reconcile pass."""

    def __init__(
        self, settings: Settings, dispatcher: Dispatcher, bus: EventBus, probe: ConsumerProbe
    ) -> None:
        self.settings = settings
        self.dispatcher = dispatcher
        self.bus = bus
        self.probe = probe
        # The first probe that found no consumer since the last one that found one (or found no work).
        self._unseen_since: datetime | None = None

    def check(self, now: datetime) -> WatchReport:
        report = WatchReport()
        waiting = self._waiting(now)
        marked = self._marked()
        if not waiting and not marked:
            self._unseen_since = None
            return report
        consumers = self.probe()
        if consumers is None:
            return report
        if consumers:
            self._unseen_since = None
            report.cleared = self._clear(marked, consumers, now)
        else:
            self._unseen_since = self._unseen_since or now
            report.marked = self._mark(waiting, self._unseen_since, now)
        return report

    def _waiting(self, now: datetime) -> dict[str, datetime]:
        """Running projects with iterations sent and not taken (or whose worker died): since when."""
        stale = now - timedelta(seconds=self.settings.heartbeat_stale_s)
        with session_scope() as session:
            rows = session.execute(
                select(Iteration.project_id, func.min(Iteration.created_at))
                .join(Project, Project.id == Iteration.project_id)
                .where(
                    unfinished(),
                    Project.status == ProjectStatus.RUNNING,
                    Iteration.enqueued_at.is_not(None),
                    or_(Iteration.status == IterationStatus.QUEUED, Iteration.heartbeat_at < stale),
                )
                .group_by(Iteration.project_id)
            ).all()
        return {project_id: _utc(oldest) for project_id, oldest in rows}

    def _marked(self) -> list[str]:
        """The marked projects that have not ended; an ended project's mark is dropped unsaid
        (its follower stopped at its end)."""
        with session_scope() as session:
            rows = session.execute(
                select(Project.id, Project.status).where(Project.waiting_for_worker_since.is_not(None))
            ).all()
            ended = [project_id for project_id, status in rows if status in _ENDED]
            for project in self._locked(session, ended, marked=True):
                project.waiting_for_worker_since = None
        return [project_id for project_id, status in rows if status not in _ENDED]

    def _mark(self, waiting: dict[str, datetime], unseen_since: datetime, now: datetime) -> list[str]:
        after = timedelta(seconds=self.settings.no_workers_after_s)
        # Waiting for a worker since both held: the work was there and no worker was.
        since = {project_id: max(oldest, unseen_since) for project_id, oldest in waiting.items()}
        due = [project_id for project_id, moment in since.items() if now - moment >= after]
        marked: list[str] = []
        with transaction(self.dispatcher, self.bus) as out:
            for project in self._locked(out.session, due, marked=False):
                if project.status != ProjectStatus.RUNNING:
                    continue
                project.waiting_for_worker_since = since[project.id]
                out.event(project.id, NoWorkers(since=since[project.id], queue=ITERATIONS_QUEUE))
                marked.append(project.id)
        if marked:
            log.warning("no worker consumes the %s queue; %d project(s) wait", ITERATIONS_QUEUE, len(marked))
        return marked

    def _clear(self, marked: list[str], consumers: list[str], now: datetime) -> list[str]:
        cleared: list[str] = []
        with transaction(self.dispatcher, self.bus) as out:
            for project in self._locked(out.session, marked, marked=True):
                waited_s = (now - _utc(project.waiting_for_worker_since or now)).total_seconds()
                project.waiting_for_worker_since = None
                out.event(project.id, WorkersBack(workers=consumers, waited_s=round(max(waited_s, 0.0), 1)))
                cleared.append(project.id)
        return cleared

    @staticmethod
    def _locked(session: Session, project_ids: Collection[str], *, marked: bool) -> list[Project]:
        """The projects among ``project_ids`` that are (or are not) marked, locked. A replica that
        changed a mark first holds the row until it commits; the condition is then read again
        and this one skips the project, so nothing is announced twice."""
        if not project_ids:
            return []
        mark = Project.waiting_for_worker_since
        query = select(Project).where(
            Project.id.in_(project_ids), mark.is_not(None) if marked else mark.is_(None)
        )
        return list(session.scalars(query.with_for_update()))
