"""Evaluation runs (issue #27): a suite of tasks × configurations × attempts, each attempt an
ordinary project.

An :class:`EvalRun` holds what was asked (the suite, packed, with its digest; the configurations;
``k``; the eval-wide budget and concurrency) and what makes it reproducible (harness versions,
model names, images, the raas version). Every task × config × attempt is one :class:`EvalAttempt`
row, unique on those three, written when the run is created: the coordinator's eval driver
(orchestrator.evals.driver) walks the rows — claims a pending one, makes its project, watches it
end, has a worker run the hidden test (workers.evaluation) — so an interrupted run resumes where
it was, and a finished attempt is never started (nor charged) again.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Any

from sqlalchemy import Boolean, ForeignKey, Index, Integer, LargeBinary, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from shared.models.base import Base, enum_column, new_id, timestamp


class EvalRunStatus(str, Enum):
    RUNNING = "running"  # the driver starts attempts while it has budget and slots
    PAUSED = "paused"  # the eval-wide budget cannot pay the next attempt's cap (status_reason)
    COMPLETED = "completed"  # every attempt is done


class AttemptState(str, Enum):
    PENDING = "pending"  # not started yet
    STARTING = "starting"  # claimed by a driver: its project is being made
    RUNNING = "running"  # its project runs (``project_id``)
    TESTING = "testing"  # its project ended; a worker runs the hidden test
    DONE = "done"  # ``outcome`` is set: never started again
    PAUSED = "paused"  # not run: the eval-wide budget ran out before it


class AttemptOutcome(str, Enum):
    RESOLVED = "resolved"  # tests/test.sh exited 0 on the final workspace
    FAILED = "failed"  # it did not: the agent's failure
    INFRA = "infra"  # sandbox, model errors after retries, a timeout: ``infra_cause`` says which


class EvalRun(Base):
    __tablename__ = "eval_runs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    # None: made with the cluster token. Its attempts' projects belong to the same tenant.
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    suite_name: Mapped[str] = mapped_column(String(100))
    suite_digest: Mapped[str] = mapped_column(String(64))
    # The suite directory as a .tar.gz: the driver makes each attempt's project from it and a
    # worker unpacks the task's hidden tests from it, outside any workspace.
    suite_archive: Mapped[bytes] = mapped_column(LargeBinary)
    # [{"id", "difficulty", "tags", "time_limit_s", "budget_usd", "environment"}], in suite order.
    tasks: Mapped[list[Any]]
    # [{"name", "toml"}]: each configuration's raas.toml fragment as given.
    configs: Mapped[list[Any]]
    k: Mapped[int] = mapped_column(Integer)
    concurrency: Mapped[int] = mapped_column(Integer)
    budget_usd: Mapped[Decimal | None]  # None: no eval-wide limit (each attempt keeps its cap)
    attempt_budget_usd: Mapped[Decimal | None]  # the per-attempt cap over the tasks' own
    # {"raas_version", "harnesses": {name: version}, "models": [...], "images": [...]}
    reproducibility: Mapped[dict[str, Any]]
    status: Mapped[EvalRunStatus] = mapped_column(enum_column(EvalRunStatus), default=EvalRunStatus.RUNNING)
    status_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = timestamp(nullable=False)
    finished_at: Mapped[datetime | None] = timestamp()


class EvalAttempt(Base):
    __tablename__ = "eval_attempts"
    __table_args__ = (
        UniqueConstraint("run_id", "task_key", "config", "attempt"),
        # The driver reads the attempts not yet done on every pass: the index holds only those.
        Index(
            "ix_eval_attempts_open",
            "run_id",
            postgresql_where=text("state <> 'done'"),
            sqlite_where=text("state <> 'done'"),
        ),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    run_id: Mapped[str] = mapped_column(ForeignKey("eval_runs.id", ondelete="CASCADE"), index=True)
    task_key: Mapped[str] = mapped_column(String(100))
    config: Mapped[str] = mapped_column(String(100))
    attempt: Mapped[int] = mapped_column(Integer)
    state: Mapped[AttemptState] = mapped_column(enum_column(AttemptState), default=AttemptState.PENDING)
    project_id: Mapped[str | None] = mapped_column(ForeignKey("projects.id", ondelete="SET NULL"), index=True)
    # The cap this attempt's project got ($): what the eval-wide budget holds back while it runs.
    cap_usd: Mapped[Decimal] = mapped_column(default=Decimal(0))
    outcome: Mapped[AttemptOutcome | None] = mapped_column(enum_column(AttemptOutcome))
    infra_cause: Mapped[str | None] = mapped_column(Text)
    # Why its project ended: its status and reason, on one line (the report's stop reasons).
    stop_reason: Mapped[str | None] = mapped_column(Text)
    test_exit_code: Mapped[int | None] = mapped_column(Integer)
    test_output_tail: Mapped[str | None] = mapped_column(Text)
    image: Mapped[str | None] = mapped_column(String(300))  # the test container's image id
    # Read from the project's Message rows (the gateway's receipts) when it ended; frozen then.
    cost_usd: Mapped[Decimal] = mapped_column(default=Decimal(0))
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_read_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_write_tokens: Mapped[int] = mapped_column(Integer, default=0)
    iterations: Mapped[int] = mapped_column(Integer, default=0)
    wall_time_s: Mapped[float | None]
    claimed_at: Mapped[datetime | None] = timestamp()  # when STARTING was claimed
    test_sent_at: Mapped[datetime | None] = timestamp()  # when the hidden test was last sent
    started_at: Mapped[datetime | None] = timestamp()
    finished_at: Mapped[datetime | None] = timestamp()


class EvalCheck(Base):
    """One task of a ``raas eval check --remote``: its folder (packed) checked on a worker
    (``raas.eval_check``): admitted when its oracle passes and its unsolved workspace fails.
    The rows of one check share ``check_id``; ``admitted`` is None until a worker answered."""

    __tablename__ = "eval_checks"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    check_id: Mapped[str] = mapped_column(String(32), index=True)
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    task_key: Mapped[str] = mapped_column(String(100))
    task_archive: Mapped[bytes] = mapped_column(LargeBinary)
    image: Mapped[str | None] = mapped_column(String(300))  # None: the worker's sandbox image
    timeout_s: Mapped[float]
    admitted: Mapped[bool | None] = mapped_column(Boolean)
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = timestamp(nullable=False)
    sent_at: Mapped[datetime | None] = timestamp()
    finished_at: Mapped[datetime | None] = timestamp()
