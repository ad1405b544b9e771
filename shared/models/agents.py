"""The agents of a project, their iterations and the messages of each iteration's history."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Any

from sqlalchemy import (
    ColumnElement,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    bindparam,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from shared.models.base import Base, enum_column, new_id, timestamp


class AgentStatus(str, Enum):
    IDLE = "idle"
    WORKING = "working"
    BLOCKED = "blocked"
    COMPLETED = "completed"
    ERROR = "error"


class IterationStatus(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def is_finished(self) -> bool:
        return self in (IterationStatus.SUCCEEDED, IterationStatus.FAILED)


# Queued or running: what a project has in flight or waiting. Written into the SQL as literals,
# never as parameters, so that Postgres matches it to the partial index ix_iterations_unfinished
# also in a prepared statement's generic plan; there a parameter's value is unknown, the planner
# guesses a project's rows from the average project, and a long project's whole history was read.
UNFINISHED_SQL = "status IN ('queued', 'running')"


class ErrorKind(str, Enum):
    """Why an iteration failed: what the coordinator and the circuit breaker act on."""

    API_KEY = "api_key"
    LLM = "llm"
    REFUSAL = "refusal"
    MAX_TOKENS = "max_tokens"
    CONTEXT_TOO_LONG = "context_too_long"
    WORKSPACE = "workspace"
    WORKER_LOST = "worker_lost"
    BUDGET = "budget"
    ENVIRONMENT = "environment"  # the project's [environment] could not be made: it fails
    INTERNAL = "internal"


class Agent(Base):
    __tablename__ = "agents"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    task_id: Mapped[str | None] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    parent_id: Mapped[str | None] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"), index=True)
    depth: Mapped[int] = mapped_column(Integer, default=0)
    category: Mapped[str] = mapped_column(String(50), default="builder")
    # A parallel agent works on a copy of the workspace and hands back a report.
    parallel: Mapped[bool] = mapped_column(default=False)
    # A subagent's instructions, and the parent iteration that spawned it.
    prompt: Mapped[str | None] = mapped_column(Text)
    spawned_by: Mapped[str | None] = mapped_column(String(32), index=True)
    report: Mapped[str | None] = mapped_column(Text)
    status: Mapped[AgentStatus] = mapped_column(enum_column(AgentStatus), default=AgentStatus.IDLE)
    iterations: Mapped[int] = mapped_column(Integer, default=0)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[Decimal] = mapped_column(default=Decimal(0))
    created_at: Mapped[datetime] = timestamp(nullable=False)


class Iteration(Base):
    __tablename__ = "iterations"
    __table_args__ = (
        UniqueConstraint("agent_id", "number"),
        # Unfinished iterations, by project (the scheduler's admission, the budget's holders) or
        # all of them (the reconcile loop): bounded by what is in flight, however long the
        # history. No index leads with status: Postgres took one over the primary key for
        # ``WHERE id = ? AND status = 'running'`` and read every dead entry of 'running'.
        Index(
            "ix_iterations_unfinished",
            "project_id",
            postgresql_where=text(UNFINISHED_SQL),
            sqlite_where=text(UNFINISHED_SQL),
        ),
        Index("ix_iterations_advanced_status", "advanced", "status"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    status: Mapped[IterationStatus] = mapped_column(
        enum_column(IterationStatus), default=IterationStatus.QUEUED
    )
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str | None] = mapped_column(String(200))
    # The Celery task running it, so a stopped project's stragglers can be terminated.
    celery_task_id: Mapped[str | None] = mapped_column(String(64))
    heartbeat_at: Mapped[datetime | None] = timestamp()
    completed_task: Mapped[bool] = mapped_column(default=False)
    summary: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    error_kind: Mapped[ErrorKind | None] = mapped_column(enum_column(ErrorKind))
    base_sha: Mapped[str | None] = mapped_column(String(64))
    commit_sha: Mapped[str | None] = mapped_column(String(64))
    files_changed: Mapped[list[Any]] = mapped_column(default=list)
    reserved_usd: Mapped[Decimal] = mapped_column(default=Decimal(0))
    cost_usd: Mapped[Decimal] = mapped_column(default=Decimal(0))
    # Set by the coordinator once it has acted on this iteration's report, so that a
    # report delivered twice advances the project once.
    advanced: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = timestamp(nullable=False)
    # When a message for it was last sent to the broker; the reconcile loop resends old ones.
    enqueued_at: Mapped[datetime | None] = timestamp()
    started_at: Mapped[datetime | None] = timestamp()
    finished_at: Mapped[datetime | None] = timestamp()


def unfinished() -> ColumnElement[bool]:
    """``UNFINISHED_SQL`` in a query, with the statuses rendered as literals (see there)."""
    statuses = [IterationStatus.QUEUED, IterationStatus.RUNNING]
    return Iteration.status.in_(bindparam("unfinished", statuses, expanding=True, literal_execute=True))


class Message(Base):
    """One message of an agent's history; assistant messages carry the call's usage and cost."""

    __tablename__ = "messages"
    # One row per message of one attempt: a re-run after a dead worker is a new attempt, so an
    # LLM call is recorded (and charged) exactly once.
    __table_args__ = (UniqueConstraint("iteration_id", "attempt", "seq"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"), index=True)
    iteration_id: Mapped[str] = mapped_column(ForeignKey("iterations.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    seq: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[list[Any]]
    model: Mapped[str | None] = mapped_column(String(100))
    stop_reason: Mapped[str | None] = mapped_column(String(50))
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_creation_input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_read_input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[Decimal] = mapped_column(default=Decimal(0))
    duration_s: Mapped[float | None]
    created_at: Mapped[datetime] = timestamp(nullable=False)
