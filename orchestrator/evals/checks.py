"""``raas eval check --remote``: a suite's tasks checked on the workers, one row per task.

The upload (``suite/``) is checked whole as ``raas eval run``'s is; each task's folder is packed
into its row and ``raas.eval_check`` is sent by name after the commit (the coordinator never
imports a worker). A worker answers each row once (its write is conditional); the eval driver
sends again a row not answered within its time limit and a margin.
"""

from __future__ import annotations

import tempfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from sqlalchemy import select, update

from orchestrator.evals.store import SUITE_DIR
from orchestrator.evals.suite import load_suite
from orchestrator.scheduling import workspace
from shared.archive import pack_directory
from shared.db import session_scope
from shared.errors import NotFound
from shared.models import new_id, utcnow
from shared.models.evals import EvalCheck

# Each container of a check (the unsolved test, the oracle, the solved test) gets at most this.
CHECK_TIMEOUT_S = 300.0
RESEND_MARGIN = timedelta(minutes=5)


@runtime_checkable
class CheckSender(Protocol):
    def check(self, row_id: str) -> None: ...


def create_check(archive: Path, tenant_id: str | None, sender: CheckSender) -> str:
    """Write a row per task of the uploaded suite, then send each to a worker; the check's id.

    Raises:
        InvalidInput: the upload or the suite does not check (as for ``raas eval run``).
    """
    check_id = new_id()
    with tempfile.TemporaryDirectory(prefix="raas-eval-check-") as tmp:
        workspace.unpack_upload(archive, Path(tmp))
        suite = load_suite(Path(tmp) / SUITE_DIR)
        rows = [
            EvalCheck(
                check_id=check_id,
                tenant_id=tenant_id,
                task_key=task.key,
                task_archive=pack_directory(task.path),
                image=task.environment.image if task.environment else None,
                timeout_s=min(CHECK_TIMEOUT_S, task.meta.time_limit_s),
                created_at=utcnow(),
                sent_at=utcnow(),
            )
            for task in suite.tasks
        ]
    with session_scope() as session:
        session.add_all(rows)
        session.flush()
        ids = [row.id for row in rows]
    for row_id in ids:
        sender.check(row_id)
    return check_id


def check_results(check_id: str, tenant_id: str | None) -> list[dict[str, Any]]:
    """Each task's verdict (``admitted`` None: not answered yet), in suite order."""
    with session_scope() as session:
        query = select(EvalCheck.task_key, EvalCheck.admitted, EvalCheck.reason).where(
            EvalCheck.check_id == check_id
        )
        if tenant_id is not None:
            query = query.where(EvalCheck.tenant_id == tenant_id)
        rows = session.execute(query.order_by(EvalCheck.task_key)).all()
    if not rows:
        msg = f"no eval check {check_id!r}"
        raise NotFound(msg)
    return [{"task": key, "admitted": admitted, "reason": reason} for key, admitted, reason in rows]


def resend_lost(sender: CheckSender, now: datetime) -> list[str]:
    """Rows sent longer ago than their time limit (three containers) and a margin, unanswered:
    sent again (a worker that died with one loses nothing but time)."""
    with session_scope() as session:
        rows = session.execute(
            select(EvalCheck.id, EvalCheck.sent_at, EvalCheck.timeout_s).where(EvalCheck.admitted.is_(None))
        ).all()
        late = [
            row_id
            for row_id, sent_at, timeout_s in rows
            if sent_at is None or sent_at < now - timedelta(seconds=3 * timeout_s) - RESEND_MARGIN
        ]
        if late:
            session.execute(update(EvalCheck).where(EvalCheck.id.in_(late)).values(sent_at=now))
    for row_id in late:
        sender.check(row_id)
    return late
