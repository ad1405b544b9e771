"""The coordinator's trigger clock: fires due schedule slots and resends what a crash lost.

Every coordinator runs it (no lease: a slot is claimed in the database, and a start claims its
run row, so two clocks never double anything). Each pass:

- claims the due schedule slots (:mod:`orchestrator.triggers.schedule`) and launches their runs;
- resends received runs whose launch may have been lost (all of them on a coordinator's first
  pass, as the reconcile loop resumes; later those older than ``RESEND_AFTER_S``);
- retries queued runs (waiting for a busy subject or the concurrency cap);
- gives a run stuck in ``starting`` (its coordinator died while making the project) back to
  ``received``: its project, if one was made, was never started, and a new one is made.

Time is injected (``now``), so tests drive slots without waiting for them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import select, update

from orchestrator.triggers.launch import Launcher
from orchestrator.triggers.schedule import claim_due
from shared.db import session_scope
from shared.models import RunStatus, TriggerRun, utcnow

log = logging.getLogger(__name__)
TICK_S = 5.0
RESEND_AFTER_S = 60.0
STALE_STARTING_S = 900.0


class TriggerClock:
    def __init__(self, launcher: Launcher, clock: Callable[[], datetime] = utcnow) -> None:
        self.launcher = launcher
        self.clock = clock
        self._first = True

    def tick(self, now: datetime | None = None) -> list[str]:
        """One pass: the runs launched (slots fired and runs resent)."""
        now = now or self.clock()
        launched = claim_due(now)
        launched += [run_id for run_id in self._resend(now) if run_id not in launched]
        self._first = False
        for run_id in launched:
            self.launcher.launch(run_id)
        return launched

    def _resend(self, now: datetime) -> list[str]:
        sent_before = now if self._first else now - timedelta(seconds=RESEND_AFTER_S)
        with session_scope() as session:
            session.execute(
                update(TriggerRun)
                .where(
                    TriggerRun.status == RunStatus.STARTING,
                    TriggerRun.started_at < now - timedelta(seconds=STALE_STARTING_S),
                    TriggerRun.project_id.is_(None),
                )
                .values(status=RunStatus.RECEIVED)
                .execution_options(synchronize_session=False)
            )
            lost = (TriggerRun.status == RunStatus.RECEIVED) & (TriggerRun.enqueued_at < sent_before)
            rows = session.scalars(
                select(TriggerRun).where(lost | (TriggerRun.status == RunStatus.QUEUED)).limit(500)
            ).all()
            for row in rows:
                row.enqueued_at = now
            return [row.id for row in rows]

    def loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.tick()
            except Exception:  # a database restart: the next pass tries again
                log.warning("trigger clock pass failed", exc_info=True)
            stop.wait(TICK_S)
